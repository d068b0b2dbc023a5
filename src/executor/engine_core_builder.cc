// make_engine_core_config / build_engine_core: the only place that sizes the KV cache.
#include "executor/engine_core_builder.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "runtime/gpu_memory.h"

namespace llmserve {

EngineCoreInfo EngineCoreConfig::info() const {
  return {vocab_size, scheduler.max_model_len, scheduler.policy, model_eos_token_ids, scheduler.grammar_compiler};
}

StatusOr<EngineCoreConfig> make_engine_core_config(CausalLM &model, const EngineArgs &args) {
  const ModelConfig &mc = model.config();
  EngineCoreConfig c;
  c.vocab_size = mc.vocab_size;
  SchedulerConfig &sc = c.scheduler;
  sc.max_model_len = args.max_model_len > 0 ? args.max_model_len : mc.max_position_embeddings;
  if (mc.max_position_embeddings > 0 && sc.max_model_len > mc.max_position_embeddings) {
    return invalid_argument("max_model_len (" + std::to_string(sc.max_model_len) +
                            ") is larger than the model's max_position_embeddings (" +
                            std::to_string(mc.max_position_embeddings) + ")");
  }
  sc.max_num_seqs = args.max_num_seqs;
  sc.max_num_batched_tokens = args.max_num_batched_tokens;
  sc.enable_chunked_prefill = args.enable_chunked_prefill;
  sc.policy = args.scheduling_policy;
  sc.log_stats = args.log_stats;
  sc.async_scheduling = args.async_scheduling.value_or(!model.device().is_cpu());
  if (args.block_size < 1) return invalid_argument("block_size must be at least 1");
  c.cache.block_size = args.block_size;
  c.cache.enable_prefix_caching = args.enable_prefix_caching;
  ModelRunnerConfig graphs;
  graphs.cuda_graph_mode = args.cuda_graph_mode;
  graphs.cuda_graph_capture_sizes = args.cuda_graph_capture_sizes;
  graphs.run_graph_batches_eagerly = args.run_graph_batches_eagerly;
  int64_t num_blocks = 0;
  if (args.num_kv_cache_tokens <= 0 && !model.device().is_cpu()) {
    ASSIGN_OR_RETURN(KVCachePlan plan,
                     plan_gpu_kv_cache(model, args.block_size, std::min<int64_t>(sc.max_num_batched_tokens, INT32_MAX),
                                       sc.max_num_seqs, sc.max_model_len, args.gpu_memory_utilization, graphs));
    c.kv_cache_summary = plan.summary;
    std::fprintf(stderr, "llmserve: %s\n", plan.summary.c_str());
    num_blocks = plan.num_blocks;
  } else {
    const int64_t tokens =
        args.num_kv_cache_tokens > 0 ? args.num_kv_cache_tokens : std::max<int64_t>(sc.max_model_len, 4096);
    num_blocks = (tokens + args.block_size - 1) / args.block_size;
  }
  if (num_blocks > INT32_MAX) return invalid_argument("num_kv_cache_tokens is too large");
  c.cache.num_blocks = static_cast<int32_t>(num_blocks);
  RETURN_IF_ERROR(sc.validate(c.cache));

  // As int32 the way the frontend used them (resolve_eos_token_ids drops ids outside the vocabulary).
  for (int64_t id : mc.eos_token_ids) c.model_eos_token_ids.push_back(static_cast<int32_t>(id));
  c.runner.num_blocks = c.cache.num_blocks;
  c.runner.block_size = c.cache.block_size;
  c.runner.max_num_tokens = sc.max_num_batched_tokens;
  c.runner.max_num_reqs = sc.max_num_seqs;
  c.runner.max_model_len = sc.max_model_len;
  c.runner.seed = args.seed;
  c.runner.cuda_graph_mode = args.cuda_graph_mode;
  c.runner.cuda_graph_capture_sizes = args.cuda_graph_capture_sizes;
  c.runner.run_graph_batches_eagerly = args.run_graph_batches_eagerly;
  return c;
}

EngineCoreInstance build_engine_core(CausalLM &model, const EngineCoreConfig &config) {
  EngineCoreInstance e;
  e.runner = std::make_unique<ModelRunner>(model, config.runner);
  e.core = std::make_unique<EngineCore>(config.scheduler, config.cache, *e.runner);
  return e;
}

}  // namespace llmserve

// make_engine_core_config / build_engine_core: the only place that sizes the KV cache and picks the EOS ids.
#include "frontend/engine_core_builder.h"

#include <algorithm>
#include <string>

namespace llmserve {

StatusOr<EngineCoreConfig> make_engine_core_config(const ModelConfig &mc, const Tokenizer *tokenizer,
                                                   const EngineArgs &args) {
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
  sc.log_stats = args.log_stats;
  if (args.block_size < 1) return invalid_argument("block_size must be at least 1");
  c.cache.block_size = args.block_size;
  c.cache.enable_prefix_caching = args.enable_prefix_caching;
  const int64_t tokens =
      args.num_kv_cache_tokens > 0 ? args.num_kv_cache_tokens : std::max<int64_t>(sc.max_model_len, 4096);
  const int64_t num_blocks = (tokens + args.block_size - 1) / args.block_size;
  if (num_blocks > INT32_MAX) return invalid_argument("num_kv_cache_tokens is too large");
  c.cache.num_blocks = static_cast<int32_t>(num_blocks);
  RETURN_IF_ERROR(sc.validate(c.cache));

  if (tokenizer != nullptr && tokenizer->eos_token_id()) c.eos_token_id = tokenizer->eos_token_id();
  std::vector<int32_t> all_eos;
  for (int64_t id : mc.eos_token_ids) all_eos.push_back(static_cast<int32_t>(id));
  if (tokenizer != nullptr) {
    for (int32_t id : tokenizer->eos_token_ids()) all_eos.push_back(id);
  }
  if (!c.eos_token_id && !all_eos.empty()) c.eos_token_id = all_eos.front();
  for (int32_t id : all_eos) {
    if (id >= 0 && id < mc.vocab_size && id != c.eos_token_id &&
        std::find(c.extra_eos_ids.begin(), c.extra_eos_ids.end(), id) == c.extra_eos_ids.end()) {
      c.extra_eos_ids.push_back(id);
    }
  }
  c.runner.num_blocks = c.cache.num_blocks;
  c.runner.block_size = c.cache.block_size;
  c.runner.seed = args.seed;
  if (c.eos_token_id) c.runner.eos_token_ids.push_back(*c.eos_token_id);
  c.runner.eos_token_ids.insert(c.runner.eos_token_ids.end(), c.extra_eos_ids.begin(), c.extra_eos_ids.end());
  return c;
}

EngineCoreInstance build_engine_core(CausalLM &model, const EngineCoreConfig &config) {
  EngineCoreInstance e;
  e.runner = std::make_unique<ModelRunner>(model, config.runner);
  e.core = std::make_unique<EngineCore>(config.scheduler, config.cache, *e.runner);
  return e;
}

}  // namespace llmserve

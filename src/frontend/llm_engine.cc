// LLMEngine: request validation and fan-out, the core step, output processing.
#include "frontend/llm_engine.h"

#include <algorithm>
#include <cstdio>

#include "runtime/gpu_memory.h"

namespace llmserve {

StatusOr<std::unique_ptr<LLMEngine>> LLMEngine::create(CausalLM &model, const Tokenizer *tokenizer,
                                                       const EngineArgs &args) {
  const ModelConfig &mc = model.config();
  std::unique_ptr<LLMEngine> e(new LLMEngine(model, tokenizer));
  SchedulerConfig &sc = e->scheduler_config_;
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
  KVCacheConfig cache;
  cache.block_size = args.block_size;
  cache.enable_prefix_caching = args.enable_prefix_caching;
  int64_t num_blocks = 0;
  if (args.num_kv_cache_tokens <= 0 && !model.device().is_cpu()) {
    ASSIGN_OR_RETURN(KVCachePlan plan,
                     plan_gpu_kv_cache(model, args.block_size, std::min<int64_t>(sc.max_num_batched_tokens, INT32_MAX),
                                       sc.max_num_seqs, sc.max_model_len, args.gpu_memory_utilization));
    e->kv_cache_summary_ = plan.summary;
    std::fprintf(stderr, "llmserve: %s\n", plan.summary.c_str());
    num_blocks = plan.num_blocks;
  } else {
    const int64_t tokens =
        args.num_kv_cache_tokens > 0 ? args.num_kv_cache_tokens : std::max<int64_t>(sc.max_model_len, 4096);
    num_blocks = (tokens + args.block_size - 1) / args.block_size;
  }
  if (num_blocks > INT32_MAX) return invalid_argument("num_kv_cache_tokens is too large");
  cache.num_blocks = static_cast<int32_t>(num_blocks);
  RETURN_IF_ERROR(sc.validate(cache));

  if (tokenizer != nullptr && tokenizer->eos_token_id()) e->eos_token_id_ = tokenizer->eos_token_id();
  std::vector<int32_t> all_eos;
  for (int64_t id : mc.eos_token_ids) all_eos.push_back(static_cast<int32_t>(id));
  if (tokenizer != nullptr) {
    for (int32_t id : tokenizer->eos_token_ids()) all_eos.push_back(id);
  }
  if (!e->eos_token_id_ && !all_eos.empty()) e->eos_token_id_ = all_eos.front();
  for (int32_t id : all_eos) {
    if (id >= 0 && id < mc.vocab_size && id != e->eos_token_id_ &&
        std::find(e->extra_eos_ids_.begin(), e->extra_eos_ids_.end(), id) == e->extra_eos_ids_.end()) {
      e->extra_eos_ids_.push_back(id);
    }
  }
  ModelRunnerConfig rc;
  rc.num_blocks = cache.num_blocks;
  rc.block_size = cache.block_size;
  rc.max_num_tokens = sc.max_num_batched_tokens;
  rc.max_num_reqs = sc.max_num_seqs;
  rc.max_model_len = sc.max_model_len;
  e->num_kv_blocks_ = cache.num_blocks;
  e->block_size_ = cache.block_size;
  rc.seed = args.seed;
  if (e->eos_token_id_) rc.eos_token_ids.push_back(*e->eos_token_id_);
  rc.eos_token_ids.insert(rc.eos_token_ids.end(), e->extra_eos_ids_.begin(), e->extra_eos_ids_.end());
  e->runner_ = std::make_unique<ModelRunner>(model, rc);
  e->core_ = std::make_unique<EngineCore>(sc, cache, *e->runner_);
  return e;
}

Status LLMEngine::add_request(const std::string &request_id, const PromptInput &prompt, const SamplingParams &params) {
  const int64_t vocab = model_.config().vocab_size;
  if (!processor_.child_ids(request_id).empty()) {
    return {StatusCode::kAlreadyExists, "request id '" + request_id + "' is already in use"};
  }
  RETURN_IF_ERROR(params.validate(vocab));
  if (params.prompt_logprobs) return unimplemented("prompt_logprobs: not supported yet by the CPU runner");
  if (!params.stop.empty() && tokenizer_ == nullptr) {
    return invalid_argument("stop: stop strings need a tokenizer");
  }
  std::vector<int32_t> ids = prompt.token_ids;
  if (ids.empty()) {
    if (tokenizer_ == nullptr) return invalid_argument("prompt: text prompts need a tokenizer");
    ids = tokenizer_->encode(prompt.text, true);
  }
  if (ids.empty()) return invalid_argument("prompt: the prompt cannot be empty");
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) {
      return invalid_argument("prompt: token id " + std::to_string(id) + " is outside the vocabulary (" +
                              std::to_string(vocab) + ")");
    }
  }
  const int64_t len = static_cast<int64_t>(ids.size());
  if (len >= max_model_len()) {
    return invalid_argument("prompt: the prompt (length " + std::to_string(len) +
                            ") is longer than the maximum model length of " + std::to_string(max_model_len()));
  }
  if (params.max_tokens && len + *params.max_tokens > max_model_len()) {
    return invalid_argument("max_tokens: the prompt (" + std::to_string(len) + " tokens) + max_tokens (" +
                            std::to_string(*params.max_tokens) + ") exceeds max_model_len (" +
                            std::to_string(max_model_len()) + ")");
  }
  // The sampler's own range checks, so a bad value fails here and not inside a
  // batch with other requests.
  SamplingParams child = params;
  child.n = 1;
  if (!params.ignore_eos)
    child.stop_token_ids.insert(child.stop_token_ids.end(), extra_eos_ids_.begin(), extra_eos_ids_.end());
  RETURN_IF_ERROR(Sampler::validate(to_sampling_settings(child, {}), vocab));

  EngineCoreRequest parent;
  parent.request_id = request_id;
  parent.prompt_token_ids = ids;
  parent.sampling_params = child;
  parent.sampling_params.n = params.n;
  parent.eos_token_id = eos_token_id_;
  parent.arrival_time = static_cast<double>(totals_.num_steps);
  // n > 1: the engine's fan-out (children "<i>_<id>", seeds seed + i, as vLLM); n = 1 keeps the id.
  std::vector<EngineCoreRequest> children;
  if (params.n == 1) {
    children.push_back(std::move(parent));
    children.back().sampling_params.n = 1;
  } else {
    children = fan_out_parallel_sampling(parent);
  }
  std::vector<std::string> child_ids;
  for (const EngineCoreRequest &c : children) child_ids.push_back(c.request_id);
  for (size_t i = 0; i < children.size(); ++i) {
    Status s = core_->add_request(std::move(children[i]));
    if (!s.ok()) {
      for (size_t j = 0; j < i; ++j) core_->abort_request(child_ids[j]);
      return s;
    }
  }
  processor_.add_request(request_id, prompt.token_ids.empty() ? prompt.text : std::string(), std::move(ids), params,
                         child_ids);
  return ok_status();
}

StatusOr<std::vector<RequestOutput>> LLMEngine::step() {
  ASSIGN_OR_RETURN(EngineCoreOutputs outs, core_->step());
  ++totals_.num_steps;
  last_stats_ = outs.scheduler_stats;
  totals_.prefix_cache_queries += outs.scheduler_stats.prefix_cache_queries;
  totals_.prefix_cache_hits += outs.scheduler_stats.prefix_cache_hits;
  totals_.num_preemptions += outs.scheduler_stats.num_preemptions;
  OutputProcessor::Result r = processor_.process(outs);
  for (const auto &[child_id, stop] : r.stop_string_finished) core_->finish_request_stopped(child_id, stop);
  return std::move(r.request_outputs);
}

bool LLMEngine::abort_request(const std::string &request_id) {
  bool any = false;
  for (const std::string &child : processor_.child_ids(request_id)) any |= core_->abort_request(child);
  return any;
}

}  // namespace llmserve

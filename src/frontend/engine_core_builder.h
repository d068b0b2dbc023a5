// The one home for turning a loaded model and EngineArgs into an EngineCore: resolving the scheduler / KV-cache
// / runner configs and the EOS ids (make_engine_core_config), then building the ModelRunner and the core over
// them (build_engine_core). LLMEngine, the in-process client and the engine-core process all use it, so a core
// built on a thread, in a child process or inline is configured identically.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/status.h"
#include "engine/engine_core.h"
#include "engine/kv_cache_manager.h"
#include "engine/scheduler.h"
#include "model/causal_lm.h"
#include "model/model_config.h"
#include "runtime/model_runner.h"
#include "tokenizer/tokenizer.h"

namespace llmserve {

struct EngineArgs {
  int64_t max_model_len = 0;              // prompt + output tokens at most; 0: the model's
                                          // max_position_embeddings
  int32_t block_size = 16;                // tokens per KV block
  int64_t num_kv_cache_tokens = 0;        // KV cache capacity; 0: max(max_model_len, 4096)
  int32_t max_num_seqs = 256;             // running sequences at most
  int64_t max_num_batched_tokens = 2048;  // token budget of one step (chunked prefill splits longer prompts)
  bool enable_prefix_caching = true;
  bool enable_chunked_prefill = true;
  uint64_t seed = 0;       // engine seed of unseeded sampling
  bool log_stats = false;  // the core stamps QUEUED / SCHEDULED / PREEMPTED events and output times
};

// Everything a core and its frontend agree on, resolved from the model's config, its tokenizer and the args.
struct EngineCoreConfig {
  SchedulerConfig scheduler;
  KVCacheConfig cache;
  ModelRunnerConfig runner;
  int64_t vocab_size = 0;
  std::optional<int32_t> eos_token_id;  // the model's EOS (tokenizer's, else the config's first)
  std::vector<int32_t> extra_eos_ids;   // further EOS ids: stop ids of every request unless ignore_eos (vLLM)
};

// InvalidArgument naming the field for bad args (max_model_len beyond the model's, block_size < 1, a KV cache
// too small for one max_model_len request, ...). `tokenizer` may be null.
StatusOr<EngineCoreConfig> make_engine_core_config(const ModelConfig &model_config, const Tokenizer *tokenizer,
                                                   const EngineArgs &args);

// An executor (the ModelRunner, owning the KV cache) and the EngineCore stepping it; the core is destroyed first.
struct EngineCoreInstance {
  std::unique_ptr<ModelExecutor> runner;  // a ModelRunner; tests may put a fake executor here
  std::unique_ptr<EngineCore> core;
};

// Allocates the KV cache and builds the core. `model` must outlive the result. CHECKs `config` (made by
// make_engine_core_config).
EngineCoreInstance build_engine_core(CausalLM &model, const EngineCoreConfig &config);

}  // namespace llmserve

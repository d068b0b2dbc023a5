// The one home for turning a loaded model and EngineArgs into an EngineCore (vLLM's executor + EngineCore init):
// resolving the scheduler / KV-cache / runner configs and sizing the KV cache (make_engine_core_config), then
// building the ModelRunner and the core over them (build_engine_core). LLMEngine, the in-process client and the
// engine-core process all use it, so a core built inline, on a thread or in a child process is configured
// identically. It needs no tokenizer: the EOS ids the frontend resolves with one reach the core per request.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine_core.h"
#include "engine/kv_cache_manager.h"
#include "engine/scheduler.h"
#include "model/causal_lm.h"
#include "model/model_config.h"
#include "runtime/model_runner.h"

namespace llmserve {

struct EngineArgs {
  int64_t max_model_len = 0;              // prompt + output tokens at most; 0: the model's
                                          // max_position_embeddings
  int32_t block_size = 16;                // tokens per KV block
  int64_t num_kv_cache_tokens = 0;        // KV cache capacity; 0: max(max_model_len, 4096) on CPU, on CUDA what
                                          // gpu_memory_utilization leaves after a profiling forward
  double gpu_memory_utilization = 0.9;    // CUDA: fraction of device memory for weights + activations + KV
  int32_t max_num_seqs = 256;             // running sequences at most
  int64_t max_num_batched_tokens = 2048;  // token budget of one step (chunked prefill splits longer prompts)
  bool enable_prefix_caching = true;
  bool enable_chunked_prefill = true;
  // kPriority: waiting requests are admitted (and running ones preempted last) by add_request's `priority`.
  SchedulingPolicy scheduling_policy = SchedulingPolicy::kFcfs;
  uint64_t seed = 0;       // engine seed of unseeded sampling
  bool log_stats = false;  // the core stamps QUEUED / SCHEDULED / PREEMPTED events and output times
  // CUDA graphs (vLLM's default full_and_piecewise; the CPU runs eagerly whatever the mode). Empty sizes: vLLM's.
  CudaGraphMode cuda_graph_mode = CudaGraphMode::kFullAndPiecewise;
  std::vector<int64_t> cuda_graph_capture_sizes;
  bool run_graph_batches_eagerly = false;  // tests only: ModelRunnerConfig::run_graph_batches_eagerly
  // Two steps in flight (SchedulerConfig::async_scheduling); unset: on for a CUDA model, off on the CPU.
  std::optional<bool> async_scheduling;
};

// What a built core tells its frontend: the limits the frontend validates against and the model config's EOS
// ids (the frontend adds its tokenizer's). In process it is read off the config; the engine-core process sends
// it as its Ready handshake.
struct EngineCoreInfo {
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;
  SchedulingPolicy scheduling_policy = SchedulingPolicy::kFcfs;
  std::vector<int32_t> model_eos_token_ids;  // config.json's eos_token_id (an id or a list), as given
  // In process only (not sent by an engine process): the core's grammar compiler, which the frontend compiles
  // constrained requests with at validation (one cache for both). Null: constrained requests are refused.
  std::shared_ptr<structured::GrammarCompiler> grammar_compiler{};
};

// Everything the core is built from, resolved from the model's config and the args.
struct EngineCoreConfig {
  SchedulerConfig scheduler;
  KVCacheConfig cache;
  ModelRunnerConfig runner;
  int64_t vocab_size = 0;
  std::vector<int32_t> model_eos_token_ids;  // config.json's EOS ids, passed on to the frontend (info())
  std::string kv_cache_summary;              // CUDA: the memory plan's log line (empty on CPU)

  EngineCoreInfo info() const;
};

// InvalidArgument naming the field for bad args (max_model_len beyond the model's, block_size < 1, a KV cache
// too small for one max_model_len request, ...). On CUDA without num_kv_cache_tokens the KV cache is sized by
// a profiling forward of `model` (plan_gpu_kv_cache).
StatusOr<EngineCoreConfig> make_engine_core_config(CausalLM &model, const EngineArgs &args);

// An executor (the ModelRunner, owning the KV cache) and the EngineCore stepping it; the core is destroyed first.
struct EngineCoreInstance {
  std::unique_ptr<ModelExecutor> runner;  // a ModelRunner; tests may put a fake executor here
  std::unique_ptr<EngineCore> core;
};

// Allocates the KV cache and builds the core. `model` must outlive the result. CHECKs `config` (made by
// make_engine_core_config).
EngineCoreInstance build_engine_core(CausalLM &model, const EngineCoreConfig &config);

}  // namespace llmserve

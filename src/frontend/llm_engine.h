// LLMEngine: the offline / in-process engine API (vLLM's LLMEngine).
// add_request() tokenizes and validates, fans a request out into its n
// sequences and hands them to the EngineCore; step() runs one core step and
// returns the RequestOutputs that changed. Invariant: nothing invalid reaches
// the core, and a request rejected by add_request() leaves no trace (no cache
// blocks, no state). Not thread-safe: one thread drives it (the server will put
// the core on its own thread behind a queue later).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine_core.h"
#include "frontend/output_processor.h"
#include "model/causal_lm.h"
#include "runtime/model_runner.h"
#include "tokenizer/tokenizer.h"

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
  uint64_t seed = 0;  // engine seed of unseeded sampling
  bool log_stats = false;
};

// A prompt as text (needs a tokenizer) or as token ids (used when non-empty).
struct PromptInput {
  std::string text;
  std::vector<int32_t> token_ids;
};

// Totals since the engine was created.
struct EngineTotals {
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
  int64_t num_preemptions = 0;
  int64_t num_steps = 0;
};

class LLMEngine {
 public:
  // Builds the ModelRunner (owning the KV cache) and the EngineCore over
  // `model`. `tokenizer` may be null (prompts as ids only, no text). Both must
  // outlive the engine. InvalidArgument naming the field for bad args.
  static StatusOr<std::unique_ptr<LLMEngine>> create(CausalLM &model, const Tokenizer *tokenizer,
                                                     const EngineArgs &args);

  // Validates and queues a request: InvalidArgument (naming the field) for bad
  // sampling params, a prompt that is empty, has ids outside the vocabulary or
  // does not fit max_model_len, or text without a tokenizer; AlreadyExists for
  // a live id. Nothing is queued on error.
  Status add_request(const std::string &request_id, const PromptInput &prompt, const SamplingParams &params);
  // One engine step; the outputs of requests that changed (final ones have
  // finished = true).
  StatusOr<std::vector<RequestOutput>> step();
  // Aborts every sequence of a live request; its final output (finish reason
  // abort) comes with the next step().
  bool abort_request(const std::string &request_id);
  bool has_unfinished() const { return processor_.has_unfinished(); }
  int64_t num_unfinished() const { return processor_.num_unfinished(); }

  const EngineTotals &totals() const { return totals_; }
  const SchedulerStats &last_stats() const { return last_stats_; }
  const EngineCore &core() const { return *core_; }
  int64_t max_model_len() const { return scheduler_config_.max_model_len; }
  // KV-cache capacity in blocks / tokens, and on CUDA the memory plan's log line (empty otherwise).
  int32_t num_kv_blocks() const { return num_kv_blocks_; }
  int32_t block_size() const { return block_size_; }
  const std::string &kv_cache_summary() const { return kv_cache_summary_; }

 private:
  LLMEngine(CausalLM &model, const Tokenizer *tokenizer)
      : model_(model), tokenizer_(tokenizer), processor_(tokenizer) {}

  CausalLM &model_;
  const Tokenizer *tokenizer_;
  SchedulerConfig scheduler_config_;
  std::optional<int32_t> eos_token_id_;  // the model's EOS (tokenizer's, else config's first)
  std::vector<int32_t> extra_eos_ids_;   // further EOS ids of the config: stop
                                         // ids unless ignore_eos (vLLM)
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<EngineCore> core_;
  OutputProcessor processor_;
  EngineTotals totals_;
  SchedulerStats last_stats_;
  int32_t num_kv_blocks_ = 0, block_size_ = 0;
  std::string kv_cache_summary_;
};

}  // namespace llmserve

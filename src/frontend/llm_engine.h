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
#include "executor/engine_core_builder.h"
#include "frontend/input_processor.h"
#include "frontend/output_processor.h"
#include "model/causal_lm.h"
#include "runtime/model_runner.h"
#include "tokenizer/tokenizer.h"

namespace llmserve {

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
  // does not fit max_model_len, or text without a tokenizer, or a non-zero
  // `priority` without the priority policy (as vLLM); AlreadyExists for a live
  // id. Nothing is queued on error. `priority`: lower is served earlier.
  Status add_request(const std::string &request_id, const PromptInput &prompt, const SamplingParams &params,
                     int32_t priority = 0);
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
  const EngineCore &core() const { return *instance_.core; }
  int64_t max_model_len() const { return config_.scheduler.max_model_len; }
  // KV-cache capacity in blocks / tokens, and on CUDA the memory plan's log line (empty otherwise).
  int32_t num_kv_blocks() const { return config_.cache.num_blocks; }
  int32_t block_size() const { return config_.cache.block_size; }
  const std::string &kv_cache_summary() const { return config_.kv_cache_summary; }

 private:
  LLMEngine(const Tokenizer *tokenizer, EngineCoreConfig config, EngineCoreInstance instance)
      : config_(std::move(config)),
        instance_(std::move(instance)),
        input_processor_(tokenizer, config_.info()),
        processor_(tokenizer) {}

  EngineCoreConfig config_;
  EngineCoreInstance instance_;
  InputProcessor input_processor_;
  OutputProcessor processor_;
  EngineTotals totals_;
  SchedulerStats last_stats_;
};

}  // namespace llmserve

// AsyncLLM: the thread-safe frontend the server drives (vLLM's AsyncLLM). add_request() validates and
// tokenizes on the caller's thread and hands the request to an EngineCoreClient (core on its own thread or
// process); one output thread turns EngineCoreOutputs into RequestOutputs (OutputProcessor) and hands each to
// its request's callback. Invariant: every accepted request gets exactly one final output (finished = true)
// through its callback, and a rejected one gets none and leaves no trace in the core.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/sampling_params.h"
#include "executor/engine_core_builder.h"
#include "frontend/input_processor.h"
#include "frontend/output_processor.h"
#include "ipc/engine_core_client.h"
#include "tokenizer/tokenizer.h"

namespace llmserve {

// Called on the output thread with each new RequestOutput of one request (delta_text / delta_token_ids set;
// the last has finished = true). Must not block: post the work to your own executor.
using RequestOutputCallback = std::function<void(RequestOutput)>;

// What the frontend measured over one engine step, for /metrics (vLLM's IterationStats + SchedulerStats).
// Latencies in seconds, from the core's timestamped events; one entry per request that had the event.
struct FinishedRequestStats {
  FinishReason finish_reason = FinishReason::kStop;
  double e2e_latency = 0.0;   // arrival -> final token
  double queued_time = 0.0;   // arrival (QUEUED) -> first SCHEDULED
  double prefill_time = 0.0;  // first SCHEDULED -> first token
  double decode_time = 0.0;   // first token -> final token
  int64_t num_prompt_tokens = 0;
  int64_t num_generation_tokens = 0;
};

struct IterationStats {
  int64_t num_prompt_tokens = 0;      // prompt tokens of requests that got their first token this step
  int64_t num_generation_tokens = 0;  // tokens generated this step
  std::vector<double> time_to_first_tokens;
  std::vector<double> inter_token_latencies;
  std::vector<FinishedRequestStats> finished_requests;
  SchedulerStats scheduler_stats;  // running / waiting / KV usage now; prefix-cache counts since the last step
};

// Called on the output thread once per engine step that produced outputs, just before that step's request
// callbacks (so a client that got its final output finds it counted in the metrics). Must not block.
using StatsCallback = std::function<void(const IterationStats &)>;

class AsyncLLM {
 public:
  virtual ~AsyncLLM() = default;

  // Validates (InvalidArgument naming the field: bad sampling params, empty / too long prompt, ids outside
  // the vocabulary, text without a tokenizer; AlreadyExists for a live id), fans n out and submits. Nothing is
  // submitted on error. `on_output` may run before add_request returns. Thread-safe.
  virtual Status add_request(const std::string &request_id, const PromptInput &prompt, const SamplingParams &params,
                             int32_t priority, RequestOutputCallback on_output) = 0;
  // Aborts a live request (e.g. its client disconnected): its final output, finish reason abort, comes
  // through its callback. Unknown ids are ignored. Thread-safe.
  virtual void abort_request(const std::string &request_id) = 0;

  virtual void set_stats_callback(StatsCallback callback) = 0;
  virtual const Tokenizer *tokenizer() const = 0;  // null when the model has none
  virtual int64_t max_model_len() const = 0;
  virtual int64_t vocab_size() const = 0;
  // False once the engine core died (every live request then got a final output with finish reason abort) or
  // after shutdown(); later add_request calls fail with Unavailable.
  virtual bool healthy() const = 0;
  // Stops the output thread and the core; live requests get no further output. Idempotent. Not from a callback.
  virtual void shutdown() = 0;
};

// The AsyncLLM over `client`, whose core reported `core` (EngineCoreConfig::info(), or the engine-core
// process's Ready; with log_stats in the core the IterationStats carry latencies, else only token counts and
// scheduler stats). Starts the output thread. `tokenizer` may be null; it must outlive the result, as must
// whatever `client` runs.
std::unique_ptr<AsyncLLM> make_async_llm(std::unique_ptr<EngineCoreClient> client, const Tokenizer *tokenizer,
                                         const EngineCoreInfo &core);

}  // namespace llmserve

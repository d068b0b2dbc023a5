// The structs that cross the engine-core boundary (DESIGN §6): SchedulerOutput (scheduler -> runner),
// ModelRunnerOutput (runner -> scheduler) and EngineCoreOutputs (core -> frontend). Plain data, no behaviour:
// the runner sees only these, never a Request.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/sampling_params.h"

namespace llmserve {

// A request the runner has not seen (first scheduling).
struct NewRequestData {
  RequestId req_id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams sampling_params;
  std::vector<int32_t> block_ids;           // all its blocks, in logical order
  int64_t num_computed_tokens = 0;          // tokens already in the cache (prefix hit); computing starts here
  std::vector<int32_t> all_stop_token_ids;  // the request's stop-id set (all_stop_token_ids): min_tokens masks them
};

// A request the runner already holds state for.
struct CachedRequestData {
  RequestId req_id;
  // True after a preemption: new_block_ids then replaces the runner's block list instead of extending it, and
  // the runner recomputes from num_computed_tokens using the tokens it kept (prompt + its sampled ids).
  bool resumed_from_preemption = false;
  std::vector<int32_t> new_block_ids;
  int64_t num_computed_tokens = 0;  // before this step's tokens
};

struct ScheduledTokens {
  RequestId req_id;
  int64_t num_tokens = 0;
};

struct SchedulerOutput {
  std::vector<NewRequestData> scheduled_new_reqs;
  std::vector<CachedRequestData> scheduled_cached_reqs;
  // Tokens to compute this step per scheduled request, in scheduling order (new and cached together).
  std::vector<ScheduledTokens> num_scheduled_tokens;
  int64_t total_num_scheduled_tokens = 0;
  // Requests finished (stopped, length, aborted) since the previous step: the runner drops their state.
  std::vector<RequestId> finished_req_ids;
  // Requests preempted by this step: the runner drops them from its batch but keeps their tokens.
  std::vector<RequestId> preempted_req_ids;
  // Structured output (vLLM's grammar_bitmask): the constrained requests that sample this step and, row by row in
  // that order, the tokens their grammars allow next: [structured_output_req_ids.size(), grammar_bitmask_words]
  // uint32, bit t of word t / 32 set = token t allowed. Empty when no constrained request samples.
  std::vector<RequestId> structured_output_req_ids;
  std::vector<uint32_t> grammar_bitmask;
  int32_t grammar_bitmask_words = 0;
  // Async scheduling (vLLM's pending_structured_output_tokens): a constrained request samples this step while its
  // previous token is still in flight, so the bitmask is not known yet. The step's forward may run; its sampling
  // waits for Scheduler::fill_deferred_grammar_bitmask (after the previous step is applied) and
  // ModelExecutor::sample_deferred. The three fields above are empty until then.
  bool grammar_bitmask_deferred = false;

  // Scheduled tokens of one request, 0 if not scheduled. Linear scan: for tests and tools.
  int64_t num_scheduled_tokens_of(const std::string& req_id) const;
};

// Top-k logprobs of one position: the sampled (or prompt) token first, then the top-k.
struct TokenLogprobs {
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;
  int32_t sampled_token_rank = 0;
};

struct ModelRunnerOutput {
  std::vector<RequestId> req_ids;  // batch order; every request of num_scheduled_tokens appears once
  // Per request: sampled ids (several with speculative decoding). Empty while a prompt is only partly
  // computed (a chunked prefill step samples nothing usable).
  std::vector<std::vector<int32_t>> sampled_token_ids;
  // Per request, per sampled token; empty when not requested.
  std::vector<std::vector<TokenLogprobs>> logprobs;
  // Per request (batch order; the outer list is empty when no request of the step asked): the logprobs of the
  // prompt positions this step scored, consecutive and in order, each position reported once (the first is
  // position 1: nothing scores position 0). Entry: the prompt token (column 0, its rank) then the top
  // `prompt_logprobs`.
  std::vector<std::vector<TokenLogprobs>> prompt_logprobs;
};

// Per-request lifecycle events (as in vLLM); new tokens are stamped by EngineCoreOutputs::timestamp instead.
enum class EngineCoreEventType { kQueued, kScheduled, kPreempted };

struct EngineCoreEvent {
  EngineCoreEventType type;
  double timestamp;  // seconds, SchedulerConfig::clock
};

struct EngineCoreOutput {
  RequestId request_id;
  std::vector<int32_t> new_token_ids;
  std::vector<TokenLogprobs> new_logprobs;
  std::vector<TokenLogprobs> new_prompt_logprobs;  // the next prompt positions' logprobs (see ModelRunnerOutput)
  std::optional<FinishReason> finish_reason;       // set on the request's last output
  StopReason stop_reason;                          // with kStop: EOS (monostate), stop token id or stop string
  int64_t num_cached_tokens = 0;
  std::vector<EngineCoreEvent> events;  // only when SchedulerConfig::log_stats

  bool finished() const { return finish_reason.has_value(); }
};

struct SchedulerStats {
  int64_t num_running_reqs = 0;
  int64_t num_waiting_reqs = 0;
  double kv_cache_usage = 0.0;        // fraction of blocks in use, [0, 1]
  int64_t prefix_cache_requests = 0;  // since the previous stats
  int64_t prefix_cache_queries = 0;   // tokens looked up since the previous stats
  int64_t prefix_cache_hits = 0;      // tokens served from the cache since the previous stats
  int64_t num_preemptions = 0;        // since the previous stats
};

struct EngineCoreOutputs {
  std::vector<EngineCoreOutput> outputs;
  SchedulerStats scheduler_stats;
  double timestamp = 0.0;  // when these outputs were made (log_stats only): the NEW_TOKENS time of each output
};

}  // namespace llmserve

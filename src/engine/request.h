// EngineCoreRequest (frontend -> core) and Request, the core's mutable record of one sequence.
// Invariant: token_ids() == prompt ++ outputs; 0 <= num_computed_tokens <= num_tokens(); status says which queue
// (waiting / running) or final state the request is in.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "engine/request_id.h"
#include "engine/sampling_params.h"
#include "structured/grammar_matcher.h"

namespace llmserve {

// What the frontend hands the engine core. eos_token_id comes from the model's generation config (as in vLLM).
struct EngineCoreRequest {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams sampling_params;
  double arrival_time = 0.0;  // seconds, any monotone clock; FCFS order and priority tie-break
  int32_t priority = 0;       // lower value is served earlier (priority policy only)
  std::optional<int32_t> eos_token_id;
  uint64_t cache_salt = 0;  // extra key of every block hash: requests with different salts never share
};

// Parallel sampling (n > 1) as in vLLM: the frontend submits n child requests "<i>_<id>" (i = 0..n-1), each
// with n = 1 and, when the parent is seeded, seed + i. Their identical prompts share full KV blocks through
// the prefix cache (a child admitted in the same step hits blocks the first child allocated).
std::vector<EngineCoreRequest> fan_out_parallel_sampling(const EngineCoreRequest& parent);

enum class RequestStatus { kWaiting, kRunning, kPreempted, kFinishedStopped, kFinishedLength, kFinishedAborted };
enum class FinishReason { kStop, kLength, kAbort };

// Why a request stopped with reason "stop": EOS (monostate), a stop token id, or a stop string.
using StopReason = std::variant<std::monostate, int32_t, std::string>;

const char* request_status_name(RequestStatus status);
const char* finish_reason_name(FinishReason reason);
inline bool is_finished(RequestStatus s) { return s >= RequestStatus::kFinishedStopped; }
// The finish reason of a finished status (CHECKs that it is finished).
FinishReason finish_reason_of(RequestStatus status);

class Request {
 public:
  explicit Request(EngineCoreRequest req);
  // Move-only: the KV-cache manager's handle inside must never be duplicated.
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  Request(Request&&) = default;
  Request& operator=(Request&&) = default;

  const RequestId& request_id() const { return request_id_; }
  const SamplingParams& sampling_params() const { return sampling_params_; }
  double arrival_time() const { return arrival_time_; }
  int32_t priority() const { return priority_; }
  std::optional<int32_t> eos_token_id() const { return eos_token_id_; }
  // all_stop_token_ids(sampling_params(), eos_token_id()), computed once: the scheduler's stop check and (through
  // NewRequestData) the sampler's min_tokens mask read this one set.
  const std::vector<int32_t>& all_stop_token_ids() const { return all_stop_token_ids_; }
  uint64_t cache_salt() const { return cache_salt_; }

  // Prompt followed by outputs.
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  int64_t num_prompt_tokens() const { return num_prompt_tokens_; }
  int64_t num_tokens() const { return static_cast<int64_t>(token_ids_.size()); }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens_; }
  const int32_t* output_token_ids() const { return token_ids_.data() + num_prompt_tokens_; }
  // max_tokens, or `fallback` (the room left before max_model_len) when the request set none.
  int64_t max_tokens() const { return max_tokens_; }
  void append_output_token(int32_t id) { token_ids_.push_back(id); }

  RequestStatus status = RequestStatus::kWaiting;
  // Tokens whose K/V are in the cache (or being written by the step just scheduled).
  int64_t num_computed_tokens = 0;
  // Sampled tokens scheduled but not yet returned by the runner: 1 between schedule() and update_from_output()
  // of a sampling step, 2 under async scheduling while the next step already computes the first one.
  int64_t num_output_placeholders = 0;
  // Prompt tokens served from the prefix cache at the first scheduling; -1 until then.
  int64_t num_cached_tokens = -1;
  // Chained hashes of the full blocks of token_ids(), maintained by KVCacheManager.
  std::vector<uint64_t> block_hashes;
  StopReason stop_reason;
  int64_t num_preemptions = 0;
  // Structured output: the request's grammar state, which has accepted every output token (Scheduler); null when
  // the request is unconstrained.
  std::unique_ptr<structured::GrammarMatcher> grammar_matcher;

 private:
  friend class Scheduler;
  friend class KVCacheManager;
  // KVCacheManager's per-request record while it holds blocks; -1 when none. A move leaves -1 behind, so a
  // moved-from Request can never free the blocks of the one it was moved into.
  struct KvSlot {
    int32_t index = -1;
    KvSlot() = default;
    KvSlot(KvSlot&& o) noexcept : index(std::exchange(o.index, -1)) {}
    KvSlot& operator=(KvSlot&& o) noexcept {
      index = std::exchange(o.index, -1);
      return *this;
    }
  };
  KvSlot kv_slot_;
  RequestId request_id_;
  SamplingParams sampling_params_;
  double arrival_time_;
  int32_t priority_;
  std::optional<int32_t> eos_token_id_;
  std::vector<int32_t> all_stop_token_ids_;
  uint64_t cache_salt_;
  std::vector<int32_t> token_ids_;
  int64_t num_prompt_tokens_;
  int64_t max_tokens_ = 0;            // set by the scheduler at admission (it knows max_model_len)
  int64_t last_scheduled_step_ = -1;  // id of the last step that computes this request (the scheduler's count)
};

}  // namespace llmserve

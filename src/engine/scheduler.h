// Scheduler: continuous batching under one token budget per step. Running requests are served first (decode
// or the next prefill chunk), then waiting ones; when blocks run out the lowest-priority / latest running
// request is preempted (its blocks freed, recomputed later). Invariant after schedule(): every scheduled
// request holds blocks covering its num_computed_tokens, which already include this step's tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/kv_cache_manager.h"
#include "engine/request.h"
#include "engine/request_queue.h"
#include "engine/scheduler_output.h"

namespace llmserve {

struct SchedulerConfig {
  int64_t max_num_batched_tokens = 8192;  // token budget of one step
  int32_t max_num_seqs = 256;             // running requests at most
  int64_t max_model_len = 4096;           // prompt + outputs at most
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  bool enable_chunked_prefill = true;  // false: a prompt that does not fit the remaining budget waits
  bool log_stats = false;              // record QUEUED / SCHEDULED / PREEMPTED events on the outputs
  std::function<double()> clock{};     // seconds; empty: steady_clock

  // InvalidArgument naming the field; also checks that one max_model_len request fits in the KV cache
  // (otherwise it could never run to completion and preemption would spin).
  Status validate(const KVCacheConfig& cache) const;
};

class Scheduler {
 public:
  // CHECKs config.validate(cache_config) (callers validate user-supplied configs first).
  Scheduler(SchedulerConfig config, KVCacheConfig cache_config);
  ~Scheduler();

  // Queues a request. InvalidArgument (nothing queued, no cache touched) when the prompt is empty or with
  // max_tokens does not fit max_model_len; AlreadyExists for a live duplicate id.
  Status add_request(EngineCoreRequest req);

  // Decides the next step. Never fails: with nothing to do it returns an empty output.
  SchedulerOutput schedule();

  // Applies the runner's results for `scheduler_output`: appends sampled ids, checks stop conditions on
  // token ids (EOS unless ignore_eos, stop_token_ids, max_tokens, max_model_len; all suppressed below
  // min_tokens), frees finished requests and reports new tokens. Requests aborted since schedule() are skipped.
  EngineCoreOutputs update_from_output(const SchedulerOutput& scheduler_output, const ModelRunnerOutput& runner_output);

  // Finishes a live request from outside (abort; or "stop" found by the frontend's stop-string check, with
  // its stop_reason). Frees its blocks at once; its final output comes with the next update_from_output.
  // Returns false if the id is unknown or already finished (aborting late is not an error).
  bool finish_request(const std::string& request_id, RequestStatus status, StopReason stop_reason = {});
  bool abort_request(const std::string& request_id) {
    return finish_request(request_id, RequestStatus::kFinishedAborted);
  }

  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_->size()); }
  int64_t num_unfinished() const { return num_running() + num_waiting(); }
  // True while any request is live or a final output is still to be reported.
  bool has_work() const { return num_unfinished() > 0 || !pending_outputs_.empty(); }

  const Request* get_request(const std::string& request_id) const;
  const std::vector<Request*>& running() const { return running_; }
  const RequestQueue& waiting() const { return *waiting_; }
  const KVCacheManager& kv_cache_manager() const { return kv_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  struct StepState;
  void schedule_running(StepState& st);
  void schedule_waiting(StepState& st);
  // Preempts one running request chosen by the policy; returns it and its former index in running_.
  Request* preempt_one(StepState& st, size_t* victim_pos);
  // True if the request stopped; sets its status and stop_reason.
  bool check_stop(Request& req) const;
  void finish(Request& req, RequestStatus status);
  double now() const;
  void record_event(Request& req, EngineCoreEventType type);

  SchedulerConfig config_;
  KVCacheManager kv_;
  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;
  std::unique_ptr<RequestQueue> waiting_;
  std::vector<Request*> running_;
  // The last schedule()'s requests in num_scheduled_tokens order (nullptr once finished from outside): lets
  // update_from_output() skip the id lookup when the runner keeps the scheduler's order.
  std::vector<Request*> in_flight_;
  std::vector<RequestId> finished_req_ids_;        // for the next SchedulerOutput
  std::vector<EngineCoreOutput> pending_outputs_;  // final outputs of requests finished from outside
  std::unordered_map<std::string, std::vector<EngineCoreEvent>> pending_events_;
  int64_t num_preemptions_ = 0;  // since the previous stats
};

}  // namespace llmserve

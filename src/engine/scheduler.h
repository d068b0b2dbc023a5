// Scheduler: continuous batching under one token budget per step. Running requests are served first (decode
// or the next prefill chunk), then waiting ones; when blocks run out the lowest-priority / latest running
// request is preempted (its blocks freed, recomputed later). Invariant after schedule(): every scheduled
// request holds blocks covering its num_computed_tokens, which already include this step's tokens.
#pragma once

#include <cstdint>
#include <deque>
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
  // EngineCore keeps two steps in flight (schedules step N+1 while N runs); the scheduler then plans tokens whose
  // ids are not known yet (Request::num_output_placeholders) and sees stop conditions one step late.
  bool async_scheduling = false;
  // Structured output: the compiler (one per tokenizer, grammars cached) that builds the matchers of constrained
  // requests; null: such requests are refused at add_request. Shared with the frontend, which compiles at validation.
  std::shared_ptr<structured::GrammarCompiler> grammar_compiler{};

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
  // min_tokens), frees finished requests and reports new tokens. Requests finished, aborted or preempted since
  // schedule() are skipped (their tokens dropped). Outputs must be applied in the order schedule() made them
  // (at most two outstanding: async scheduling).
  EngineCoreOutputs update_from_output(const SchedulerOutput& scheduler_output, const ModelRunnerOutput& runner_output);

  // Finishes a live request from outside (abort; or "stop" found by the frontend's stop-string check, with
  // its stop_reason). Frees its blocks at once, or when the steps in flight that compute it are applied; its final
  // output comes with the next update_from_output. Returns false if the id is unknown or already finished (aborting
  // late is not an error).
  bool finish_request(const std::string& request_id, RequestStatus status, StopReason stop_reason = {});
  bool abort_request(const std::string& request_id) {
    return finish_request(request_id, RequestStatus::kFinishedAborted);
  }

  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_->size()); }
  int64_t num_unfinished() const { return num_running() + num_waiting(); }
  // True while any request is live or a final output is still to be reported.
  bool has_work() const { return num_unfinished() > 0 || !pending_outputs_.empty(); }
  // Steps scheduled whose outputs were not applied yet.
  int64_t num_steps_in_flight() const { return static_cast<int64_t>(in_flight_.size()); }
  // Live requests with a grammar (running or waiting). An executor that cannot defer sampling gets their steps
  // one at a time (EngineCore).
  int64_t num_structured_requests() const { return num_structured_; }
  // Structured output under async scheduling: the bitmask of `out` (the newest scheduled step, marked
  // grammar_bitmask_deferred by schedule()) once every step before it is applied, so each matcher has accepted its
  // request's tokens. Requests finished since `out` was scheduled get no row (their token is dropped).
  void fill_deferred_grammar_bitmask(SchedulerOutput& out);

  const Request* get_request(const std::string& request_id) const;
  const std::vector<Request*>& running() const { return running_; }
  const RequestQueue& waiting() const { return *waiting_; }
  const KVCacheManager& kv_cache_manager() const { return kv_; }
  // Finished requests whose blocks are kept until the steps in flight that compute them are applied.
  std::vector<const Request*> draining() const;
  const SchedulerConfig& config() const { return config_; }

 private:
  struct StepState;
  void schedule_running(StepState& st);
  void schedule_waiting(StepState& st);
  // Preempts one running request chosen by the policy; returns it and its former index in running_.
  Request* preempt_one(StepState& st, size_t* victim_pos);
  // True when the token a running request would compute is a placeholder it will never need (async scheduling).
  bool placeholder_is_past_the_end(const Request& req) const;
  // True if the request stopped; sets its status and stop_reason.
  bool check_stop(Request& req) const;
  // Structured output: the bitmasks of the constrained requests that sample in `out`'s step (after schedule(), or
  // deferred); each must have every output applied. Rows of requests no longer running are left out.
  void fill_grammar_bitmask(const std::vector<Request*>& sampling, SchedulerOutput& out);
  // Advances a constrained request's matcher on its newest token; true if the request finished (EOS accepted by a
  // complete grammar under ignore_eos: stopped; token refused by the grammar: aborted, an engine bug made visible).
  bool advance_grammar(Request& req);
  // Drops a finished request: its blocks are freed (and the record destroyed) once no step in flight computes it.
  void retire(std::unique_ptr<Request> req);
  void release_drained();
  double now() const;
  void record_event(Request& req, EngineCoreEventType type);

  SchedulerConfig config_;
  KVCacheManager kv_;
  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;
  std::unique_ptr<RequestQueue> waiting_;
  std::vector<Request*> running_;
  // Per step scheduled and not yet applied (oldest first): its requests in num_scheduled_tokens order. Lets
  // update_from_output() skip the id lookup when the runner keeps the scheduler's order; a pointer stays valid
  // until its step is applied (retired requests wait in draining_).
  std::deque<std::vector<Request*>> in_flight_;
  int64_t num_scheduled_steps_ = 0;  // schedule() calls so far: the id of the next step
  int64_t num_applied_steps_ = 0;    // update_from_output() calls so far
  // Finished requests still computed by a step in flight: their blocks stay allocated until it is applied.
  std::vector<std::unique_ptr<Request>> draining_;
  std::vector<RequestId> finished_req_ids_;        // for the next SchedulerOutput
  std::vector<EngineCoreOutput> pending_outputs_;  // final outputs of requests finished from outside
  std::unordered_map<std::string, std::vector<EngineCoreEvent>> pending_events_;
  int64_t num_preemptions_ = 0;  // since the previous stats
  int64_t num_structured_ = 0;   // live requests with a grammar_matcher
  // The constrained requests that sample in the newest step, when its bitmask was deferred (batch order); a pointer
  // stays valid until that step is applied, as in_flight_'s.
  std::vector<Request*> deferred_bitmask_reqs_;
};

}  // namespace llmserve

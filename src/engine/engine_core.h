// EngineCore: the engine loop — Scheduler.schedule() -> ModelExecutor.execute()
// -> Scheduler.update_from_output(), or with async scheduling a batch queue of
// two steps (schedule N+1 while N runs). It knows the model only through the
// abstract ModelExecutor (DESIGN §2: the engine layer never sees kernels or
// models). Invariant: every SchedulerOutput produced by schedule() is executed
// and applied exactly once, in order.
#pragma once

#include <deque>
#include <string>

#include "core/status.h"
#include "engine/scheduler.h"
#include "engine/scheduler_output.h"

namespace llmserve {

// Runs one scheduled step on a model (the runtime's ModelRunner implements it).
// The executor keeps its own per-request state from the SchedulerOutput deltas;
// it must accept an empty output (no tokens scheduled) and still apply its
// finished / preempted ids.
//
// Two forms: execute() runs a step and returns its output; execute_async() launches one and wait() returns its
// output later, so the engine can schedule (and launch) the next step meanwhile. Steps are waited for in the order
// they were launched, each exactly once; at most two are outstanding. A step launched while the previous one is
// outstanding may compute that step's sampled tokens (the scheduler's placeholders) without their ids on the host.
// Preemption contract: a request preempted by step N+1 while step N (which sampled for it) is outstanding has
// step N's token discarded by the scheduler, so the executor drops it from its own state too.
class ModelExecutor {
 public:
  using StepHandle = int64_t;  // launch order, from 0

  virtual ~ModelExecutor() = default;
  // Internal error only: user input is validated before it reaches the core.
  virtual StatusOr<ModelRunnerOutput> execute(const SchedulerOutput &scheduler_output) = 0;
  // Default: runs execute() at once and keeps its result for wait() (an executor without asynchronous steps).
  virtual StatusOr<StepHandle> execute_async(const SchedulerOutput &scheduler_output);
  // The output of `handle`, which must be the oldest outstanding step (CHECKed).
  virtual StatusOr<ModelRunnerOutput> wait(StepHandle handle);

  // Deferred sampling (structured output under async scheduling, vLLM's sample_tokens): an executor that can run a
  // step's forward before its grammar bitmask is known says so here. execute_async() of a SchedulerOutput marked
  // grammar_bitmask_deferred then launches the forward only, and sample_deferred() — given the same step with its
  // bitmask filled, before that step is waited for — launches its sampling. The default executor cannot.
  virtual bool can_defer_sampling() const { return false; }
  virtual Status sample_deferred(StepHandle handle, const SchedulerOutput &scheduler_output);

 private:
  std::deque<StatusOr<ModelRunnerOutput>> finished_;  // the default execute_async's results, oldest first
  StepHandle next_handle_ = 0;
};

// Appends `later`'s outputs to `into` (two steps reported as one): gauges from `later`, counters summed.
void merge_outputs(EngineCoreOutputs &into, EngineCoreOutputs &&later);

class EngineCore {
 public:
  // `executor` must outlive the core. CHECKs the configs (callers validate
  // user-supplied ones first with SchedulerConfig::validate).
  EngineCore(SchedulerConfig scheduler_config, KVCacheConfig cache_config, ModelExecutor &executor);

  // Queues a request; InvalidArgument / AlreadyExists as Scheduler::add_request
  // (nothing touched then).
  Status add_request(EngineCoreRequest request) { return scheduler_.add_request(std::move(request)); }
  // Aborts a live request; false if unknown or already finished. Its final
  // output comes with the next step().
  bool abort_request(const std::string &request_id) { return scheduler_.abort_request(request_id); }
  // Finishes a request from outside with reason "stop" (the frontend found a
  // stop string).
  bool finish_request_stopped(const std::string &request_id, const std::string &stop_string) {
    return scheduler_.finish_request(request_id, RequestStatus::kFinishedStopped, StopReason{stop_string});
  }

  // One engine step. With nothing scheduled it still reports the final outputs
  // of requests finished from outside. An executor error is returned as is (the
  // step's tokens are then lost; the core should be dropped). Under
  // SchedulerConfig::async_scheduling (vLLM's step_with_batch_queue) it keeps up
  // to two steps in flight: it launches new steps while the queue has room and
  // the scheduler finds tokens, then returns the oldest step's outputs. A constrained (structured-output) request's
  // bitmask needs its previous token: a step planned while that token is in flight has its forward launched, then
  // the previous step applied, then its bitmask filled and its sampling launched (vLLM's deferred sample_tokens),
  // so the masks are computed while the GPU runs the forward. An executor that cannot defer sampling gets one step
  // at a time while a constrained request is live.
  StatusOr<EngineCoreOutputs> step();

  // True while a request is live, a final output is still to be reported or a step is in flight.
  bool has_work() const { return scheduler_.has_work() || !batch_queue_.empty(); }
  const Scheduler &scheduler() const { return scheduler_; }
  // Steps whose sampling waited for their grammar bitmask while their forward ran (tests: the overlap happened).
  int64_t num_deferred_samples() const { return num_deferred_samples_; }

 private:
  static constexpr size_t kBatchQueueDepth = 2;
  struct InFlightStep {
    SchedulerOutput scheduled;
    ModelExecutor::StepHandle handle;
  };
  StatusOr<EngineCoreOutputs> step_with_batch_queue();
  // Launches steps while the queue has room (an empty step ends it, and so does a step whose sampling waits for
  // its bitmask).
  Status fill_batch_queue();
  // Waits for the oldest queued step and applies its output; then, if the step behind it waits for its bitmask,
  // fills that and launches its sampling.
  StatusOr<EngineCoreOutputs> apply_oldest();

  Scheduler scheduler_;
  ModelExecutor &executor_;
  std::deque<InFlightStep> batch_queue_;  // launched steps, oldest first (async scheduling only)
  int64_t num_deferred_samples_ = 0;
};

}  // namespace llmserve

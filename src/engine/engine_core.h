// EngineCore: the engine loop — Scheduler.schedule() -> ModelExecutor.execute()
// -> Scheduler.update_from_output(). It knows the model only through the
// abstract ModelExecutor (DESIGN §2: the engine layer never sees kernels or
// models). Invariant: every SchedulerOutput produced by schedule() is executed
// and applied exactly once, in order.
#pragma once

#include <string>

#include "core/status.h"
#include "engine/scheduler.h"
#include "engine/scheduler_output.h"

namespace llmserve {

// Runs one scheduled step on a model (the runtime's ModelRunner implements it).
// The executor keeps its own per-request state from the SchedulerOutput deltas;
// it must accept an empty output (no tokens scheduled) and still apply its
// finished / preempted ids.
class ModelExecutor {
 public:
  virtual ~ModelExecutor() = default;
  // Internal error only: user input is validated before it reaches the core.
  virtual StatusOr<ModelRunnerOutput> execute(const SchedulerOutput &scheduler_output) = 0;
};

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
  // step's tokens are then lost; the core should be dropped).
  StatusOr<EngineCoreOutputs> step();

  // True while a request is live or a final output is still to be reported.
  bool has_work() const { return scheduler_.has_work(); }
  const Scheduler &scheduler() const { return scheduler_; }

 private:
  Scheduler scheduler_;
  ModelExecutor &executor_;
};

}  // namespace llmserve

// EngineCore: one step = schedule, execute, apply; with async scheduling the batch queue overlaps the next
// step's scheduling and launch with the running one. Invariant: the queue's steps are applied in launch order.
#include "engine/engine_core.h"

#include <utility>

#include "core/logging.h"

namespace llmserve {

StatusOr<ModelExecutor::StepHandle> ModelExecutor::execute_async(const SchedulerOutput &scheduler_output) {
  finished_.push_back(execute(scheduler_output));
  return next_handle_++;
}

Status ModelExecutor::sample_deferred(StepHandle handle, const SchedulerOutput &) {
  return internal_error("step " + std::to_string(handle) + ": this executor cannot defer sampling");
}

StatusOr<ModelRunnerOutput> ModelExecutor::wait(StepHandle handle) {
  CHECK(!finished_.empty()) << "wait(" << handle << ") with no step outstanding";
  CHECK_EQ(handle, next_handle_ - static_cast<StepHandle>(finished_.size())) << "steps are waited for in order";
  StatusOr<ModelRunnerOutput> out = std::move(finished_.front());
  finished_.pop_front();
  return out;
}

EngineCore::EngineCore(SchedulerConfig scheduler_config, KVCacheConfig cache_config, ModelExecutor &executor)
    : scheduler_(std::move(scheduler_config), std::move(cache_config)), executor_(executor) {}

StatusOr<EngineCoreOutputs> EngineCore::step() {
  if (scheduler_.config().async_scheduling) return step_with_batch_queue();
  SchedulerOutput scheduled = scheduler_.schedule();
  ASSIGN_OR_RETURN(ModelRunnerOutput ran, executor_.execute(scheduled));
  return scheduler_.update_from_output(scheduled, ran);
}

StatusOr<EngineCoreOutputs> EngineCore::step_with_batch_queue() {
  RETURN_IF_ERROR(fill_batch_queue());
  const int64_t deferred_before = num_deferred_samples_;
  ASSIGN_OR_RETURN(EngineCoreOutputs outs, apply_oldest());
  // An empty step behind it is applied too (left queued, it would keep has_work() true with nothing to do), and so
  // is every step once no request is live: they only compute tokens that will be dropped, and applying them
  // releases the blocks those requests still hold.
  while (!batch_queue_.empty() &&
         (batch_queue_.front().scheduled.total_num_scheduled_tokens == 0 || scheduler_.num_unfinished() == 0)) {
    ASSIGN_OR_RETURN(EngineCoreOutputs more, apply_oldest());
    merge_outputs(outs, std::move(more));
  }
  // A deferred sampling was just launched: the next forward goes out behind it now, before the caller processes
  // the outputs, so the GPU does not wait for that (the forward needs only the placeholders).
  if (num_deferred_samples_ != deferred_before && scheduler_.num_unfinished() > 0) RETURN_IF_ERROR(fill_batch_queue());
  return outs;
}

Status EngineCore::fill_batch_queue() {
  // Launch while there is room: the step launched second is planned on the first one's placeholders. An empty
  // step is launched only when nothing is in flight (it carries finished / preempted ids, and reports the final
  // outputs of requests finished from outside).
  while (batch_queue_.size() < kBatchQueueDepth) {
    // Structured output: a constrained request's bitmask for step N+1 needs step N's token in its matcher. An
    // executor that cannot run the forward ahead of the bitmask gets one step at a time while one is live.
    if (!batch_queue_.empty() && scheduler_.num_structured_requests() > 0 && !executor_.can_defer_sampling()) break;
    SchedulerOutput scheduled = scheduler_.schedule();
    const bool empty = scheduled.total_num_scheduled_tokens == 0;
    // Only a step behind one in flight can wait for a token (the scheduler's placeholders come from that step), and
    // its sampling comes before any later step is launched.
    const bool deferred = scheduled.grammar_bitmask_deferred;
    CHECK(!deferred || !batch_queue_.empty());
    ASSIGN_OR_RETURN(ModelExecutor::StepHandle handle, executor_.execute_async(scheduled));
    batch_queue_.push_back({std::move(scheduled), handle});
    if (empty || deferred) break;
  }
  return ok_status();
}

StatusOr<EngineCoreOutputs> EngineCore::apply_oldest() {
  InFlightStep oldest = std::move(batch_queue_.front());
  batch_queue_.pop_front();
  ASSIGN_OR_RETURN(ModelRunnerOutput ran, executor_.wait(oldest.handle));
  EngineCoreOutputs outs = scheduler_.update_from_output(oldest.scheduled, ran);
  // The step behind it ran its forward meanwhile; its matchers now have every token they need.
  if (!batch_queue_.empty() && batch_queue_.front().scheduled.grammar_bitmask_deferred) {
    InFlightStep &next = batch_queue_.front();
    scheduler_.fill_deferred_grammar_bitmask(next.scheduled);
    RETURN_IF_ERROR(executor_.sample_deferred(next.handle, next.scheduled));
    ++num_deferred_samples_;
  }
  return outs;
}

void merge_outputs(EngineCoreOutputs &into, EngineCoreOutputs &&later) {
  into.outputs.insert(into.outputs.end(), std::make_move_iterator(later.outputs.begin()),
                      std::make_move_iterator(later.outputs.end()));
  // Gauges from the later step; counters ("since the previous stats") summed.
  SchedulerStats &s = into.scheduler_stats;
  const SchedulerStats &l = later.scheduler_stats;
  s.num_running_reqs = l.num_running_reqs;
  s.num_waiting_reqs = l.num_waiting_reqs;
  s.kv_cache_usage = l.kv_cache_usage;
  s.prefix_cache_requests += l.prefix_cache_requests;
  s.prefix_cache_queries += l.prefix_cache_queries;
  s.prefix_cache_hits += l.prefix_cache_hits;
  s.num_preemptions += l.num_preemptions;
  into.timestamp = later.timestamp;
}

}  // namespace llmserve

// EngineCore: one step = schedule, execute, apply.
#include "engine/engine_core.h"

#include <utility>

namespace llmserve {

EngineCore::EngineCore(SchedulerConfig scheduler_config, KVCacheConfig cache_config, ModelExecutor &executor)
    : scheduler_(std::move(scheduler_config), std::move(cache_config)), executor_(executor) {}

StatusOr<EngineCoreOutputs> EngineCore::step() {
  SchedulerOutput scheduled = scheduler_.schedule();
  ASSIGN_OR_RETURN(ModelRunnerOutput ran, executor_.execute(scheduled));
  return scheduler_.update_from_output(scheduled, ran);
}

}  // namespace llmserve

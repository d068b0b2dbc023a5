// FailingExecutor: a real executor that fails from its `fail_at`-th step on (a device error, say), and a core
// factory using it, for tests of how clients and AsyncLLM handle a dying engine core.
#pragma once

#include <memory>
#include <utility>

#include "executor/engine_core_builder.h"

namespace llmserve::testing {

class FailingExecutor : public ModelExecutor {
 public:
  FailingExecutor(std::unique_ptr<ModelExecutor> inner, int fail_at) : inner_(std::move(inner)), fail_at_(fail_at) {}
  StatusOr<ModelRunnerOutput> execute(const SchedulerOutput &so) override {
    if (++num_calls_ >= fail_at_) return internal_error("injected device failure");
    return inner_->execute(so);
  }
  // The split form goes to the inner executor too (under async scheduling it tracks the outstanding steps).
  StatusOr<StepHandle> execute_async(const SchedulerOutput &so) override {
    if (++num_calls_ >= fail_at_) return internal_error("injected device failure");
    return inner_->execute_async(so);
  }
  StatusOr<ModelRunnerOutput> wait(StepHandle handle) override { return inner_->wait(handle); }

 private:
  std::unique_ptr<ModelExecutor> inner_;
  int fail_at_;
  int num_calls_ = 0;
};

// build_engine_core over `model`, with a FailingExecutor when fail_at > 0.
inline EngineCoreInstance build_core_failing_at(CausalLM &model, const EngineCoreConfig &config, int fail_at) {
  EngineCoreInstance inst = build_engine_core(model, config);
  if (fail_at > 0) {
    auto failing = std::make_unique<FailingExecutor>(std::move(inst.runner), fail_at);
    inst.core = std::make_unique<EngineCore>(config.scheduler, config.cache, *failing);
    inst.runner = std::move(failing);
  }
  return inst;
}

}  // namespace llmserve::testing

// ActivationMemory: plan -> one allocation -> bind, and unbind on destruction.
#include "model/causal_lm.h"

namespace llmserve {

ActivationMemory::ActivationMemory(CausalLM& model, const ActivationLimits& limits)
    : model_(model), limits_(limits), previous_(model.bound_activations()) {
  CHECK(limits.max_num_tokens > 0 && limits.max_num_logits >= 0)
      << "activation limits " << limits.max_num_tokens << " tokens, " << limits.max_num_logits << " logits";
  ArenaPlanner planner;
  model.plan_activations(limits, planner);
  arena_ = planner.allocate(model.device());
  model.bind_activations(&arena_);
}

ActivationMemory::~ActivationMemory() {
  CHECK(model_.bound_activations() == &arena_) << "ActivationMemory objects of one model destroyed out of order";
  model_.bind_activations(previous_);
}

}  // namespace llmserve

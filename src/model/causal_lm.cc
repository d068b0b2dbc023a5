// ActivationMemory: plan -> one allocation -> bind, and unbind on destruction.
#include "model/causal_lm.h"

namespace llmserve {

ActivationMemory::ActivationMemory(CausalLM& model, const ActivationLimits& limits) : model_(model), limits_(limits) {
  CHECK(limits.max_num_tokens > 0 && limits.max_num_logits >= 0)
      << "activation limits " << limits.max_num_tokens << " tokens, " << limits.max_num_logits << " logits";
  ArenaPlanner planner;
  model.plan_activations(limits, planner);
  arena_ = planner.allocate(model.device());
  model.bind_activations(&arena_);
}

ActivationMemory::~ActivationMemory() { model_.bind_activations(nullptr); }

}  // namespace llmserve

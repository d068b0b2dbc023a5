// ActivationMemory: plan -> one allocation -> bind, and unbind on destruction; the default KV-cache layout.
#include "model/causal_lm.h"

namespace llmserve {

size_t KVCacheSpec::bytes_per_token(DType dtype) const {
  int64_t elems = 1;
  for (int64_t d : token_shape) elems *= d;
  return static_cast<size_t>(elems) * (has_value ? 2 : 1) * dtype_size(dtype);
}

Shape KVCacheSpec::layer_shape(int64_t num_blocks, int64_t block_size) const {
  Shape shape = {num_blocks, block_size};
  shape.insert(shape.end(), token_shape.begin(), token_shape.end());
  return shape;
}

KVCacheSpec CausalLM::kv_cache_spec() const { return {{num_kv_heads_per_rank(), config().head_dim}, true}; }

int64_t CausalLM::attention_workspace_elems(int64_t max_num_tokens, int64_t max_model_len) const {
  return ops::paged_attention_workspace_elems(max_num_tokens, config().num_attention_heads, config().head_dim,
                                              max_model_len);
}

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

// DeepseekV3ForCausalLM: multi-head latent attention over a latent KV cache and DeepSeek's mixture of experts (group-
// limited sigmoid routing, shared experts, first_k_dense_replace dense layers); see deepseek_v3.cc.
#pragma once

#include <memory>

#include "model/causal_lm.h"
#include "model/model_registry.h"

namespace llmserve {

StatusOr<std::unique_ptr<CausalLM>> create_deepseek_v3_model(const ModelConfig& config, WeightSource& weights,
                                                             const ModelLoadOptions& options);

// transformers' DeepseekV3Attention.scaling: (qk_nope_head_dim + qk_rope_head_dim)^-0.5, times mscale^2 with
// mscale = 0.1 mscale_all_dim ln(factor) + 1 when the rope parameters are yarn with a nonzero mscale_all_dim and a
// factor above 1. config.mla must be set.
float mla_softmax_scale(const ModelConfig& config);

}  // namespace llmserve

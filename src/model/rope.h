// Rotary position embedding tables, computed the way HF transformers' rope initialisation functions do
// (default, linear, llama3, yarn), step for step in float32 where HF works in float32, so the tables match
// HF's within float rounding of the final cos/sin.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "model/model_config.h"

namespace llmserve {

struct RopeFrequencies {
  std::vector<float> inv_freq;    // [head_dim / 2], radians per position
  float attention_factor = 1.0f;  // multiplies cos and sin (YaRN's mscale; 1 otherwise)
};

// HF's `rope_init_fn(config)`: the inverse frequencies and the attention factor for cfg.rope_scaling.
StatusOr<RopeFrequencies> compute_rope_frequencies(const ModelConfig& cfg);

// f32 [max_position, head_dim]: row p holds cos(p * inv_freq[i]) * attention_factor in columns [0, head_dim/2)
// and the matching sin in [head_dim/2, head_dim). InvalidArgument when max_position <= 0 or too large.
StatusOr<Tensor> build_rope_cos_sin_cache(const ModelConfig& cfg, int64_t max_position);

}  // namespace llmserve

// MLAAttention: DeepSeek-V2 / V3's multi-head latent attention over a latent KV cache, in the absorbed form for every
// token (decode and prefill alike, one code path): each token caches one row [kv_c (L), k_pe (R)] per layer, and the
// per-head key / value up-projections (kv_b_proj, cut at load into W_UK^T and W_UV) move to the query and output.
// h [T, hidden] in, the attention output [T, hidden] out, in place; writes the layer's latent rows.
#pragma once

#include <memory>

#include "core/arena.h"
#include "model/causal_lm.h"
#include "model/layers/linear.h"
#include "model/layers/rms_norm.h"

namespace llmserve {

struct MLAOptions {
  int64_t hidden_size = 0, num_heads = 0;
  int64_t q_lora_rank = 0;       // 0: q_proj [H (P + R), hidden]; else q_a_proj -> q_a_layernorm -> q_b_proj
  int64_t kv_lora_rank = 0;      // L
  int64_t qk_nope_head_dim = 0;  // P
  int64_t qk_rope_head_dim = 0;  // R
  int64_t v_head_dim = 0;        // V
  bool attention_bias = false;   // q_a_proj, kv_a_proj_with_mqa and o_proj biases
  bool rope_interleave = true;
  float softmax_scale = 0.f;  // (P + R)^-0.5, times yarn's mscale^2 when the config asks (DeepseekV3Attention)
};

class MLAAttention {
 public:
  MLAAttention(const LinearContext& ctx, const MLAOptions& options);

  // The per-step buffers every MLAAttention of a model shares.
  struct Activations {
    ArenaRegion q_a;     // [T, q_lora_rank] (q LoRA only)
    ArenaRegion q;       // [T, H (P + R)]
    ArenaRegion kv;      // [T, L + R]: kv_c (normed in place), then k_pe (rotated in place)
    ArenaRegion q_full;  // [T, H, L + R]: W_UK^T q_nope, then the rotated q_pe
    ArenaRegion o_lat;   // [T, H, L]
    ArenaRegion o;       // [T, H V]
  };
  Activations plan_activations(int64_t max_num_tokens, DType dtype, ArenaPlanner& planner) const;

  // latent_cache [num_blocks, block_size, L + R]; cos_sin_cache [max_position, R].
  void forward(const ForwardBatch& batch, const Tensor& latent_cache, const Tensor& cos_sin_cache, const Arena& arena,
               const Activations& act, Tensor& h) const;
  void named_parameters(const std::string& prefix, NamedParameters& out);
  // Cuts kv_b_proj [H (P + V), L] into W_UK^T [H, L, P] and W_UV [H, V, L] (on the weights' device), then drops it.
  Status process_weights_after_loading();

 private:
  MLAOptions options_;
  std::unique_ptr<ColumnParallelLinear> q_proj_, q_a_proj_, q_b_proj_;  // q_proj, or q_a_proj + q_b_proj
  std::unique_ptr<RMSNorm> q_a_layernorm_;
  ColumnParallelLinear kv_a_proj_with_mqa_;
  RMSNorm kv_a_layernorm_;
  Parameter kv_b_proj_;  // [H (P + V), L] as loaded; undefined after process_weights_after_loading
  RowParallelLinear o_proj_;
  Tensor w_uk_t_;  // [H, L, P]
  Tensor w_uv_;    // [H, V, L]
};

}  // namespace llmserve

// DecoderLayer: pre-norm attention + gated MLP with the fused residual norm (the Llama family's block).
// x [T, hidden] is the running block output, residual [T, hidden] the running sum; the first layer seeds residual.
#pragma once

#include "model/layers/attention.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/rms_norm.h"

namespace llmserve {

class DecoderLayer {
 public:
  DecoderLayer(const LinearContext& ctx, const AttentionOptions& attention, int64_t intermediate_size, bool mlp_bias);

  struct Activations {
    Attention::Activations attention;
    GatedMLP::Activations mlp;
  };
  // Planned once per model (every layer has the same shapes) on any one layer.
  Activations plan_activations(int64_t max_num_tokens, DType dtype, ArenaPlanner& planner) const;
  void forward(const ForwardBatch& batch, const Tensor& key_cache, const Tensor& value_cache,
               const Tensor& cos_sin_cache, const Arena& arena, const Activations& act, bool first_layer, Tensor& x,
               Tensor& residual) const;
  void named_parameters(const std::string& prefix, NamedParameters& out);
  Status process_weights_after_loading();

 private:
  RMSNorm input_layernorm_;
  Attention self_attn_;
  RMSNorm post_attention_layernorm_;
  GatedMLP mlp_;
};

}  // namespace llmserve

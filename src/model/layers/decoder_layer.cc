// DecoderLayer: norm -> attention -> fused residual norm -> MLP.
#include "model/layers/decoder_layer.h"

namespace llmserve {

DecoderLayer::DecoderLayer(const LinearContext& ctx, const AttentionOptions& attention, int64_t intermediate_size,
                           bool mlp_bias)
    : input_layernorm_(attention.hidden_size, attention.rms_norm_eps),
      self_attn_(ctx, attention),
      post_attention_layernorm_(attention.hidden_size, attention.rms_norm_eps),
      mlp_(ctx, attention.hidden_size, intermediate_size, mlp_bias) {}

DecoderLayer::Activations DecoderLayer::plan_activations(int64_t max_num_tokens, DType dtype,
                                                         ArenaPlanner& planner) const {
  return {self_attn_.plan_activations(max_num_tokens, dtype, planner),
          mlp_.plan_activations(max_num_tokens, dtype, planner)};
}

void DecoderLayer::forward(const ForwardBatch& batch, const Tensor& key_cache, const Tensor& value_cache,
                           const Tensor& cos_sin_cache, const Arena& arena, const Activations& act, bool first_layer,
                           Tensor& x, Tensor& residual) const {
  if (first_layer) {
    residual.copy_from(x);
    input_layernorm_.forward(x, x);
  } else {
    input_layernorm_.forward_with_residual(x, residual);
  }
  self_attn_.forward(batch, key_cache, value_cache, cos_sin_cache, arena, act.attention, x);
  post_attention_layernorm_.forward_with_residual(x, residual);
  mlp_.forward(arena, act.mlp, x);
}

void DecoderLayer::named_parameters(const std::string& prefix, NamedParameters& out) {
  input_layernorm_.named_parameters(prefix + ".input_layernorm", out);
  self_attn_.named_parameters(prefix + ".self_attn", out);
  post_attention_layernorm_.named_parameters(prefix + ".post_attention_layernorm", out);
  mlp_.named_parameters(prefix + ".mlp", out);
}

Status DecoderLayer::process_weights_after_loading() {
  RETURN_IF_ERROR(self_attn_.process_weights_after_loading());
  return mlp_.process_weights_after_loading();
}

}  // namespace llmserve

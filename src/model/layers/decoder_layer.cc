// DecoderLayer: norm -> attention -> fused residual norm -> MLP.
#include "model/layers/decoder_layer.h"

#include "core/logging.h"

namespace llmserve {

DecoderLayer::DecoderLayer(const LinearContext& ctx, const AttentionOptions& attention, int64_t intermediate_size,
                           bool mlp_bias)
    : input_layernorm_(attention.hidden_size, attention.rms_norm_eps),
      self_attn_(ctx, attention),
      post_attention_layernorm_(attention.hidden_size, attention.rms_norm_eps),
      mlp_(std::make_unique<GatedMLP>(ctx, attention.hidden_size, intermediate_size, mlp_bias)) {}

DecoderLayer::DecoderLayer(const LinearContext& ctx, const AttentionOptions& attention, const FusedMoEOptions& moe,
                           std::string moe_module)
    : input_layernorm_(attention.hidden_size, attention.rms_norm_eps),
      self_attn_(ctx, attention),
      post_attention_layernorm_(attention.hidden_size, attention.rms_norm_eps),
      moe_(std::make_unique<FusedMoE>(ctx, moe)),
      moe_module_(std::move(moe_module)) {}

DecoderLayer::Activations DecoderLayer::plan_activations(int64_t max_num_tokens, DType dtype,
                                                         ArenaPlanner& planner) const {
  Activations a;
  a.attention = self_attn_.plan_activations(max_num_tokens, dtype, planner);
  plan_feed_forward(max_num_tokens, dtype, planner, a);
  return a;
}

void DecoderLayer::plan_feed_forward(int64_t max_num_tokens, DType dtype, ArenaPlanner& planner, Activations& a) const {
  if (mlp_) a.mlp = mlp_->plan_activations(max_num_tokens, dtype, planner);
  if (moe_) a.moe = moe_->plan_activations(max_num_tokens, dtype, planner);
}

DecoderLayer::Activations plan_decoder_activations(const std::vector<std::unique_ptr<DecoderLayer>>& layers,
                                                   int64_t max_num_tokens, DType dtype, ArenaPlanner& planner) {
  CHECK(!layers.empty());
  DecoderLayer::Activations a = layers.front()->plan_activations(max_num_tokens, dtype, planner);
  for (const auto& layer : layers) {
    if (layer->is_sparse() != layers.front()->is_sparse()) {
      layer->plan_feed_forward(max_num_tokens, dtype, planner, a);
      break;
    }
  }
  return a;
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
  if (moe_) {
    moe_->forward(arena, act.moe, x);
  } else {
    mlp_->forward(arena, act.mlp, x);
  }
}

void DecoderLayer::named_parameters(const std::string& prefix, NamedParameters& out) {
  input_layernorm_.named_parameters(prefix + ".input_layernorm", out);
  self_attn_.named_parameters(prefix + ".self_attn", out);
  post_attention_layernorm_.named_parameters(prefix + ".post_attention_layernorm", out);
  if (moe_) {
    moe_->named_parameters(prefix + "." + moe_module_, out);
  } else {
    mlp_->named_parameters(prefix + ".mlp", out);
  }
}

Status DecoderLayer::process_weights_after_loading() {
  RETURN_IF_ERROR(self_attn_.process_weights_after_loading());
  return moe_ ? moe_->process_weights_after_loading() : mlp_->process_weights_after_loading();
}

}  // namespace llmserve

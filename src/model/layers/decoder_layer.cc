// DecoderLayer: norm -> attention -> fused residual norm -> MLP; each norm quantizes its output (per token or token
// group) in its kernel when its consumer (QKV, gate_up) takes quantized input.
#include "model/layers/decoder_layer.h"

#include "core/logging.h"

namespace llmserve {

DecoderLayer::DecoderLayer(const LinearContext& ctx, const AttentionOptions& attention, int64_t intermediate_size,
                           bool mlp_bias)
    : hidden_size_(attention.hidden_size),
      input_layernorm_(attention.hidden_size, attention.rms_norm_eps),
      self_attn_(ctx, attention),
      post_attention_layernorm_(attention.hidden_size, attention.rms_norm_eps),
      mlp_(std::make_unique<GatedMLP>(ctx, attention.hidden_size, intermediate_size, mlp_bias)) {}

DecoderLayer::DecoderLayer(const LinearContext& ctx, const AttentionOptions& attention, const FusedMoEOptions& moe,
                           std::string moe_module)
    : hidden_size_(attention.hidden_size),
      input_layernorm_(attention.hidden_size, attention.rms_norm_eps),
      self_attn_(ctx, attention),
      post_attention_layernorm_(attention.hidden_size, attention.rms_norm_eps),
      moe_(std::make_unique<FusedMoE>(ctx, moe)),
      moe_module_(std::move(moe_module)) {}

DecoderLayer::Activations DecoderLayer::plan_activations(int64_t max_num_tokens, DType dtype,
                                                         ArenaPlanner& planner) const {
  Activations a;
  a.attention = self_attn_.plan_activations(max_num_tokens, dtype, planner);
  plan_feed_forward(max_num_tokens, dtype, planner, a);
  std::optional<QuantizedInputSpec> q = self_attn_.quantized_input();
  if (!q && mlp_) q = mlp_->quantized_input();
  if (q) {
    const char* limit = "max_num_batched_tokens";
    a.normed_q = planner.reserve("decoder.normed_q", {max_num_tokens, hidden_size_}, q->dtype, limit);
    a.normed_scales =
        planner.reserve("decoder.normed_scales", {max_num_tokens, q->num_groups(hidden_size_)}, DType::kF32, limit);
  }
  return a;
}

QuantizedActivation DecoderLayer::quantized_normed(const Arena& arena, const Activations& act, int64_t T,
                                                   const std::optional<QuantizedInputSpec>& consumer) const {
  if (!act.normed_q.valid() || !consumer) return {};
  QuantizedActivation q{arena.view(act.normed_q, T), arena.view(act.normed_scales, T)};
  if (q.q.dtype() != consumer->dtype || q.scales.size(1) != consumer->num_groups(hidden_size_)) return {};
  return q;
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

LayerInput DecoderLayer::forward(const ForwardBatch& batch, const Tensor& key_cache, const Tensor& value_cache,
                                 const Tensor& cos_sin_cache, const Arena& arena, const Activations& act,
                                 LayerInput input, const RMSNorm* next_norm, Tensor& x, Tensor& residual) const {
  // Where the consumer of a norm takes quantized input, the norm quantizes in its kernel and x keeps its old
  // contents (the consumer only writes it).
  const int64_t T = x.size(0);
  QuantizedActivation attn_in = quantized_normed(arena, act, T, self_attn_.quantized_input());
  if (input == LayerInput::kNormed) {
    CHECK(!attn_in.q.defined()) << "DecoderLayer: a normed input for a layer whose attention takes quantized input";
  } else if (attn_in.q.defined()) {
    if (input == LayerInput::kEmbeddings) {
      input_layernorm_.forward_quantized(attn_in, residual);
    } else {
      input_layernorm_.forward_with_residual_quantized(attn_in, x, residual);
    }
  } else if (input == LayerInput::kEmbeddings) {
    input_layernorm_.forward(x, residual);
  } else {
    input_layernorm_.forward_with_residual(x, residual);
  }
  self_attn_.forward(batch, key_cache, value_cache, cos_sin_cache, arena, act.attention, x,
                     attn_in.q.defined() ? &attn_in : nullptr);
  if (moe_) {
    post_attention_layernorm_.forward_with_residual(x, residual);
    moe_->forward(arena, act.moe, x, next_norm, next_norm != nullptr ? &residual : nullptr);
    return next_norm != nullptr ? LayerInput::kNormed : LayerInput::kBlockOutput;
  }
  QuantizedActivation mlp_in = quantized_normed(arena, act, T, mlp_->quantized_input());
  if (mlp_in.q.defined()) {
    post_attention_layernorm_.forward_with_residual_quantized(mlp_in, x, residual);
  } else {
    post_attention_layernorm_.forward_with_residual(x, residual);
  }
  mlp_->forward(arena, act.mlp, x, mlp_in.q.defined() ? &mlp_in : nullptr);
  return LayerInput::kBlockOutput;
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

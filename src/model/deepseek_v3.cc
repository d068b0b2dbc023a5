// DeepseekV3ForCausalLM composed of the shared blocks: embedding, per layer (RMSNorm -> MLAAttention -> fused residual
// RMSNorm -> GatedMLP for the first_k_dense_replace layers, a FusedMoE with grouped routing and shared experts after),
// final norm, lm head; HF checkpoint names (transformers' modeling_deepseek_v3.py is the oracle). The KV cache holds
// one latent row per token and layer (kv_cache_spec); layers past num_hidden_layers (the MTP modules) are not loaded.
#include "model/deepseek_v3.h"

#include <cmath>
#include <memory>

#include "model/decoder_only_lm.h"
#include "model/layers/decoder_layer.h"
#include "model/layers/fused_moe.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/mla_attention.h"
#include "model/layers/rms_norm.h"
#include "model/tensor_parallel.h"

namespace llmserve {
namespace {

// HF checkpoints keep gate and up apart (the dense MLPs and the shared experts); the layers stack them.
const std::vector<StackedParamMapping> kStackedParams = {
    {".gate_up_proj", ".gate_proj", "0"},
    {".gate_up_proj", ".up_proj", "1"},
};

FusedMoEOptions moe_options(const ModelConfig& c, DType activation_dtype) {
  const MoeConfig& m = *c.moe;
  FusedMoEOptions o;
  o.hidden_size = c.hidden_size;
  o.num_experts = m.num_experts;
  o.top_k = m.num_experts_per_tok;
  o.intermediate_size = m.moe_intermediate_size;
  o.renormalize = m.norm_topk_prob;
  o.grouped_routing = true;
  o.num_groups = m.n_group;
  o.topk_groups = m.topk_group;
  o.routed_scaling_factor = static_cast<float>(m.routed_scaling_factor);
  o.shared_expert_intermediate_size = m.shared_expert_intermediate_size;
  o.shared_expert_gate = false;
  o.shared_expert_name = "shared_experts";
  o.router_dtype = activation_dtype;
  return o;
}

MLAOptions mla_options(const ModelConfig& c) {
  const MlaConfig& m = *c.mla;
  MLAOptions o;
  o.hidden_size = c.hidden_size;
  o.num_heads = c.num_attention_heads;
  o.q_lora_rank = m.q_lora_rank;
  o.kv_lora_rank = m.kv_lora_rank;
  o.qk_nope_head_dim = m.qk_nope_head_dim;
  o.qk_rope_head_dim = m.qk_rope_head_dim;
  o.v_head_dim = m.v_head_dim;
  o.attention_bias = m.attention_bias;
  o.rope_interleave = m.rope_interleave;
  o.softmax_scale = mla_softmax_scale(c);
  return o;
}

// One decoder layer: pre-norm MLA, then the dense MLP or the MoE block, with vLLM's fused residual norms.
class DeepseekV3DecoderLayer {
 public:
  DeepseekV3DecoderLayer(const LinearContext& ctx, const ModelConfig& c, DType act, bool sparse)
      : input_layernorm_(c.hidden_size, static_cast<float>(c.rms_norm_eps)),
        self_attn_(ctx, mla_options(c)),
        post_attention_layernorm_(c.hidden_size, static_cast<float>(c.rms_norm_eps)) {
    if (sparse) {
      moe_ = std::make_unique<FusedMoE>(ctx, moe_options(c, act));
    } else {
      mlp_ = std::make_unique<GatedMLP>(ctx, c.hidden_size, c.intermediate_size, false);
    }
  }

  struct Activations {
    MLAAttention::Activations attention;
    GatedMLP::Activations mlp;  // planned when some layer is dense
    FusedMoE::Activations moe;  // planned when some layer is sparse
  };
  // The attention's buffers, plus this layer's feed-forward kind into `a`.
  void plan_attention(int64_t max_num_tokens, DType dtype, ArenaPlanner& planner, Activations& a) const {
    a.attention = self_attn_.plan_activations(max_num_tokens, dtype, planner);
  }
  void plan_feed_forward(int64_t max_num_tokens, DType dtype, ArenaPlanner& planner, Activations& a) const {
    if (mlp_) a.mlp = mlp_->plan_activations(max_num_tokens, dtype, planner);
    if (moe_) a.moe = moe_->plan_activations(max_num_tokens, dtype, planner);
  }
  bool is_sparse() const { return moe_ != nullptr; }

  // DecoderLayer::forward's convention: `input` says what x holds; a sparse layer given next_norm folds it into its
  // combine and returns kNormed.
  LayerInput forward(const ForwardBatch& batch, const Tensor& latent_cache, const Tensor& cos_sin_cache,
                     const Arena& arena, const Activations& act, LayerInput input, const RMSNorm* next_norm, Tensor& x,
                     Tensor& residual) const {
    if (input == LayerInput::kEmbeddings) {  // the embeddings are in residual
      input_layernorm_.forward(x, residual);
    } else if (input == LayerInput::kBlockOutput) {
      input_layernorm_.forward_with_residual(x, residual);
    }
    self_attn_.forward(batch, latent_cache, cos_sin_cache, arena, act.attention, x);
    post_attention_layernorm_.forward_with_residual(x, residual);
    if (moe_) {
      moe_->forward(arena, act.moe, x, next_norm, next_norm != nullptr ? &residual : nullptr);
      return next_norm != nullptr ? LayerInput::kNormed : LayerInput::kBlockOutput;
    }
    mlp_->forward(arena, act.mlp, x);
    return LayerInput::kBlockOutput;
  }
  // The input norm, for the layer before to fold into its MoE combine (MLA takes unquantized input).
  const RMSNorm* fusable_input_norm() const { return &input_layernorm_; }

  void named_parameters(const std::string& prefix, NamedParameters& out) {
    input_layernorm_.named_parameters(prefix + ".input_layernorm", out);
    self_attn_.named_parameters(prefix + ".self_attn", out);
    post_attention_layernorm_.named_parameters(prefix + ".post_attention_layernorm", out);
    if (moe_) {
      moe_->named_parameters(prefix + ".mlp", out);
    } else {
      mlp_->named_parameters(prefix + ".mlp", out);
    }
  }

  Status process_weights_after_loading() {
    RETURN_IF_ERROR(self_attn_.process_weights_after_loading());
    return moe_ ? moe_->process_weights_after_loading() : mlp_->process_weights_after_loading();
  }

 private:
  RMSNorm input_layernorm_;
  MLAAttention self_attn_;
  RMSNorm post_attention_layernorm_;
  std::unique_ptr<GatedMLP> mlp_;  // the first first_k_dense_replace layers
  std::unique_ptr<FusedMoE> moe_;  // the rest
};

class DeepseekV3ForCausalLM final : public DecoderOnlyLM {
 public:
  DeepseekV3ForCausalLM(const ModelConfig& config, const ModelLoadOptions& options);
  Status load_weights(WeightSource& weights);
  // One latent row [kv_lora_rank + qk_rope_head_dim] per token and layer, shared by every head; no value cache.
  KVCacheSpec kv_cache_spec() const override { return {{config_.mla->latent_size()}, false}; }
  // mla_attention's split-K scratch: every head accumulates an L-wide latent output.
  int64_t attention_workspace_elems(int64_t max_num_tokens, int64_t max_model_len) const override {
    return ops::paged_attention_workspace_elems(max_num_tokens, config_.num_attention_heads, config_.mla->kv_lora_rank,
                                                max_model_len);
  }
  void forward(const ForwardBatch& batch, KVCacheTensors& kv_cache, Tensor& logits) override;
  void plan_activations(const ActivationLimits& limits, ArenaPlanner& planner) override;
  Tensor moe_experts_touched() const override { return experts_touched_of(layer_act_.moe); }

 private:
  std::vector<std::unique_ptr<DeepseekV3DecoderLayer>> layers_;
  DeepseekV3DecoderLayer::Activations layer_act_;
};

DeepseekV3ForCausalLM::DeepseekV3ForCausalLM(const ModelConfig& c, const ModelLoadOptions& options)
    : DecoderOnlyLM(c, options) {
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    layers_.push_back(std::make_unique<DeepseekV3DecoderLayer>(linear_, c, act_, c.moe->is_sparse_layer(i)));
  }
}

Status DeepseekV3ForCausalLM::load_weights(WeightSource& weights) {
  NamedParameters params;
  // Only layers [0, num_hidden_layers): a checkpoint's MTP layers (num_nextn_predict_layers, numbered after them)
  // are never read (vLLM skips them too).
  for (size_t i = 0; i < layers_.size(); ++i) layers_[i]->named_parameters("model.layers." + std::to_string(i), params);
  RETURN_IF_ERROR(load_parameters_with(std::move(params), weights, kStackedParams));
  for (auto& layer : layers_) RETURN_IF_ERROR(layer->process_weights_after_loading());
  return finish_loading();
}

void DeepseekV3ForCausalLM::plan_activations(const ActivationLimits& limits, ArenaPlanner& planner) {
  plan_outer_activations(limits, planner);
  const int64_t T = limits.max_num_tokens;
  layer_act_ = {};
  layers_.front()->plan_attention(T, act_, planner, layer_act_);
  layers_.front()->plan_feed_forward(T, act_, planner, layer_act_);
  for (const auto& layer : layers_) {  // the other feed-forward kind, when the model mixes dense and sparse layers
    if (layer->is_sparse() != layers_.front()->is_sparse()) {
      layer->plan_feed_forward(T, act_, planner, layer_act_);
      break;
    }
  }
}

void DeepseekV3ForCausalLM::forward(const ForwardBatch& batch, KVCacheTensors& kv_cache, Tensor& logits) {
  CHECK_EQ(static_cast<int64_t>(kv_cache.key.size()), config_.num_hidden_layers);
  auto [x, residual] = embed(batch);
  LayerInput input = LayerInput::kEmbeddings;
  for (size_t i = 0; i < layers_.size(); ++i) {
    input = layers_[i]->forward(batch, kv_cache.key[i], cos_sin_cache_, arena(), layer_act_, input,
                                norm_to_fold_after(layers_, i), x, residual);
  }
  compute_logits(batch, x, residual, logits, input == LayerInput::kNormed);
}

}  // namespace

float mla_softmax_scale(const ModelConfig& c) {
  const MlaConfig& m = *c.mla;
  double scale = 1.0 / std::sqrt(static_cast<double>(m.qk_nope_head_dim + m.qk_rope_head_dim));
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type != RopeType::kDefault && rs.mscale_all_dim.value_or(0) != 0 && rs.factor > 1) {
    const double mscale = 0.1 * *rs.mscale_all_dim * std::log(rs.factor) + 1.0;
    scale *= mscale * mscale;
  }
  return static_cast<float>(scale);
}

StatusOr<std::unique_ptr<CausalLM>> create_deepseek_v3_model(const ModelConfig& config, WeightSource& weights,
                                                             const ModelLoadOptions& options) {
  const int64_t world = options.communicator != nullptr ? options.communicator->world_size() : 1;
  RETURN_IF_ERROR(check_tensor_parallel_size(config, world));
  if (!config.mla || !config.moe) return invalid_argument(config.architecture + ": no MLA / MoE configuration");
  auto model = std::make_unique<DeepseekV3ForCausalLM>(config, options);
  RETURN_IF_ERROR(model->load_weights(weights));
  return std::unique_ptr<CausalLM>(std::move(model));
}

}  // namespace llmserve

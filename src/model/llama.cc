// The Llama family — LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, and the MoE members
// MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM — composed of the shared blocks: embedding,
// DecoderLayer (pre-norm attention with GQA, rotary, optional q/k/v bias and per-head q/k RMSNorm + SwiGLU MLP or a
// FusedMoE block), final norm, lm head; plus the checkpoint-name -> parameter map.
#include "model/llama.h"

#include <memory>

#include "core/env.h"
#include "model/decoder_only_lm.h"
#include "model/layers/decoder_layer.h"
#include "model/tensor_parallel.h"

namespace llmserve {
namespace {

// HF checkpoints keep q/k/v and gate/up apart; the layers stack them (vLLM's stacked_params_mapping).
const std::vector<StackedParamMapping> kStackedParams = {
    {".qkv_proj", ".q_proj", "q"},        {".qkv_proj", ".k_proj", "k"},      {".qkv_proj", ".v_proj", "v"},
    {".gate_up_proj", ".gate_proj", "0"}, {".gate_up_proj", ".up_proj", "1"},
};

class LlamaForCausalLM final : public DecoderOnlyLM {
 public:
  LlamaForCausalLM(const ModelConfig& config, const ModelLoadOptions& options);
  Status load_weights(WeightSource& weights);
  int64_t num_kv_heads_per_rank() const override {
    return heads_per_rank(config_.num_key_value_heads, linear_.comm->world_size());
  }
  void forward(const ForwardBatch& batch, KVCacheTensors& kv_cache, Tensor& logits) override;
  void plan_activations(const ActivationLimits& limits, ArenaPlanner& planner) override;
  Tensor moe_experts_touched() const override { return experts_touched_of(layer_act_.moe); }

 private:
  std::vector<std::unique_ptr<DecoderLayer>> layers_;
  DecoderLayer::Activations layer_act_;
};

bool fused_moe_route_align_on_cuda() {
  static const bool enabled = switch_from_env_or_die("LLMSERVE_FUSED_MOE_ROUTE_ALIGN", true);
  return enabled;
}

// The sparse layers' block (Mixtral, Qwen2-MoE, Qwen3-MoE) and its checkpoint names.
FusedMoEOptions moe_options(const ModelConfig& c, DType activation_dtype, Device device) {
  const MoeConfig& m = *c.moe;
  FusedMoEOptions o;
  o.hidden_size = c.hidden_size;
  o.num_experts = m.num_experts;
  o.top_k = m.num_experts_per_tok;
  o.intermediate_size = m.moe_intermediate_size;
  o.renormalize = m.norm_topk_prob;
  o.shared_expert_intermediate_size = m.shared_expert_intermediate_size;
  o.shared_expert_gate = m.shared_expert_intermediate_size > 0;  // Qwen2-MoE's shared expert is always gated
  o.router_dtype = activation_dtype;
  // On the CPU the fused op is the two ops (the reference); on CUDA its one-block kernel unless
  // LLMSERVE_FUSED_MOE_ROUTE_ALIGN=0 (the A/B switch; bench/RESULTS.md, eighteenth session).
  o.fuse_route_align = device.is_cpu() || fused_moe_route_align_on_cuda();
  if (c.architecture == "MixtralForCausalLM") {
    o.gate_proj_name = "w1";
    o.up_proj_name = "w3";
    o.down_proj_name = "w2";
  }
  return o;
}

std::string moe_module(const ModelConfig& c) {
  return c.architecture == "MixtralForCausalLM" ? "block_sparse_moe" : "mlp";
}

bool fused_qk_norm_rope_on_cuda() {
  static const bool enabled = switch_from_env_or_die("LLMSERVE_FUSED_QK_NORM_ROPE", true);
  return enabled;
}

LlamaForCausalLM::LlamaForCausalLM(const ModelConfig& c, const ModelLoadOptions& options) : DecoderOnlyLM(c, options) {
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    AttentionOptions a;
    a.hidden_size = c.hidden_size;
    a.num_heads = c.num_attention_heads;
    a.num_kv_heads = c.num_key_value_heads;
    a.head_dim = c.head_dim;
    a.qkv_bias = c.attention_qkv_bias;
    a.o_bias = c.attention_out_bias;
    a.qk_norm = c.qk_norm;
    a.rms_norm_eps = static_cast<float>(c.rms_norm_eps);
    a.sliding_window = c.sliding_window_for_layer(i);
    // One GEMM launch instead of three on CUDA (decode at small batch is launch-bound; per-head q/k norms run on
    // the fused output's strided heads). The CPU runs three: that is the numerics its outputs are pinned to.
    a.fuse_qkv = !device_.is_cpu();
    // Qwen3's q/k norms inside the rotary kernel: the same bits as the three ops (on the CPU the op is those three),
    // one launch for three (bench/RESULTS.md, 2026-12-07); LLMSERVE_FUSED_QK_NORM_ROPE=0 runs the three on CUDA (A/B).
    a.fuse_qk_norm_rope = device_.is_cpu() || fused_qk_norm_rope_on_cuda();
    if (c.moe && c.moe->is_sparse_layer(i)) {
      layers_.push_back(std::make_unique<DecoderLayer>(linear_, a, moe_options(c, act_, device_), moe_module(c)));
    } else {
      layers_.push_back(std::make_unique<DecoderLayer>(linear_, a, c.intermediate_size, c.mlp_bias));
    }
  }
}

Status LlamaForCausalLM::load_weights(WeightSource& weights) {
  NamedParameters params;
  for (size_t i = 0; i < layers_.size(); ++i) layers_[i]->named_parameters("model.layers." + std::to_string(i), params);
  RETURN_IF_ERROR(load_parameters_with(std::move(params), weights, kStackedParams));
  for (auto& layer : layers_) RETURN_IF_ERROR(layer->process_weights_after_loading());
  return finish_loading();
}

void LlamaForCausalLM::plan_activations(const ActivationLimits& limits, ArenaPlanner& planner) {
  plan_outer_activations(limits, planner);
  layer_act_ = plan_decoder_activations(layers_, limits.max_num_tokens, act_, planner);
}

void LlamaForCausalLM::forward(const ForwardBatch& batch, KVCacheTensors& kv_cache, Tensor& logits) {
  CHECK_EQ(static_cast<int64_t>(kv_cache.key.size()), config_.num_hidden_layers);
  auto [x, residual] = embed(batch);
  LayerInput input = LayerInput::kEmbeddings;
  for (size_t i = 0; i < layers_.size(); ++i) {
    input = layers_[i]->forward(batch, kv_cache.key[i], kv_cache.value[i], cos_sin_cache_, arena(), layer_act_, input,
                                norm_to_fold_after(layers_, i), x, residual);
  }
  compute_logits(batch, x, residual, logits, input == LayerInput::kNormed);
}

}  // namespace

StatusOr<std::unique_ptr<CausalLM>> create_llama_family_model(const ModelConfig& config, WeightSource& weights,
                                                              const ModelLoadOptions& options) {
  const int64_t world = options.communicator != nullptr ? options.communicator->world_size() : 1;
  RETURN_IF_ERROR(check_tensor_parallel_size(config, world));
  auto model = std::make_unique<LlamaForCausalLM>(config, options);
  RETURN_IF_ERROR(model->load_weights(weights));
  return std::unique_ptr<CausalLM>(std::move(model));
}

}  // namespace llmserve

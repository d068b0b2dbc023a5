// The Llama family — LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, and the MoE members
// MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM — composed of the shared blocks: embedding,
// DecoderLayer (pre-norm attention with GQA, rotary, optional q/k/v bias and per-head q/k RMSNorm + SwiGLU MLP or a
// FusedMoE block), final norm, lm head; plus the checkpoint-name -> parameter map.
#include "model/llama.h"

#include <memory>

#include "model/layers/decoder_layer.h"
#include "model/layers/quantized_linear_methods.h"
#include "model/layers/vocab_parallel_embedding.h"
#include "model/rope.h"
#include "model/tensor_parallel.h"

namespace llmserve {
namespace {

// HF checkpoints keep q/k/v and gate/up apart; the layers stack them (vLLM's stacked_params_mapping).
const std::vector<StackedParamMapping> kStackedParams = {
    {".qkv_proj", ".q_proj", "q"},        {".qkv_proj", ".k_proj", "k"},      {".qkv_proj", ".v_proj", "v"},
    {".gate_up_proj", ".gate_proj", "0"}, {".gate_up_proj", ".up_proj", "1"},
};

class LlamaForCausalLM final : public CausalLM {
 public:
  LlamaForCausalLM(const ModelConfig& config, const ModelLoadOptions& options);
  Status load_weights(WeightSource& weights);
  const ModelConfig& config() const override { return config_; }
  Device device() const override { return device_; }
  DType activation_dtype() const override { return act_; }
  int64_t num_kv_heads_per_rank() const override {
    return heads_per_rank(config_.num_key_value_heads, linear_.comm->world_size());
  }
  void forward(const ForwardBatch& batch, KVCacheTensors& kv_cache, Tensor& logits) override;
  void plan_activations(const ActivationLimits& limits, ArenaPlanner& planner) override;
  void bind_activations(const Arena* arena) override { arena_ = arena; }
  const Arena* bound_activations() const override { return arena_; }

 private:
  ModelConfig config_;
  Device device_;
  DType act_ = DType::kF32;                            // activations: f32 on CPU, the weight dtype on CUDA
  std::shared_ptr<const LinearMethod> linear_method_;  // config.quantization's (the dense one when unset)
  LinearContext linear_;
  VocabParallelEmbedding embed_tokens_;
  std::vector<std::unique_ptr<DecoderLayer>> layers_;
  RMSNorm norm_;
  ParallelLMHead lm_head_;
  Tensor cos_sin_cache_;  // [max_position, head_dim]
  // The per-step buffers: the running block output, the residual sum, the rows the lm head reads, the blocks'.
  ArenaRegion hidden_, residual_, selected_;
  DecoderLayer::Activations layer_act_;
  ParallelLMHead::Activations lm_head_act_;
  const Arena* arena_ = nullptr;
};

// The sparse layers' block (Mixtral, Qwen2-MoE, Qwen3-MoE) and its checkpoint names.
FusedMoEOptions moe_options(const ModelConfig& c, DType activation_dtype) {
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

LinearContext linear_context(const ModelConfig& c, const ModelLoadOptions& o, const LinearMethod* method) {
  Communicator* comm = o.communicator != nullptr ? o.communicator : &single_process_communicator();
  return {comm, method, resolve_weight_dtype(c, o)};
}

LlamaForCausalLM::LlamaForCausalLM(const ModelConfig& c, const ModelLoadOptions& options)
    : config_(c),
      device_(options.device),
      act_(options.device.is_cpu() ? DType::kF32 : resolve_weight_dtype(c, options)),
      linear_method_(make_linear_method(c.quantization)),
      linear_(linear_context(c, options, linear_method_.get())),
      embed_tokens_(*linear_.comm, c.vocab_size, c.hidden_size, linear_.params_dtype),
      norm_(c.hidden_size, static_cast<float>(c.rms_norm_eps)),
      lm_head_(*linear_.comm, c.vocab_size, c.hidden_size, linear_.params_dtype) {
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
    // One GEMM launch instead of three on CUDA (decode at small batch is launch-bound), unless per-head q/k norms
    // need contiguous q and k. The CPU runs three: that is the numerics its outputs are pinned to.
    a.fuse_qkv = !device_.is_cpu() && !c.qk_norm;
    if (c.moe && c.moe->is_sparse_layer(i)) {
      layers_.push_back(std::make_unique<DecoderLayer>(linear_, a, moe_options(c, act_), moe_module(c)));
    } else {
      layers_.push_back(std::make_unique<DecoderLayer>(linear_, a, c.intermediate_size, c.mlp_bias));
    }
  }
}

Status LlamaForCausalLM::load_weights(WeightSource& weights) {
  NamedParameters params;
  embed_tokens_.named_parameters("model.embed_tokens", params);
  for (size_t i = 0; i < layers_.size(); ++i) layers_[i]->named_parameters("model.layers." + std::to_string(i), params);
  norm_.named_parameters("model.norm", params);
  if (!config_.tie_word_embeddings) lm_head_.named_parameters("lm_head", params);
  RETURN_IF_ERROR(load_parameters(params, weights, kStackedParams));
  for (auto& layer : layers_) RETURN_IF_ERROR(layer->process_weights_after_loading());
  if (config_.tie_word_embeddings) lm_head_.tie_to(embed_tokens_);
  ASSIGN_OR_RETURN(cos_sin_cache_, build_rope_cos_sin_cache(config_, config_.max_position_embeddings));
  if (!device_.is_cpu()) cos_sin_cache_ = cos_sin_cache_.to(device_);
  return ok_status();
}

void LlamaForCausalLM::plan_activations(const ActivationLimits& limits, ArenaPlanner& planner) {
  const int64_t T = limits.max_num_tokens, H = config_.hidden_size;
  hidden_ = planner.reserve("hidden", {T, H}, act_, "max_num_batched_tokens");
  residual_ = planner.reserve("residual", {T, H}, act_, "max_num_batched_tokens");
  selected_ = planner.reserve("lm_head.rows", {limits.max_num_logits, H}, act_, "max_num_logits");
  layer_act_ = plan_decoder_activations(layers_, T, act_, planner);
  lm_head_act_ = lm_head_.plan_activations(limits.max_num_logits, planner);
}

void LlamaForCausalLM::forward(const ForwardBatch& batch, KVCacheTensors& kv_cache, Tensor& logits) {
  const ModelConfig& c = config_;
  const int64_t T = batch.input_ids.size(0);
  CHECK_EQ(batch.positions.size(0), T);
  CHECK_EQ(static_cast<int64_t>(kv_cache.key.size()), c.num_hidden_layers);
  CHECK(arena_ != nullptr) << "forward before activation memory was bound (ActivationMemory)";
  Tensor x = arena_->view(hidden_, T);  // the running block output
  Tensor residual = arena_->view(residual_, T);
  // Into the residual sum, which the first layer normalises into x: no device copy of the embeddings per step.
  embed_tokens_.forward(residual, batch.input_ids);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    layers_[i]->forward(batch, kv_cache.key[i], kv_cache.value[i], cos_sin_cache_, *arena_, layer_act_, i == 0, x,
                        residual);
  }
  const int64_t num_logits = batch.logits_indices.size(0);
  CHECK(!logits.defined() || logits.shape() == (Shape{num_logits, c.vocab_size})) << "logits " << logits.to_string();
  if (num_logits == 0) return;  // a step of partial prefill chunks only
  norm_.forward_with_residual(x, residual);
  // Only the requested rows go through the (large) vocabulary projection. The row gather is an embedding lookup
  // with x as the table (on the device, from the device's index buffer: no host round trip).
  Tensor selected = arena_->view(selected_, num_logits);
  ops::embedding(selected, batch.logits_indices, x);
  lm_head_.forward(logits, selected, arena_, lm_head_act_);
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

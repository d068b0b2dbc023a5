// The Llama family — LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM — as one
// decoder: pre-norm attention (GQA, rotary, optional q/k/v bias, optional per-head q/k RMSNorm) + SwiGLU MLP.
#include "model/llama.h"

#include <cmath>
#include <memory>

#include "kernels/ops.h"
#include "model/layers.h"
#include "model/rope.h"

namespace llmserve {
namespace {

struct DecoderLayer {
  RMSNorm input_layernorm;
  Linear q_proj, k_proj, v_proj, o_proj;
  Linear qkv_proj;  // CUDA without q/k norm: q, k and v stacked into one GEMM (q_proj etc. stay empty)
  std::optional<RMSNorm> q_norm, k_norm;  // Qwen3: RMSNorm over head_dim, per head, before rotary
  RMSNorm post_attention_layernorm;
  Linear gate_up_proj;  // gate_proj and up_proj stacked: [2 * intermediate, hidden]
  Linear down_proj;
};

class LlamaForCausalLM final : public CausalLM {
 public:
  static StatusOr<std::unique_ptr<CausalLM>> create(const ModelConfig& config, WeightSource& weights,
                                                    const ModelLoadOptions& options);
  const ModelConfig& config() const override { return config_; }
  Device device() const override { return device_; }
  DType activation_dtype() const override { return act_; }
  void forward(const ForwardBatch& batch, KVCacheTensors& kv_cache, Tensor& logits) override;

 private:
  Status load(WeightSource& weights, const ModelLoadOptions& options);
  // Fused QKV projection: on CUDA, unless per-head q/k norms need contiguous q and k.
  bool fuse_qkv() const { return !device_.is_cpu() && !config_.qk_norm; }
  void attention_block(const DecoderLayer& layer, int64_t layer_index, const ForwardBatch& batch, Tensor& h,
                       KVCacheTensors& kv_cache);

  ModelConfig config_;
  Device device_;
  DType act_ = DType::kF32;  // activations: f32 on CPU, the weight dtype on CUDA
  Tensor embed_tokens_;      // [vocab, hidden]
  std::vector<DecoderLayer> layers_;
  RMSNorm norm_;
  Linear lm_head_;
  Tensor cos_sin_cache_;  // [max_position, head_dim]
};

StatusOr<std::unique_ptr<CausalLM>> LlamaForCausalLM::create(const ModelConfig& config, WeightSource& weights,
                                                             const ModelLoadOptions& options) {
  auto model = std::make_unique<LlamaForCausalLM>();
  model->config_ = config;
  RETURN_IF_ERROR(model->load(weights, options));
  return std::unique_ptr<CausalLM>(std::move(model));
}

Status LlamaForCausalLM::load(WeightSource& weights, const ModelLoadOptions& options) {
  const ModelConfig& c = config_;
  const DType wt = resolve_weight_dtype(c, options);
  device_ = options.device;
  act_ = device_.is_cpu() ? DType::kF32 : wt;
  const int64_t hidden = c.hidden_size, head_dim = c.head_dim;
  const int64_t q_size = c.num_attention_heads * head_dim, kv_size = c.num_key_value_heads * head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  ASSIGN_OR_RETURN(embed_tokens_, weights.get("model.embed_tokens.weight", {c.vocab_size, hidden}, wt));
  layers_.resize(c.num_hidden_layers);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    DecoderLayer& l = layers_[i];
    ASSIGN_OR_RETURN(l.input_layernorm, RMSNorm::load(weights, p + "input_layernorm.weight", hidden, eps));
    if (fuse_qkv()) {  // one GEMM launch instead of three: decode at small batch is launch-bound
      ASSIGN_OR_RETURN(l.qkv_proj,
                       Linear::load(weights, {p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"},
                                    {q_size, kv_size, kv_size}, hidden, c.attention_qkv_bias, wt));
    } else {
      ASSIGN_OR_RETURN(l.q_proj,
                       Linear::load(weights, {p + "self_attn.q_proj"}, {q_size}, hidden, c.attention_qkv_bias, wt));
      ASSIGN_OR_RETURN(l.k_proj,
                       Linear::load(weights, {p + "self_attn.k_proj"}, {kv_size}, hidden, c.attention_qkv_bias, wt));
      ASSIGN_OR_RETURN(l.v_proj,
                       Linear::load(weights, {p + "self_attn.v_proj"}, {kv_size}, hidden, c.attention_qkv_bias, wt));
    }
    ASSIGN_OR_RETURN(l.o_proj,
                     Linear::load(weights, {p + "self_attn.o_proj"}, {hidden}, q_size, c.attention_out_bias, wt));
    if (c.qk_norm) {
      ASSIGN_OR_RETURN(l.q_norm, RMSNorm::load(weights, p + "self_attn.q_norm.weight", head_dim, eps));
      ASSIGN_OR_RETURN(l.k_norm, RMSNorm::load(weights, p + "self_attn.k_norm.weight", head_dim, eps));
    }
    ASSIGN_OR_RETURN(l.post_attention_layernorm,
                     RMSNorm::load(weights, p + "post_attention_layernorm.weight", hidden, eps));
    const int64_t inter = c.intermediate_size;
    ASSIGN_OR_RETURN(l.gate_up_proj, Linear::load(weights, {p + "mlp.gate_proj", p + "mlp.up_proj"}, {inter, inter},
                                                  hidden, c.mlp_bias, wt));
    ASSIGN_OR_RETURN(l.down_proj, Linear::load(weights, {p + "mlp.down_proj"}, {hidden}, inter, c.mlp_bias, wt));
  }
  ASSIGN_OR_RETURN(norm_, RMSNorm::load(weights, "model.norm.weight", hidden, eps));
  if (c.tie_word_embeddings) {
    lm_head_ = Linear::from_weight(embed_tokens_);
  } else {
    ASSIGN_OR_RETURN(lm_head_, Linear::load(weights, {"lm_head"}, {c.vocab_size}, hidden, false, wt));
  }
  ASSIGN_OR_RETURN(cos_sin_cache_, build_rope_cos_sin_cache(c, c.max_position_embeddings));
  if (!device_.is_cpu()) cos_sin_cache_ = cos_sin_cache_.to(device_);
  return ok_status();
}

// h [T, hidden] in: normed hidden states; out: attention output projected back to [T, hidden].
void LlamaForCausalLM::attention_block(const DecoderLayer& l, int64_t layer_index, const ForwardBatch& batch, Tensor& h,
                                       KVCacheTensors& kv_cache) {
  const ModelConfig& c = config_;
  const int64_t T = h.size(0), D = c.head_dim;
  const int64_t nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  Tensor q, k, v;
  if (fuse_qkv()) {  // q, k, v: column slices (row-strided) of one [T, (nh + 2 nkv) D] output
    const int64_t width = (nh + 2 * nkv) * D;
    Tensor qkv = Tensor::empty({T, width}, act_, device_);
    l.qkv_proj.forward(qkv, h);
    q = qkv.slice(1, 0, nh * D);
    k = qkv.slice(1, nh * D, (nh + nkv) * D);
    v = qkv.slice(1, (nh + nkv) * D, width);
  } else {
    q = Tensor::empty({T, nh * D}, act_, device_);
    k = Tensor::empty({T, nkv * D}, act_, device_);
    v = Tensor::empty({T, nkv * D}, act_, device_);
    l.q_proj.forward(q, h);
    l.k_proj.forward(k, h);
    l.v_proj.forward(v, h);
  }
  // [T, heads, D] views that keep the row stride of the fused output.
  auto heads = [T, D](const Tensor& t, int64_t n) { return t.as_strided({T, n, D}, {t.stride(0), D, 1}); };
  if (l.q_norm) {
    Tensor q_rows = q.view({T * nh, D}), k_rows = k.view({T * nkv, D});
    l.q_norm->forward(q_rows, q_rows);
    l.k_norm->forward(k_rows, k_rows);
  }
  Tensor qh = heads(q, nh), kh = heads(k, nkv);  // rotary in place, then K and V into the cache: one pass
  ops::rotary_embedding_and_cache(batch.positions, qh, kh, heads(v, nkv), D, cos_sin_cache_, kv_cache.key[layer_index],
                                  kv_cache.value[layer_index], batch.attention.slot_mapping);
  Tensor attn = Tensor::empty({T, nh, D}, act_, device_);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  ops::paged_attention(attn, qh, kv_cache.key[layer_index], kv_cache.value[layer_index], batch.attention,
                       scale, c.sliding_window_for_layer(layer_index).value_or(0));
  l.o_proj.forward(h, attn.view({T, nh * D}));
}

void LlamaForCausalLM::forward(const ForwardBatch& batch, KVCacheTensors& kv_cache, Tensor& logits) {
  const ModelConfig& c = config_;
  const int64_t T = batch.input_ids.size(0);
  CHECK_EQ(batch.positions.size(0), T);
  CHECK_EQ(static_cast<int64_t>(kv_cache.key.size()), c.num_hidden_layers);
  // Scratch on the weights' device; on CUDA the caching allocator serves these without cudaMalloc.
  Tensor x = Tensor::empty({T, c.hidden_size}, act_, device_);  // the running block output
  Tensor residual = Tensor::empty({T, c.hidden_size}, act_, device_);
  Tensor act = Tensor::empty({T, c.intermediate_size}, act_, device_);
  Tensor gate_up = Tensor::empty({T, 2 * c.intermediate_size}, act_, device_);
  ops::embedding(x, batch.input_ids, embed_tokens_);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const DecoderLayer& l = layers_[i];
    if (i == 0) {
      residual.copy_from(x);
      l.input_layernorm.forward(x, x);
    } else {
      l.input_layernorm.forward_with_residual(x, residual);
    }
    attention_block(l, i, batch, x, kv_cache);
    l.post_attention_layernorm.forward_with_residual(x, residual);
    l.gate_up_proj.forward(gate_up, x);
    ops::silu_and_mul(act, gate_up);
    l.down_proj.forward(x, act);
  }
  const int64_t num_logits = batch.logits_indices.size(0);
  CHECK(logits.shape() == (Shape{num_logits, c.vocab_size})) << "logits " << logits.to_string();
  if (num_logits == 0) return;  // a step of partial prefill chunks only
  norm_.forward_with_residual(x, residual);
  // Only the requested rows go through the (large) vocabulary projection. The row gather is an embedding lookup
  // with x as the table (on the device, from the device's index buffer: no host round trip).
  Tensor selected = Tensor::empty({num_logits, c.hidden_size}, act_, device_);
  ops::embedding(selected, batch.logits_indices, x);
  lm_head_.forward(logits, selected);
}

}  // namespace

StatusOr<std::unique_ptr<CausalLM>> create_llama_family_model(const ModelConfig& config, WeightSource& weights,
                                                              const ModelLoadOptions& options) {
  return LlamaForCausalLM::create(config, weights, options);
}

}  // namespace llmserve

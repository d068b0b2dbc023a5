// Attention: QKV -> (q/k norm) -> rotary + cache write -> paged attention -> o_proj, in the order llama.cc ran it.
#include "model/layers/attention.h"

#include <cmath>

#include "kernels/ops.h"

namespace llmserve {

Attention::Attention(const LinearContext& ctx, const AttentionOptions& o)
    : options_(o),
      num_heads_(0),
      num_kv_heads_(0),
      qkv_proj_(ctx, o.hidden_size, o.head_dim, o.num_heads, o.num_kv_heads, o.qkv_bias),
      o_proj_(ctx, o.num_heads * o.head_dim, o.hidden_size, o.o_bias) {
  num_heads_ = qkv_proj_.num_heads();
  num_kv_heads_ = qkv_proj_.num_kv_heads();
  if (o.qk_norm) {
    q_norm_ = std::make_unique<RMSNorm>(o.head_dim, o.rms_norm_eps);
    k_norm_ = std::make_unique<RMSNorm>(o.head_dim, o.rms_norm_eps);
  }
}

Attention::Activations Attention::plan_activations(int64_t max_num_tokens, DType dtype, ArenaPlanner& planner) const {
  const int64_t T = max_num_tokens, D = options_.head_dim;
  const char* limit = "max_num_batched_tokens";
  Activations a;
  if (options_.fuse_qkv) {
    a.qkv = planner.reserve("attention.qkv", {T, (num_heads_ + 2 * num_kv_heads_) * D}, dtype, limit);
  } else {
    a.q = planner.reserve("attention.q", {T, num_heads_ * D}, dtype, limit);
    a.k = planner.reserve("attention.k", {T, num_kv_heads_ * D}, dtype, limit);
    a.v = planner.reserve("attention.v", {T, num_kv_heads_ * D}, dtype, limit);
  }
  a.out = planner.reserve("attention.out", {T, num_heads_, D}, dtype, limit);
  return a;
}

void Attention::forward(const ForwardBatch& batch, const Tensor& key_cache, const Tensor& value_cache,
                        const Tensor& cos_sin_cache, const Arena& arena, const Activations& act, Tensor& h,
                        const QuantizedActivation* hq) const {
  const int64_t T = h.size(0), D = options_.head_dim;
  const int64_t nh = num_heads_, nkv = num_kv_heads_;
  Tensor q, k, v;
  if (options_.fuse_qkv) {  // q, k, v: column slices (row-strided) of one [T, (nh + 2 nkv) D] output
    const int64_t width = (nh + 2 * nkv) * D;
    Tensor qkv = arena.view(act.qkv, T);
    if (hq != nullptr) {
      qkv_proj_.forward_quantized(qkv, *hq);
    } else {
      qkv_proj_.forward(qkv, h);
    }
    q = qkv.slice(1, 0, nh * D);
    k = qkv.slice(1, nh * D, (nh + nkv) * D);
    v = qkv.slice(1, (nh + nkv) * D, width);
  } else {
    q = arena.view(act.q, T);
    k = arena.view(act.k, T);
    v = arena.view(act.v, T);
    if (hq != nullptr) {
      qkv_proj_.forward_split_quantized(q, k, v, *hq);
    } else {
      qkv_proj_.forward_split(q, k, v, h);
    }
  }
  // [T, heads, D] views that keep the row stride of the fused output.
  auto heads = [T, D](const Tensor& t, int64_t n) { return t.as_strided({T, n, D}, {t.stride(0), D, 1}); };
  Tensor qh = heads(q, nh), kh = heads(k, nkv);
  // (Per-head q/k norms,) rotary in place, then K and V into the cache.
  Tensor key = key_cache, value = value_cache;
  if (q_norm_ && options_.fuse_qk_norm_rope) {
    ops::qk_norm_rotary_embedding_and_cache(batch.positions, qh, kh, heads(v, nkv), D, cos_sin_cache, q_norm_->weight(),
                                            k_norm_->weight(), q_norm_->eps(), key, value,
                                            batch.attention.slot_mapping);
  } else {
    if (q_norm_) {  // per-head rows, in place
      q_norm_->forward(qh, qh);
      k_norm_->forward(kh, kh);
    }
    ops::rotary_embedding_and_cache(batch.positions, qh, kh, heads(v, nkv), D, cos_sin_cache, key, value,
                                    batch.attention.slot_mapping);
  }
  Tensor attn = arena.view(act.out, T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  ops::paged_attention(attn, qh, key, value, batch.attention, scale, options_.sliding_window.value_or(0));
  o_proj_.forward(h, attn.view({T, nh * D}));
}

void Attention::named_parameters(const std::string& prefix, NamedParameters& out) {
  qkv_proj_.named_parameters(prefix + ".qkv_proj", out);
  o_proj_.named_parameters(prefix + ".o_proj", out);
  if (q_norm_) {
    q_norm_->named_parameters(prefix + ".q_norm", out);
    k_norm_->named_parameters(prefix + ".k_norm", out);
  }
}

Status Attention::process_weights_after_loading() {
  RETURN_IF_ERROR(qkv_proj_.process_weights_after_loading());
  return o_proj_.process_weights_after_loading();
}

}  // namespace llmserve

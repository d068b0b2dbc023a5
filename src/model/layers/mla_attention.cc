// MLAAttention: q (LoRA) and kv_a projections -> W_UK^T q_nope -> rotary + latent-cache write -> latent attention ->
// W_UV -> o_proj (the absorbed form of kernels/ops.h's MLA section).
#include "model/layers/mla_attention.h"

#include "kernels/ops.h"
#include "model/device_weights.h"

namespace llmserve {
namespace {

// transformers' DeepseekV3RMSNorm default: q_a_layernorm and kv_a_layernorm are built without the config's eps.
constexpr float kLatentNormEps = 1e-6f;

}  // namespace

MLAAttention::MLAAttention(const LinearContext& ctx, const MLAOptions& o)
    : options_(o),
      kv_a_proj_with_mqa_(ctx, o.hidden_size, o.kv_lora_rank + o.qk_rope_head_dim, o.attention_bias),
      kv_a_layernorm_(o.kv_lora_rank, kLatentNormEps),
      o_proj_(ctx, o.num_heads * o.v_head_dim, o.hidden_size, o.attention_bias) {
  CHECK(ctx.comm->world_size() == 1) << "MLAAttention: tensor parallelism is not implemented";
  CHECK(o.num_heads > 0 && o.kv_lora_rank > 0 && o.qk_nope_head_dim > 0 && o.qk_rope_head_dim > 0 &&
        o.qk_rope_head_dim % 2 == 0 && o.v_head_dim > 0 && o.q_lora_rank >= 0 && o.softmax_scale > 0)
      << "MLAAttention: bad sizes";
  const int64_t q_width = o.num_heads * (o.qk_nope_head_dim + o.qk_rope_head_dim);
  if (o.q_lora_rank > 0) {
    q_a_proj_ = std::make_unique<ColumnParallelLinear>(ctx, o.hidden_size, o.q_lora_rank, o.attention_bias);
    q_a_layernorm_ = std::make_unique<RMSNorm>(o.q_lora_rank, kLatentNormEps);
    q_b_proj_ = std::make_unique<ColumnParallelLinear>(ctx, o.q_lora_rank, q_width, false);
  } else {
    q_proj_ = std::make_unique<ColumnParallelLinear>(ctx, o.hidden_size, q_width, false);
  }
  kv_b_proj_.shape = {o.num_heads * (o.qk_nope_head_dim + o.v_head_dim), o.kv_lora_rank};
  kv_b_proj_.dtype = ctx.params_dtype;
  kv_b_proj_.weight_loader = load_whole_parameter;
}

MLAAttention::Activations MLAAttention::plan_activations(int64_t max_num_tokens, DType dtype,
                                                         ArenaPlanner& planner) const {
  const MLAOptions& o = options_;
  const int64_t T = max_num_tokens, H = o.num_heads, L = o.kv_lora_rank, R = o.qk_rope_head_dim;
  const char* limit = "max_num_batched_tokens";
  Activations a;
  if (o.q_lora_rank > 0) a.q_a = planner.reserve("mla.q_a", {T, o.q_lora_rank}, dtype, limit);
  a.q = planner.reserve("mla.q", {T, H * (o.qk_nope_head_dim + R)}, dtype, limit);
  a.kv = planner.reserve("mla.kv", {T, L + R}, dtype, limit);
  a.q_full = planner.reserve("mla.q_full", {T, H, L + R}, dtype, limit);
  a.o_lat = planner.reserve("mla.o_lat", {T, H, L}, dtype, limit);
  a.o = planner.reserve("mla.o", {T, H * o.v_head_dim}, dtype, limit);
  return a;
}

void MLAAttention::forward(const ForwardBatch& batch, const Tensor& latent_cache, const Tensor& cos_sin_cache,
                           const Arena& arena, const Activations& act, Tensor& h) const {
  const MLAOptions& o = options_;
  const int64_t T = h.size(0), H = o.num_heads, L = o.kv_lora_rank, R = o.qk_rope_head_dim;
  const int64_t P = o.qk_nope_head_dim, V = o.v_head_dim;
  Tensor q = arena.view(act.q, T);
  if (q_a_proj_) {
    Tensor q_a = arena.view(act.q_a, T);
    q_a_proj_->forward(q_a, h);
    q_a_layernorm_->forward(q_a, q_a);
    q_b_proj_->forward(q, q_a);
  } else {
    q_proj_->forward(q, h);
  }
  Tensor kv = arena.view(act.kv, T);
  kv_a_proj_with_mqa_.forward(kv, h);
  Tensor kv_c = kv.slice(1, 0, L), k_pe = kv.slice(1, L, L + R);
  kv_a_layernorm_.forward(kv_c, kv_c);

  // Per head, the nope part of the query meets the latent through W_UK: q_full[:, h, :L] = W_UK_h^T q_nope_h.
  const Tensor q_heads = q.view({T, H, P + R});
  Tensor q_full = arena.view(act.q_full, T);
  Tensor q_lat = q_full.slice(2, 0, L).transpose(0, 1);
  ops::batched_linear(q_lat, q_heads.slice(2, 0, P).transpose(0, 1), w_uk_t_);
  Tensor q_rot = q_full.slice(2, L, L + R), cache = latent_cache;
  ops::mla_rotary_and_cache(batch.positions, q_heads.slice(2, P, P + R), q_rot, k_pe, kv_c, cos_sin_cache,
                            o.rope_interleave ? 1 : 0, cache, batch.attention.slot_mapping);
  Tensor o_lat = arena.view(act.o_lat, T);
  ops::mla_attention(o_lat, q_full, cache, batch.attention, o.softmax_scale);
  // The attention output per head leaves the latent through W_UV: o[:, h] = W_UV_h o_lat[:, h].
  Tensor out = arena.view(act.o, T);
  Tensor out_heads = out.view({T, H, V}).transpose(0, 1);
  ops::batched_linear(out_heads, o_lat.transpose(0, 1), w_uv_);
  o_proj_.forward(h, out);
}

void MLAAttention::named_parameters(const std::string& prefix, NamedParameters& out) {
  if (q_a_proj_) {
    q_a_proj_->named_parameters(prefix + ".q_a_proj", out);
    q_a_layernorm_->named_parameters(prefix + ".q_a_layernorm", out);
    q_b_proj_->named_parameters(prefix + ".q_b_proj", out);
  } else {
    q_proj_->named_parameters(prefix + ".q_proj", out);
  }
  kv_a_proj_with_mqa_.named_parameters(prefix + ".kv_a_proj_with_mqa", out);
  kv_a_layernorm_.named_parameters(prefix + ".kv_a_layernorm", out);
  out.emplace_back(prefix + ".kv_b_proj.weight", &kv_b_proj_);
  o_proj_.named_parameters(prefix + ".o_proj", out);
}

Status MLAAttention::process_weights_after_loading() {
  for (ColumnParallelLinear* l : {q_proj_.get(), q_a_proj_.get(), q_b_proj_.get(), &kv_a_proj_with_mqa_}) {
    if (l != nullptr) RETURN_IF_ERROR(l->process_weights_after_loading());
  }
  RETURN_IF_ERROR(o_proj_.process_weights_after_loading());
  // kv_b_proj's rows per head h: [h (P + V), h (P + V) + P) are W_UK_h [P, L], the next V rows W_UV_h [V, L]. The cut
  // runs on the host (a one-time transpose) and the results go back to the weights' device.
  const MLAOptions& o = options_;
  const int64_t H = o.num_heads, P = o.qk_nope_head_dim, V = o.v_head_dim, L = o.kv_lora_rank;
  const Device device = kv_b_proj_.data.device();
  const Tensor host = device.is_cpu() ? kv_b_proj_.data : kv_b_proj_.data.to(Device::cpu());
  const Tensor per_head = host.view({H, P + V, L});
  Tensor w_uk_t = per_head.slice(1, 0, P).transpose(1, 2).contiguous();  // [H, L, P]
  Tensor w_uv = per_head.slice(1, P, P + V).contiguous();                // [H, V, L]
  w_uk_t_ = device.is_cpu() ? w_uk_t : upload_to_device(w_uk_t, device);
  w_uv_ = device.is_cpu() ? w_uv : upload_to_device(w_uv, device);
  kv_b_proj_.data = Tensor();
  return ok_status();
}

}  // namespace llmserve

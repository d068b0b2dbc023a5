// Every op of ops.h as its typed object, for code that needs each op's C++ signature, not only its OpBase: the
// torch bindings (python/ops/torch_ops.cc) instantiate one boxed kernel per signature from this list.
// Invariant: it names each op of all_ops() once (tests/kernels/op_registry_test.cc holds it equal to the registry).
#pragma once

#include "kernels/ops.h"

namespace llmserve::ops {

// Calls f(op) for every op (in ops.h's order).
template <typename F>
void for_each_op(F&& f) {
  f(embedding);
  f(masked_embedding);
  f(rms_norm);
  f(fused_add_rms_norm);
  f(silu_and_mul);
  f(add);
  f(rotary_embedding);
  f(linear);
  f(batched_linear);
  f(dynamic_scaled_quantize);
  f(static_scaled_quantize);
  f(rms_norm_quant);
  f(fused_add_rms_norm_quant);
  f(silu_and_mul_quant);
  f(scaled_mm);
  f(w4a16_linear);
  f(w4a16_gemm_pack);
  f(w4a16_gemm);
  f(moe_route);
  f(moe_route_grouped);
  f(moe_align);
  f(moe_route_and_align);
  f(moe_gemm);
  f(moe_gemm_silu);
  f(moe_combine);
  f(moe_combine_add_rms_norm);
  f(reshape_and_cache);
  f(rotary_embedding_and_cache);
  f(qk_norm_rotary_embedding_and_cache);
  f(paged_attention);
  f(mla_rotary_and_cache);
  f(mla_attention);
  f(log_softmax);
  f(top_k);
  f(argmax);
  f(apply_penalties);
  f(apply_logit_bias);
  f(mask_tokens);
  f(apply_token_bitmask);
  f(apply_temperature);
  f(apply_top_k_top_p_min_p);
  f(sample);
  f(gather_token_logprobs);
  f(scatter_sampled_ids);
}

}  // namespace llmserve::ops

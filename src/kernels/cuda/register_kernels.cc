// The CUDA backend's registration: puts every CUDA kernel into the op table of kernels/op_registry.h. Invariant:
// called once per process (CUDA builds only), by op_registry.cc, before the first CUDA kernel lookup.
#include "core/tensor.h"

namespace llmserve::cuda {

// One per kernel file, defined at its end: the ops that file implements. A new kernel file adds a line here.
void register_activation_kernels();
void register_attention_kernels();
void register_cache_kernels();
void register_embedding_rotary_kernels();
void register_gemm_kernels();
void register_logits_kernels();
void register_mla_attention_kernels();
void register_mla_rotary_cache_kernels();
void register_moe_kernels();
void register_moe_gemm_kernels();
void register_norm_kernels();
void register_quant_kernels();
void register_sampling_kernels();
void register_scaled_mm_kernels();

void register_kernels() {
  register_activation_kernels();
  register_attention_kernels();
  register_cache_kernels();
  register_embedding_rotary_kernels();
  register_gemm_kernels();
  register_logits_kernels();
  register_mla_attention_kernels();
  register_mla_rotary_cache_kernels();
  register_moe_kernels();
  register_moe_gemm_kernels();
  register_norm_kernels();
  register_quant_kernels();
  register_sampling_kernels();
  register_scaled_mm_kernels();
}

}  // namespace llmserve::cuda

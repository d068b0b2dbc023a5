// The CUTLASS 3.x grouped GEMM behind moe_gemm's tile path on Hopper (cutlass_moe_gemm.cu), for moe_gemm.cu.
// Plain C++ (no CUDA or CUTLASS includes), so only its own TU pays CUTLASS's compile time.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace llmserve::cuda {

// Whether moe_gemm_cutlass can take these operands: f16 or bf16; K and N multiples of 8 and x's and out's row
// strides multiples of 8 elements with 16-byte aligned bases (TMA's rule); the current device is sm_90.
bool moe_gemm_cutlass_applies(const Tensor& out, const Tensor& x, const Tensor& weight);

// ops::moe_gemm's contract for moe_align's padded layout: expert e's group is its pairs' rows (the leading rows of
// [expert_offsets[e], expert_offsets[e + 1]) with sorted_pairs >= 0; the padding after them is written as zeros, not
// computed). gather_top_k > 0 copies the token rows into a contiguous scratch first (TMA reads dense A).
void moe_gemm_cutlass(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& sorted_pairs,
                      const Tensor& expert_offsets, int64_t gather_top_k);

}  // namespace llmserve::cuda

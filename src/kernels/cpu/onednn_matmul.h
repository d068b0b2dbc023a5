// oneDNN matmul for `linear`: one primitive per (n, k, weight dtype) with the row count and row strides given at
// run time, created on first use and kept for the process (a handful per model). f32 weights run in f32; bf16
// weights run on bf16 activations (x rounded to bf16, f32 accumulation: AMX/AVX512-BF16 where the CPU has them).
#pragma once

#include "core/tensor.h"

namespace llmserve::cpu {

// out[m, n] = x[m, k] @ weight[n, k]^T (no bias). Returns false, having written nothing, when oneDNN cannot run
// this case on this CPU (no engine, or no kernel for the dtype); the caller then uses its fallback.
bool onednn_linear(Tensor& out, const Tensor& x, const Tensor& weight);

}  // namespace llmserve::cpu

// CUDA implementations of a slice of kernels/ops.h (normalisation and the gated activation), f32 and bf16.
// ops.cc has checked shapes, dtypes and devices; these launch on the default stream and CHECK the launch.
// Plain C++ header (no CUDA includes) so ops.cc compiles with the host compiler.
#pragma once

#include "core/tensor.h"

namespace llmserve::cuda {

// x, out [n, d] f32 or bf16 (same dtype), row-strided; weight [d] f32 or bf16. out may alias x.
void rms_norm(Tensor& out, const Tensor& x, const Tensor& weight, float eps);
// residual += x (rounded to the tensors' dtype), x = rms_norm(residual) * weight.
void fused_add_rms_norm(Tensor& x, Tensor& residual, const Tensor& weight, float eps);
// out [n, d] = silu(x[:, :d]) * x[:, d:], x [n, 2d]; same dtype (f32 or bf16).
void silu_and_mul(Tensor& out, const Tensor& x);

}  // namespace llmserve::cuda

// The m <= 32 path of ops::w4a16_linear on CUDA (w4a16_gemv.cu), called by the op's dispatch (quant.cu): the 4-bit
// weight in the op's layout (ops.h) and the shapes the tensor-core GEMV takes. Plain C++ header.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace llmserve::cuda {

inline constexpr int64_t kW4GemvMaxRows = 32;  // four 8-token tensor-core tiles

struct W4GemvParams {
  const uint8_t* qweight;   // [n, k / 2]: column c of row r is nibble c & 1 (low first) of byte r * k / 2 + c / 2
  const float* scales;      // [n, groups]
  const uint8_t* zeros;     // [n, groups]
  int64_t n, k, groups, g;  // g = k / groups columns per group
};

// Whether the GEMV takes m rows of x_dtype with this weight: m <= kW4GemvMaxRows, bf16 / f16, k % 32 == 0, groups
// of a multiple of 128 columns (or one group), a 16-byte aligned qweight.
bool w4a16_gemv_applies(int64_t m, DType x_dtype, const W4GemvParams& p);
// out [m, n] (row-strided, x's dtype) = x @ W^T (+ bias [n], f32 or out's dtype); x's columns in W's order, its
// rows 16-byte aligned (x.stride(0) % 8 == 0).
void w4a16_gemv(Tensor& out, const Tensor& x, const W4GemvParams& p, const Tensor* bias);

}  // namespace llmserve::cuda

// Vector primitives shared by the CPU kernels (dot products, axpy, conversions), compiled for several x86 ISA
// levels with the best one picked at load time (target_clones), so the binary stays portable without -march.
// All take raw contiguous pointers and a length; none allocates.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace llmserve::cpu {

// sum_i a[i] * b[i], f32 accumulation in several lanes.
float dot_f32(const float* a, const float* b, int64_t n);
// sum_i a[i] * bf16(b[i]).
float dot_f32_bf16(const float* a, const bf16_t* b, int64_t n);
// y[i] += alpha * x[i].
void axpy_f32(float alpha, const float* x, float* y, int64_t n);
// sum_i x[i]^2.
float sum_squares_f32(const float* x, int64_t n);
// out[i] = x[i] * scale * w[i] (out may alias x); weight f32 or bf16.
void scale_mul_f32(const float* x, float scale, const float* w, float* out, int64_t n);
void scale_mul_bf16(const float* x, float scale, const bf16_t* w, float* out, int64_t n);
// out[i] = f32(in[i]).
void bf16_to_f32_n(const bf16_t* in, float* out, int64_t n);

}  // namespace llmserve::cpu

namespace llmserve::cpu {
// out[i] = bf16(in[i]), round to nearest even (NaN stays NaN).
void f32_to_bf16_n(const float* in, bf16_t* out, int64_t n);
}  // namespace llmserve::cpu

// Vector primitives: plain loops written so GCC vectorises them (omp simd reductions), cloned per ISA level.
// Each clone computes the same thing; only the reduction order (and so the last bits of sums) may differ.
#include "kernels/cpu/vec.h"

#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LLMSERVE_ISA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LLMSERVE_ISA_CLONES
#endif

namespace llmserve::cpu {
namespace {

// bf16 -> f32 without the memcpy of dtype.h, so the loops below vectorise.
inline float widen(uint16_t bits) {
  union {
    uint32_t u;
    float f;
  } v;
  v.u = static_cast<uint32_t>(bits) << 16;
  return v.f;
}

}  // namespace

LLMSERVE_ISA_CLONES float dot_f32(const float* a, const float* b, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

LLMSERVE_ISA_CLONES float dot_f32_bf16(const float* a, const bf16_t* b, int64_t n) {
  const uint16_t* bb = reinterpret_cast<const uint16_t*>(b);
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * widen(bb[i]);
  return s;
}

LLMSERVE_ISA_CLONES void axpy_f32(float alpha, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

LLMSERVE_ISA_CLONES float sum_squares_f32(const float* x, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
  return s;
}

LLMSERVE_ISA_CLONES void scale_mul_f32(const float* x, float scale, const float* w, float* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

LLMSERVE_ISA_CLONES void scale_mul_bf16(const float* x, float scale, const bf16_t* w, float* out, int64_t n) {
  const uint16_t* ww = reinterpret_cast<const uint16_t*>(w);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * widen(ww[i]);
}

LLMSERVE_ISA_CLONES void bf16_to_f32_n(const bf16_t* in, float* out, int64_t n) {
  const uint16_t* p = reinterpret_cast<const uint16_t*>(in);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = widen(p[i]);
}

}  // namespace llmserve::cpu

namespace llmserve::cpu {

LLMSERVE_ISA_CLONES void f32_to_bf16_n(const float* in, bf16_t* out, int64_t n) {
  uint16_t* o = reinterpret_cast<uint16_t*>(out);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    union {
      float f;
      uint32_t u;
    } v;
    v.f = in[i];
    const uint32_t u = v.u;
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    o[i] = static_cast<uint16_t>(nan ? ((u >> 16) | 0x40u) : rounded);
  }
}

}  // namespace llmserve::cpu

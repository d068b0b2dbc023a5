// The fp8 e4m3 / int8 rounding of the CUDA quantization kernels, in one place: dynamic_scaled_quantize (quant.cu) and
// the norm / SiLU kernels with the per-token quantization fused in (norm.cu, activation.cu) must agree bit for bit.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "core/tensor.h"

namespace llmserve::cuda {

template <typename Q>
struct QuantTraits;
template <>
struct QuantTraits<__nv_fp8_e4m3> {
  static constexpr float kMax = 448.0f;
  __device__ static __nv_fp8_e4m3 cast(float v) { return __nv_fp8_e4m3(v); }  // satfinite, round to nearest even
};
template <>
struct QuantTraits<int8_t> {
  static constexpr float kMax = 127.0f;
  __device__ static int8_t cast(float v) {
    return static_cast<int8_t>(__float2int_rn(fminf(fmaxf(v, -128.0f), 127.0f)));
  }
};

// The dynamic scale of a row or group whose largest magnitude is amax: max(amax / qmax, 1 / (qmax * 512)) with IEEE
// divisions (the CPU op's arithmetic).
template <typename Q>
__device__ __forceinline__ float dynamic_quant_scale(float amax) {
  constexpr float qmax = QuantTraits<Q>::kMax;
  return fmaxf(__fdiv_rn(amax, qmax), __fdiv_rn(1.0f, qmax * 512.0f));
}

// v / scale rounded as the IEEE division rounds it (the CPU op's arithmetic), from rcp = RN(1 / scale) computed once
// per row or group: a quotient estimate, then two remainder corrections. The first makes the quotient faithful, so
// the second's remainder v - q * scale is exact in one FMA and (Markstein) q + r * rcp rounds to RN(v / scale); the
// sign is v's, so a zero quotient keeps it. Values below 2^-100 may round differently (their remainder falls in the
// subnormal range and is not exact); with the scale's floor 1 / (qmax * 512) their quotients are below 2^-80 and
// quantize to zero either way. One multiply and four FMAs where __fdiv_rn refines a reciprocal and checks ranges.
// quant_divide_gpu_test.cu checks it against __fdiv_rn bit for bit.
__device__ __forceinline__ float quant_divide(float v, float scale, float rcp) {
  float q = __fmul_rn(v, rcp);
  q = __fmaf_rn(__fmaf_rn(-q, scale, v), rcp, q);
  q = __fmaf_rn(__fmaf_rn(-q, scale, v), rcp, q);
  return copysignf(q, v);
}

// Eight values v / scale quantized and stored with one 8-byte access (o 8-byte aligned).
template <typename Q>
__device__ __forceinline__ void store8_quantized(Q* o, const float (&v)[8], float scale) {
  alignas(8) Q q[8];
  const float rcp = __frcp_rn(scale);
#pragma unroll
  for (int e = 0; e < 8; ++e) q[e] = QuantTraits<Q>::cast(quant_divide(v[e], scale, rcp));
  *reinterpret_cast<uint2*>(o) = *reinterpret_cast<const uint2*>(q);
}

// DeepSeek's groups of 128 columns in the row-in-registers kernels: lane t of a block owns the row's 8-element chunks
// t, t + blockDim, ... (blockDim a multiple of 32), so group j's 16 chunks sit in 16 consecutive lanes of one warp.
// Quantizes chunk `chunk` of the row with its group's scale (written to scales_row[chunk / 16] by the group's first
// lane). Every lane of the warp must call it (it shuffles): lanes past the row pass valid = false (v unread).
template <typename Q>
__device__ __forceinline__ void quantize_chunk_group128(Q* o_row, float* scales_row, const float (&v)[8], int chunk,
                                                        bool valid) {
  float amax = 0.f;
  if (valid) {
#pragma unroll
    for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(v[e]));
  }
#pragma unroll
  for (int offset = 8; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  if (!valid) return;
  const float scale = dynamic_quant_scale<Q>(amax);
  if (chunk % 16 == 0) scales_row[chunk / 16] = scale;
  store8_quantized(o_row + chunk * 8, v, scale);
}

// The scalar kernels' group quantization: one warp per group of d / groups columns; value(i) recomputes the row's
// i-th (rounded) value, which is not kept. Call with the whole block; earlier writes the values depend on must be
// visible to the block (a __syncthreads since).
template <typename Q, typename F>
__device__ void quantize_row_by_warps(Q* o_row, float* scales_row, int d, int groups, F value) {
  const int g = d / groups, lane = threadIdx.x % 32;
  for (int j = threadIdx.x / 32; j < groups; j += blockDim.x / 32) {
    float amax = 0.f;
    for (int i = j * g + lane; i < (j + 1) * g; i += 32) amax = fmaxf(amax, fabsf(value(i)));
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    const float scale = dynamic_quant_scale<Q>(amax);
    if (lane == 0) scales_row[j] = scale;
    for (int i = j * g + lane; i < (j + 1) * g; i += 32) o_row[i] = QuantTraits<Q>::cast(__fdiv_rn(value(i), scale));
  }
}

// Calls f(Q{}) for the quantized dtype (fp8_e4m3, else i8: the ops' checks allow only those two).
template <typename F>
void dispatch_quant(DType dtype, F&& f) {
  if (dtype == DType::kFP8E4M3) return f(__nv_fp8_e4m3{});
  return f(int8_t{});
}

}  // namespace llmserve::cuda

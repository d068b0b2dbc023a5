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

// Eight values v / scale quantized and stored with one 8-byte access (o 8-byte aligned).
template <typename Q>
__device__ __forceinline__ void store8_quantized(Q* o, const float (&v)[8], float scale) {
  alignas(8) Q q[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) q[e] = QuantTraits<Q>::cast(__fdiv_rn(v[e], scale));
  *reinterpret_cast<uint2*>(o) = *reinterpret_cast<const uint2*>(q);
}

// Calls f(Q{}) for the quantized dtype (fp8_e4m3, else i8: the ops' checks allow only those two).
template <typename F>
void dispatch_quant(DType dtype, F&& f) {
  if (dtype == DType::kFP8E4M3) return f(__nv_fp8_e4m3{});
  return f(int8_t{});
}

}  // namespace llmserve::cuda

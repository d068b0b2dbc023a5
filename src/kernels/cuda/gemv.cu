// ops::linear for single-token products (m = kMaxGemvRows = 1) with 16-bit operands: a weight-streaming GEMV
// (bench/RESULTS.md: 4-11% faster than cuBLASLt at m = 1 on the Mistral-7B shapes, slower at m = 4). Each
// warp owns one output column j (a weight row), reads it once with 16-byte loads, several in flight, and dots it
// with every x row (x stays in L1/L2); f32 accumulation, warp-shuffle reduction, bias added in f32 before the one
// rounding to out's dtype. Memory-bound by design: its floor is weight bytes / bandwidth.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace llmserve::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane

template <typename T>
struct Vec8;  // eight 16-bit values as one 16-byte word
template <>
struct Vec8<__nv_bfloat16> {
  static __device__ __forceinline__ void to_float(const uint4& v, float* f) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 p = __bfloat1622float2(h[i]);
      f[2 * i] = p.x;
      f[2 * i + 1] = p.y;
    }
  }
};
template <>
struct Vec8<__half> {
  static __device__ __forceinline__ void to_float(const uint4& v, float* f) {
    const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 p = __half22float2(h[i]);
      f[2 * i] = p.x;
      f[2 * i + 1] = p.y;
    }
  }
};

// Streaming load: the weight is read once per call, so keep it out of L1.
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <typename T, typename O, typename B, int M>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    gemv_kernel(O* out, int64_t out_stride, const T* x, int64_t x_stride, const T* weight, const B* bias, int64_t n,
                int64_t k) {
  const int lane = threadIdx.x % 32;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (j >= n) return;
  const uint4* w = reinterpret_cast<const uint4*>(weight + j * k);
  const int64_t k8 = k / 8;  // 16-byte words per row
  float acc[M];
#pragma unroll
  for (int r = 0; r < M; ++r) acc[r] = 0.f;
  int64_t i = lane;
  for (; i + 32 * (kUnroll - 1) < k8; i += 32 * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = load_stream(w + i + 32 * u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float wf[8];
      Vec8<T>::to_float(wv[u], wf);
#pragma unroll
      for (int r = 0; r < M; ++r) {
        float xf[8];
        Vec8<T>::to_float(__ldg(reinterpret_cast<const uint4*>(x + r * x_stride) + i + 32 * u), xf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[r] = fmaf(wf[e], xf[e], acc[r]);
      }
    }
  }
  for (; i < k8; i += 32) {
    float wf[8];
    Vec8<T>::to_float(load_stream(w + i), wf);
#pragma unroll
    for (int r = 0; r < M; ++r) {
      float xf[8];
      Vec8<T>::to_float(__ldg(reinterpret_cast<const uint4*>(x + r * x_stride) + i), xf);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r] = fmaf(wf[e], xf[e], acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < M; ++r) {
    float v = acc[r];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) {
      if (bias != nullptr) v += load_f(bias + j);
      store_f(out + r * out_stride + j, v);
    }
  }
}

template <typename T, typename O, typename B>
void launch(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor* bias) {
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  const B* b = bias != nullptr ? bias->data<B>() : nullptr;
  const unsigned grid = ceil_div(n, kWarpsPerBlock);
  const int threads = kWarpsPerBlock * 32;
  cudaStream_t s = stream();
  O* o = out.data<O>();
  const T* xp = x.data<T>();
  const T* w = weight.data<T>();
  CHECK_LE(m, kMaxGemvRows) << "gemv: m " << m;  // rows 2..4 compile, but cuBLASLt measured faster there
  gemv_kernel<T, O, B, 1><<<grid, threads, 0, s>>>(o, out.stride(0), xp, x.stride(0), w, b, n, k);
  check_launch("gemv_kernel");
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool gemv_applies(const Tensor& out, const Tensor& x, const Tensor& weight) {
  const int64_t m = x.size(0), k = x.size(1);
  return m >= 1 && m <= kMaxGemvRows && (x.dtype() == DType::kBF16 || x.dtype() == DType::kF16) && k % 8 == 0 &&
         x.stride(0) % 8 == 0 && aligned16(x.raw_data()) && aligned16(weight.raw_data()) && out.numel() > 0;
}

void gemv(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor* bias) {
  // Bias: f32, or out's dtype (so a 16-bit bias only with a 16-bit out).
  const bool f32_bias = bias == nullptr || bias->dtype() == DType::kF32;
  const bool f32_out = out.dtype() == DType::kF32;
  if (x.dtype() == DType::kBF16) {
    using T = __nv_bfloat16;
    if (f32_out) return launch<T, float, float>(out, x, weight, bias);
    return f32_bias ? launch<T, T, float>(out, x, weight, bias) : launch<T, T, T>(out, x, weight, bias);
  }
  using T = __half;
  if (f32_out) return launch<T, float, float>(out, x, weight, bias);
  f32_bias ? launch<T, T, float>(out, x, weight, bias) : launch<T, T, T>(out, x, weight, bias);
}

}  // namespace llmserve::cuda

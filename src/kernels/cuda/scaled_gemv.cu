// ops::scaled_mm for decode-sized m (<= kScaledGemvMaxRows) on CUDA: a weight-streaming GEMV. One warp per output
// row; each lane reads 16 quantized weights (16 bytes) per step and the matching 16 values of every activation row,
// so the weight is read once at full width whatever m is. fp8 products accumulate in f32 (each product is exact),
// int8 in int32 through __dp4a (exact, as cuBLASLt's int8 GEMM). Scales: per tensor / token / channel applied once
// at the end; per-token-group x 128-block applied per 128-column block (a 16-column step never straddles one).
#include <cuda_fp8.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace llmserve::cuda {
namespace {

constexpr int64_t kScaledGemvMaxRows = 8;  // above this cuBLASLt's tensor cores win (to be measured)

enum ScaleKind : int { kPerTensor = 0, kPerRow = 1, kPerBlock = 2 };

struct GemvScales {
  const float* a;  // activations: [1], [m] or [m, k / 128]
  const float* b;  // weights: [1], [n] or [ceil(n / 128), ceil(k / 128)]
  int a_kind, b_kind;
  int64_t a_groups, b_groups;  // columns of the 2-D scale tensors
};

__device__ __forceinline__ float fp8_to_float(uint8_t bits) {
  __nv_fp8_e4m3 v;
  v.__x = bits;
  return static_cast<float>(v);
}

// Dot product of 16 quantized values (one uint4 each side).
template <typename Q>
__device__ __forceinline__ float dot16(const uint4& x, const uint4& w);

template <>
__device__ __forceinline__ float dot16<__nv_fp8_e4m3>(const uint4& x, const uint4& w) {
  const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ws[4] = {w.x, w.y, w.z, w.w};
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int b = 0; b < 4; ++b) s += fp8_to_float((xs[i] >> (8 * b)) & 0xff) * fp8_to_float((ws[i] >> (8 * b)) & 0xff);
  }
  return s;
}

template <>
__device__ __forceinline__ float dot16<int8_t>(const uint4& x, const uint4& w) {
  int s = 0;
  s = __dp4a(static_cast<int>(x.x), static_cast<int>(w.x), s);
  s = __dp4a(static_cast<int>(x.y), static_cast<int>(w.y), s);
  s = __dp4a(static_cast<int>(x.z), static_cast<int>(w.z), s);
  s = __dp4a(static_cast<int>(x.w), static_cast<int>(w.w), s);
  return static_cast<float>(s);  // |s| <= 16 * 128 * 128: exact in f32
}

template <typename Q, typename T, typename B, int M>
__global__ void scaled_gemv_kernel(T* out, const uint8_t* a, const uint8_t* b, GemvScales sc, const B* bias, int m,
                                   int64_t n, int64_t k) {
  const int lane = threadIdx.x % 32;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= n) return;
  const bool blocked = sc.b_kind == kPerBlock;
  float acc[M];
#pragma unroll
  for (int i = 0; i < M; ++i) acc[i] = 0.0f;
  const uint8_t* wrow = b + r * k;
  for (int64_t c0 = static_cast<int64_t>(lane) * 16; c0 < k; c0 += 32 * 16) {
    const uint4 w = *reinterpret_cast<const uint4*>(wrow + c0);
    const float wb = blocked ? sc.b[(r / 128) * sc.b_groups + c0 / 128] : 1.0f;
#pragma unroll
    for (int i = 0; i < M; ++i) {
      if (i >= m) break;
      const uint4 x = *reinterpret_cast<const uint4*>(a + i * k + c0);
      const float d = dot16<Q>(x, w);
      acc[i] += blocked ? d * wb * sc.a[i * sc.a_groups + c0 / 128] : d;
    }
  }
#pragma unroll
  for (int i = 0; i < M; ++i) {
    if (i >= m) break;
    float v = acc[i];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane != 0) continue;
    if (!blocked) {
      v *= (sc.a_kind == kPerTensor ? sc.a[0] : sc.a[i]) * (sc.b_kind == kPerTensor ? sc.b[0] : sc.b[r]);
    }
    if (bias != nullptr) v += load_f(bias + r);
    store_f(out + i * n + r, v);
  }
}

template <typename Q, typename T, typename B>
void launch(Tensor& out, const Tensor& a, const Tensor& b, const GemvScales& sc, const B* bias) {
  constexpr int kWarps = 4;
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  const unsigned blocks = static_cast<unsigned>((n + kWarps - 1) / kWarps);
  const auto* ap = static_cast<const uint8_t*>(a.raw_data());
  const auto* bp = static_cast<const uint8_t*>(b.raw_data());
  const int mi = static_cast<int>(m);
  if (m <= 1) {
    scaled_gemv_kernel<Q, T, B, 1><<<blocks, kWarps * 32, 0, stream()>>>(out.data<T>(), ap, bp, sc, bias, mi, n, k);
  } else if (m <= 2) {
    scaled_gemv_kernel<Q, T, B, 2><<<blocks, kWarps * 32, 0, stream()>>>(out.data<T>(), ap, bp, sc, bias, mi, n, k);
  } else if (m <= 4) {
    scaled_gemv_kernel<Q, T, B, 4><<<blocks, kWarps * 32, 0, stream()>>>(out.data<T>(), ap, bp, sc, bias, mi, n, k);
  } else {
    scaled_gemv_kernel<Q, T, B, 8><<<blocks, kWarps * 32, 0, stream()>>>(out.data<T>(), ap, bp, sc, bias, mi, n, k);
  }
  check_launch("scaled_gemv_kernel");
}

int kind_of(const Tensor& scales, bool block) {
  if (scales.numel() == 1 && scales.dim() <= 1) return kPerTensor;
  return block ? kPerBlock : kPerRow;
}

}  // namespace

// Declared where they are used (scaled_mm.cc): the GEMV path of ops::scaled_mm.
bool scaled_gemv_applies(const Tensor& a, const Tensor& b);
void scaled_gemv(Tensor& out, const Tensor& a, const Tensor& a_scales, const Tensor& b, const Tensor& b_scales,
                 const Tensor* bias);

bool scaled_gemv_applies(const Tensor& a, const Tensor& b) {
  return a.size(0) <= kScaledGemvMaxRows && a.size(1) % 16 == 0 && aligned16(a.raw_data()) && aligned16(b.raw_data());
}

void scaled_gemv(Tensor& out, const Tensor& a, const Tensor& a_scales, const Tensor& b, const Tensor& b_scales,
                 const Tensor* bias) {
  const bool block = b_scales.dim() == 2;
  GemvScales sc{a_scales.data<float>(),
                b_scales.data<float>(),
                kind_of(a_scales, block),
                kind_of(b_scales, block),
                a_scales.dim() == 2 ? a_scales.size(1) : 1,
                b_scales.dim() == 2 ? b_scales.size(1) : 1};
  dispatch_float(out.dtype(), "scaled_mm", [&](auto t) {
    using T = decltype(t);
    auto run = [&](auto q) {
      using Q = decltype(q);
      if (bias == nullptr) return launch<Q, T, float>(out, a, b, sc, nullptr);
      dispatch_float(bias->dtype(), "scaled_mm bias", [&](auto bt) {
        using B = decltype(bt);
        launch<Q, T, B>(out, a, b, sc, bias->data<B>());
      });
    };
    if (a.dtype() == DType::kI8) {
      run(int8_t{});
    } else {
      run(__nv_fp8_e4m3{});
    }
  });
}

}  // namespace llmserve::cuda

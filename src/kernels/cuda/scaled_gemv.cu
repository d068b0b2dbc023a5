// ops::scaled_mm for decode-sized m (<= kScaledGemvMaxRows) on CUDA: a weight-streaming GEMV on the tensor cores,
// built like gemv.cu (gemv_common.cuh): each warp owns a 16-row tile of the weight and 1 / splits of its 128-column
// blocks (interleaved), streams them with several 16-byte loads in flight per lane (the first round before pdl_wait,
// so they overlap the activation-quantizing kernel before it), and multiplies them with the 8-bit activations
// straight from the loaded registers: mma.sync m16n8k32 (e4m3 -> f32, s8 -> s32), one 8-token tile per 8 rows of m.
// No conversion per weight, so the weight is read once at bandwidth whatever m is. Each 128-column block's product
// is added to f32 accumulators (exact for int8; bounds the fp8 tensor cores' reduced-precision accumulation), times
// its scales for 128x128 block scales; per tensor / token / channel scales are applied once at the end.
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemv_common.cuh"

namespace llmserve::cuda {
namespace {

constexpr int64_t kScaledGemvMaxRows = 16;  // two 8-token tiles; the weight is still read once
constexpr int kUnroll = 2;                  // 128-column blocks per round: 4 16-byte loads each per lane

enum ScaleKind : int { kPerTensor = 0, kPerRow = 1, kPerBlock = 2 };

struct GemvScales {
  const float* a;  // activations: [1], [m] or [m, k / 128]
  const float* b;  // weights: [1], [n] or [ceil(n / 128), ceil(k / 128)]
  int a_kind, b_kind;
  int64_t a_groups, b_groups;  // columns of the 2-D scale tensors
};

// d += A B for one m16n8k32 tile. A: 16 weight rows x 32 columns (a0 / a2: row g, a1 / a3: row g + 8; a0 / a1
// columns 4t..4t+3, a2 / a3 columns 16 + 4t..), B: 32 columns x 8 tokens (b0 columns 4t.., b1 16 + 4t.., token g).
template <typename Q>
struct Mma;
template <>
struct Mma<__nv_fp8_e4m3> {
  using Acc = float;
  __device__ static void run(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                             uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    __trap();  // scaled_gemv_applies keeps fp8 off GPUs without fp8 tensor cores
#endif
  }
};
template <>
struct Mma<int8_t> {
  using Acc = int;
  __device__ static void run(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                             uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
};

// One lane's share of a 128-column block of its tile: columns 128 blk + 64 h + 16 t (h = 0, 1) of rows g (w[2h])
// and g + 8 (w[2h + 1]); zeros past k (k % 16 == 0: a piece is whole or absent).
__device__ __forceinline__ void load_block(uint4 (&w)[4], const uint8_t* w_lo, const uint8_t* w_hi, int64_t blk,
                                           int64_t k) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t col = blk * 128 + 64 * h + 16 * t;
    w[2 * h] = col < k ? load_stream(w_lo + col) : make_uint4(0, 0, 0, 0);
    w[2 * h + 1] = col < k ? load_stream(w_hi + col) : make_uint4(0, 0, 0, 0);
  }
}

// acc += this block's products (times its scales when the weight has 128x128 block scales). The k32 steps pair
// weight words with the same activation words, so the tensor core's column order within a step is immaterial.
template <typename Q, int kTiles>
__device__ __forceinline__ void multiply_block(float (&acc)[kTiles][4], const uint4 (&w)[4], const uint8_t* a,
                                               const GemvScales& sc, int m, int64_t k, int64_t row0, int64_t blk) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  typename Mma<Q>::Acc c[kTiles][4] = {};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t col = blk * 128 + 64 * h + 16 * t;
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      const int tok = 8 * i + g;
      const uint4 x =
          tok < m && col < k ? __ldg(reinterpret_cast<const uint4*>(a + tok * k + col)) : make_uint4(0, 0, 0, 0);
      Mma<Q>::run(c[i], w[2 * h].x, w[2 * h + 1].x, w[2 * h].y, w[2 * h + 1].y, x.x, x.y);
      Mma<Q>::run(c[i], w[2 * h].z, w[2 * h + 1].z, w[2 * h].w, w[2 * h + 1].w, x.z, x.w);
    }
  }
  if (sc.b_kind == kPerBlock) {  // 16-row tiles never straddle a 128-row block
    const float sb = sc.b[(row0 / 128) * sc.b_groups + blk];
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      const int tok = 8 * i + 2 * t;
      const float s0 = tok < m ? sc.a[tok * sc.a_groups + blk] * sb : 0.f;
      const float s1 = tok + 1 < m ? sc.a[(tok + 1) * sc.a_groups + blk] * sb : 0.f;
      acc[i][0] = fmaf(static_cast<float>(c[i][0]), s0, acc[i][0]);
      acc[i][1] = fmaf(static_cast<float>(c[i][1]), s1, acc[i][1]);
      acc[i][2] = fmaf(static_cast<float>(c[i][2]), s0, acc[i][2]);
      acc[i][3] = fmaf(static_cast<float>(c[i][3]), s1, acc[i][3]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][e] += static_cast<float>(c[i][e]);
    }
  }
}

template <typename Q, typename T, typename B, int kTiles>
__global__ void __launch_bounds__(kGemvWarpsPerBlock * 32)
    scaled_gemv_kernel(T* out, const uint8_t* a, const uint8_t* b, GemvScales sc, const B* bias, int m, int64_t n,
                       int64_t k, int splits) {
  __shared__ float partial[kGemvWarpsPerBlock * kTiles * 4 * 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int part = warp % splits;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * (kGemvWarpsPerBlock / splits) + warp / splits) * 16;
  // Rows past n (the last tile) read row n - 1 and are never stored; a tile wholly past n reads nothing. No early
  // return: the whole block meets at the reduction's barrier.
  const uint8_t* w_lo = b + min(row0 + g, n - 1) * k;
  const uint8_t* w_hi = b + min(row0 + g + 8, n - 1) * k;
  const int64_t blocks = row0 < n ? (k + 127) / 128 : 0;
  float acc[kTiles][4] = {};
  const int64_t step = splits;
  int64_t blk = part;
  // The first round of weight loads goes out before pdl_wait: the weight is constant.
  const bool first_round = blk + step * (kUnroll - 1) < blocks;
  uint4 w[kUnroll][4];
  if (first_round) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) load_block(w[u], w_lo, w_hi, blk + step * u, k);
  }
  pdl_wait();
  if (first_round) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) multiply_block<Q, kTiles>(acc, w[u], a, sc, m, k, row0, blk + step * u);
    blk += step * kUnroll;
  }
  for (; blk + step * (kUnroll - 1) < blocks; blk += step * kUnroll) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) load_block(w[u], w_lo, w_hi, blk + step * u, k);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) multiply_block<Q, kTiles>(acc, w[u], a, sc, m, k, row0, blk + step * u);
  }
  for (; blk < blocks; blk += step) {
    load_block(w[0], w_lo, w_hi, blk, k);
    multiply_block<Q, kTiles>(acc, w[0], a, sc, m, k, row0, blk);
  }
  pdl_trigger();
  if (!reduce_tile_over_splits<kTiles>(acc, partial, splits)) return;
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t row = row0 + g + (e >= 2 ? 8 : 0);
      const int tok = 8 * i + 2 * t + (e & 1);
      if (row >= n || tok >= m) continue;
      float v = acc[i][e];
      if (sc.b_kind != kPerBlock) {
        v *= (sc.a_kind == kPerTensor ? sc.a[0] : sc.a[tok]) * (sc.b_kind == kPerTensor ? sc.b[0] : sc.b[row]);
      }
      if (bias != nullptr) v += load_f(bias + row);
      store_f(out + tok * n + row, v);
    }
  }
}

template <typename Q, typename T, typename B>
void launch(Tensor& out, const Tensor& a, const Tensor& b, const GemvScales& sc, const B* bias) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  const int64_t tiles = (n + 15) / 16, blocks = (k + 127) / 128;
  const int splits = choose_gemv_splits(tiles, blocks / kUnroll);
  const unsigned grid = ceil_div(tiles, kGemvWarpsPerBlock / splits);
  const auto* ap = static_cast<const uint8_t*>(a.raw_data());
  const auto* bp = static_cast<const uint8_t*>(b.raw_data());
  const int mi = static_cast<int>(m);
  constexpr int kThreads = kGemvWarpsPerBlock * 32;
  if (m <= 8) {
    launch_pdl("scaled_gemv_kernel", scaled_gemv_kernel<Q, T, B, 1>, grid, kThreads, out.data<T>(), ap, bp, sc, bias,
               mi, n, k, splits);
  } else {
    launch_pdl("scaled_gemv_kernel", scaled_gemv_kernel<Q, T, B, 2>, grid, kThreads, out.data<T>(), ap, bp, sc, bias,
               mi, n, k, splits);
  }
}

int kind_of(const Tensor& scales, bool block) {
  if (scales.numel() == 1 && scales.dim() <= 1) return kPerTensor;
  return block ? kPerBlock : kPerRow;
}

// fp8 tensor-core MMA needs compute capability 8.9 (Ada) or later; decided once per process.
bool have_fp8_mma() {
  static const bool have = [] {
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) return false;
    return major * 10 + minor >= 89;
  }();
  return have;
}

}  // namespace

// Declared where they are used (scaled_mm.cc): the GEMV path of ops::scaled_mm.
bool scaled_gemv_applies(const Tensor& a, const Tensor& b);
void scaled_gemv(Tensor& out, const Tensor& a, const Tensor& a_scales, const Tensor& b, const Tensor& b_scales,
                 const Tensor* bias);

bool scaled_gemv_applies(const Tensor& a, const Tensor& b) {
  return a.size(0) <= kScaledGemvMaxRows && a.size(1) % 16 == 0 && aligned16(a.raw_data()) && aligned16(b.raw_data()) &&
         (a.dtype() == DType::kI8 || have_fp8_mma());
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

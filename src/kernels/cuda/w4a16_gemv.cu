// The m <= 32 path of ops::w4a16_linear on CUDA: a weight-streaming GEMV on the tensor cores, built like gemv.cu
// (gemv_common.cuh). Each warp owns a 16-row tile of the 4-bit weight and 1 / splits of its 128-column blocks
// (interleaved), streams them with several 16-byte loads in flight per lane (the first round before pdl_wait), turns
// each 32-bit word of 8 nibbles into 4 pairs of 16-bit (q - zero) with the magic-number trick (nibble | exponent
// bits = 128 + q in bf16, 1024 + q in f16; a packed subtraction of 128 + zero leaves q - zero exactly, ~11 integer /
// packed-half instructions per 8 weights) and multiplies them with x on mma.sync m16n8k16 (f32 accumulate, exact
// products). Each block is one quantization group (or part of the only one), so its product is scaled once in f32.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/gemv_common.cuh"
#include "kernels/cuda/w4a16_gemv.h"

namespace llmserve::cuda {
namespace {

constexpr int kUnroll = 4;  // 128-column blocks per round: 2 16-byte loads each per lane

// The 16-bit type's packed arithmetic and tensor-core product.
template <typename T>
struct Half16;
template <>
struct Half16<__nv_bfloat16> {
  static constexpr uint32_t kBias = 0x4300;  // bf16 128.0: 128 + q (q < 16) is 0x4300 | q, exactly
  __device__ static uint32_t sub(uint32_t a, uint32_t b) {
    const __nv_bfloat162 d =
        __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
    return *reinterpret_cast<const uint32_t*>(&d);
  }
  __device__ static void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                             uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
};
template <>
struct Half16<__half> {
  static constexpr uint32_t kBias = 0x6400;  // f16 1024.0: 1024 + q is 0x6400 | q, exactly
  __device__ static uint32_t sub(uint32_t a, uint32_t b) {
    const __half2 d = __hsub2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
    return *reinterpret_cast<const uint32_t*>(&d);
  }
  __device__ static void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                             uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
};

// 8 nibbles (columns c0..c7, c_e in bits 4e..4e+3) -> 4 pairs of q - zero: (c0, c4), (c1, c5), (c2, c6), (c3, c7).
// `zero2` is the pair (bias + zero, bias + zero).
template <typename T>
__device__ __forceinline__ void dequant8(uint32_t w, uint32_t zero2, uint32_t (&p)[4]) {
  constexpr uint32_t kBias2 = Half16<T>::kBias * 0x10001u;
#pragma unroll
  for (int e = 0; e < 4; ++e) p[e] = Half16<T>::sub(((w >> (4 * e)) & 0x000f000fu) | kBias2, zero2);
}

// Pairs of x in the same order: 8 consecutive values (4 words of 2) -> (x0, x4), (x1, x5), (x2, x6), (x3, x7).
__device__ __forceinline__ void pair_up(const uint4& x, uint32_t (&p)[4]) {
  p[0] = __byte_perm(x.x, x.z, 0x5410);
  p[1] = __byte_perm(x.x, x.z, 0x7632);
  p[2] = __byte_perm(x.y, x.w, 0x5410);
  p[3] = __byte_perm(x.y, x.w, 0x7632);
}

// One lane's share of a 128-column block: columns 128 blk + 32 t .. + 32 (16 bytes) of rows g (w[0]) and g + 8
// (w[1]); zeros past k (k % 32 == 0: a piece is whole or absent; the matching x piece is zero too).
__device__ __forceinline__ void load_block(uint4 (&w)[2], const uint8_t* q_lo, const uint8_t* q_hi, int64_t blk,
                                           int64_t k) {
  const int64_t col = blk * 128 + 32 * (threadIdx.x % 4);
  w[0] = col < k ? load_stream(q_lo + col / 2) : make_uint4(0, 0, 0, 0);
  w[1] = col < k ? load_stream(q_hi + col / 2) : make_uint4(0, 0, 0, 0);
}

struct TileRows {
  int64_t lo, hi;  // this lane's rows g and g + 8 (clamped to n - 1)
};

// acc += scale(row) * this block's products. Word e of a lane's piece feeds two k16 steps whose weight and x
// pairs come out of the same columns, so the tensor core's column order within a step is immaterial.
template <typename T, int kTiles>
__device__ __forceinline__ void multiply_block(float (&acc)[kTiles][4], const uint4 (&w)[2], const T* x, int64_t ldx,
                                               const W4GemvParams& p, TileRows rows, int m, int64_t blk) {
  const int lane = threadIdx.x % 32, g = lane / 4;
  const int64_t col = blk * 128 + 32 * (lane % 4);
  const int64_t group = blk * 128 / p.g;  // p.g % 128 == 0, or one group
  const float s_lo = __ldg(p.scales + rows.lo * p.groups + group), s_hi = __ldg(p.scales + rows.hi * p.groups + group);
  const uint32_t z_lo = (Half16<T>::kBias + __ldg(p.zeros + rows.lo * p.groups + group)) * 0x10001u;
  const uint32_t z_hi = (Half16<T>::kBias + __ldg(p.zeros + rows.hi * p.groups + group)) * 0x10001u;
  const uint32_t w_lo[4] = {w[0].x, w[0].y, w[0].z, w[0].w}, w_hi[4] = {w[1].x, w[1].y, w[1].z, w[1].w};
  float c[kTiles][4] = {};
#pragma unroll
  for (int e = 0; e < 4; ++e) {  // columns col + 8e .. + 8
    uint32_t a_lo[4], a_hi[4];
    dequant8<T>(w_lo[e], z_lo, a_lo);
    dequant8<T>(w_hi[e], z_hi, a_hi);
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      const int tok = 8 * i + g;
      const uint4 xv = tok < m && col < p.k ? __ldg(reinterpret_cast<const uint4*>(x + tok * ldx + col + 8 * e))
                                            : make_uint4(0, 0, 0, 0);
      uint32_t b[4];
      pair_up(xv, b);
      Half16<T>::mma(c[i], a_lo[0], a_hi[0], a_lo[1], a_hi[1], b[0], b[1]);
      Half16<T>::mma(c[i], a_lo[2], a_hi[2], a_lo[3], a_hi[3], b[2], b[3]);
    }
  }
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    acc[i][0] = fmaf(c[i][0], s_lo, acc[i][0]);
    acc[i][1] = fmaf(c[i][1], s_lo, acc[i][1]);
    acc[i][2] = fmaf(c[i][2], s_hi, acc[i][2]);
    acc[i][3] = fmaf(c[i][3], s_hi, acc[i][3]);
  }
}

template <typename T, typename B, int kTiles>
__global__ void __launch_bounds__(kGemvWarpsPerBlock * 32)
    w4a16_gemv_kernel(T* out, int64_t ldo, const T* x, int64_t ldx, int m, W4GemvParams p, const B* bias, int splits) {
  __shared__ float partial[kGemvWarpsPerBlock * kTiles * 4 * 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int part = warp % splits;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * (kGemvWarpsPerBlock / splits) + warp / splits) * 16;
  // Rows past n (the last tile) read row n - 1 and are never stored; a tile wholly past n reads nothing. No early
  // return: the whole block meets at the reduction's barrier.
  const TileRows rows{min(row0 + g, p.n - 1), min(row0 + g + 8, p.n - 1)};
  const uint8_t* q_lo = p.qweight + rows.lo * (p.k / 2);
  const uint8_t* q_hi = p.qweight + rows.hi * (p.k / 2);
  const int64_t blocks = row0 < p.n ? (p.k + 127) / 128 : 0;
  float acc[kTiles][4] = {};
  const int64_t step = splits;
  int64_t blk = part;
  // The first round of weight loads goes out before pdl_wait: the weight is constant.
  const bool first_round = blk + step * (kUnroll - 1) < blocks;
  uint4 w[kUnroll][2];
  if (first_round) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) load_block(w[u], q_lo, q_hi, blk + step * u, p.k);
  }
  pdl_wait();
  if (first_round) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) multiply_block<T, kTiles>(acc, w[u], x, ldx, p, rows, m, blk + step * u);
    blk += step * kUnroll;
  }
  for (; blk + step * (kUnroll - 1) < blocks; blk += step * kUnroll) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) load_block(w[u], q_lo, q_hi, blk + step * u, p.k);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) multiply_block<T, kTiles>(acc, w[u], x, ldx, p, rows, m, blk + step * u);
  }
  for (; blk < blocks; blk += step) {
    load_block(w[0], q_lo, q_hi, blk, p.k);
    multiply_block<T, kTiles>(acc, w[0], x, ldx, p, rows, m, blk);
  }
  pdl_trigger();
  if (!reduce_tile_over_splits<kTiles>(acc, partial, splits)) return;
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t row = row0 + g + (e >= 2 ? 8 : 0);
      const int tok = 8 * i + 2 * t + (e & 1);
      if (row >= p.n || tok >= m) continue;
      float v = acc[i][e];
      if (bias != nullptr) v += load_f(bias + row);
      store_f(out + tok * ldo + row, v);
    }
  }
}

template <typename T, typename B>
void launch(Tensor& out, const Tensor& x, const W4GemvParams& p, const B* bias) {
  const int64_t m = x.size(0), tiles = (p.n + 15) / 16, blocks = (p.k + 127) / 128;
  const int splits = choose_gemv_splits(tiles, blocks / kUnroll);
  const unsigned grid = ceil_div(tiles, kGemvWarpsPerBlock / splits);
  constexpr int kThreads = kGemvWarpsPerBlock * 32;
  const int mi = static_cast<int>(m);
  if (m <= 8) {
    launch_pdl("w4a16_gemv_kernel", w4a16_gemv_kernel<T, B, 1>, grid, kThreads, out.data<T>(), out.stride(0),
               x.data<T>(), x.stride(0), mi, p, bias, splits);
  } else if (m <= 16) {  // four tiles above: ~180 registers, one block per SM, still the weight read once
    launch_pdl("w4a16_gemv_kernel", w4a16_gemv_kernel<T, B, 2>, grid, kThreads, out.data<T>(), out.stride(0),
               x.data<T>(), x.stride(0), mi, p, bias, splits);
  } else {
    launch_pdl("w4a16_gemv_kernel", w4a16_gemv_kernel<T, B, 4>, grid, kThreads, out.data<T>(), out.stride(0),
               x.data<T>(), x.stride(0), mi, p, bias, splits);
  }
}

template <typename T>
void run(Tensor& out, const Tensor& x, const W4GemvParams& p, const Tensor* bias) {
  if (bias == nullptr) return launch<T, float>(out, x, p, nullptr);
  if (bias->dtype() == DType::kF32) return launch<T, float>(out, x, p, bias->data<float>());
  launch<T, T>(out, x, p, bias->data<T>());
}

}  // namespace

bool w4a16_gemv_applies(int64_t m, DType x_dtype, const W4GemvParams& p) {
  return m <= kW4GemvMaxRows && (x_dtype == DType::kBF16 || x_dtype == DType::kF16) && p.k % 32 == 0 &&
         (p.g % 128 == 0 || p.groups == 1) && aligned16(p.qweight);
}

void w4a16_gemv(Tensor& out, const Tensor& x, const W4GemvParams& p, const Tensor* bias) {
  if (x.dtype() == DType::kBF16) return run<__nv_bfloat16>(out, x, p, bias);
  run<__half>(out, x, p, bias);
}

}  // namespace llmserve::cuda

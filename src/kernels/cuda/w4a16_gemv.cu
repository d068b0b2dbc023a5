// The m <= 32 path of ops::w4a16_linear on CUDA: a weight-streaming GEMV on the tensor cores, built like gemv.cu
// (gemv_common.cuh). Each warp owns a tile of 16 or 32 weight rows and 1 / splits of its 128-column blocks
// (interleaved), streams them through a ring of registers (the next one or two blocks' 16-byte loads, scales and zeros
// are in flight while the current one is multiplied; the first before pdl_wait) and multiplies them with x on
// mma.sync m16n8k16 (f32 accumulate, exact products).
//
// At 4 bits the instruction issue, not memory, is the limit: at an H200's bandwidth an SM must retire ~64 weights per
// clock, i.e. a lane may spend ~16 issue slots (8 on the integer pipe) per 32-bit word of 8 weights. So each nibble
// becomes a 16-bit operand in one lop3 (the magic-number trick: nibble | exponent bits = 128 + q in bf16, 1024 + 16 q
// in f16, exact), the shifts that bring the nibbles down run as multiplies (mul.hi: the multiplier is another pipe than
// lop3's), and the zero point is not subtracted per weight: the block's product of bias + q is corrected once in f32,
// sum_k x (q - z) = sum_k x (bias + q) - (bias + z) sum_k x, where sum_k x comes from one extra mma per k16 step
// against ones (shared by the warp's row tiles). One-tile decode (m <= 8) of a large weight takes 32-row warps, so each
// x fragment and its pairing feed four weight words. Each block is one quantization group (or part of the only one),
// so its product is scaled once in f32.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/gemv_common.cuh"
#include "kernels/cuda/w4a16_gemv.h"

namespace llmserve::cuda {
namespace {

// (a & b) | c in one instruction (the compiler does not always fuse the mask and the exponent bits).
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// w >> kShift as the high word of a multiply: it issues to the multiplier, not to the integer pipe lop3 needs.
template <int kShift>
__device__ __forceinline__ uint32_t shr_mul(uint32_t w) {
  uint32_t d;
  asm("mul.hi.u32 %0, %1, %2;" : "=r"(d) : "r"(w), "n"(1u << (32 - kShift)));
  return d;
}

// The 16-bit type's tensor-core product and its operands: 1.0, and the magic-number encoding of a nibble q,
// kMagic | q shifted into the mantissa = kBias + kStep q exactly (bf16: 128 + q, its 7 mantissa bits leave no room
// higher; f16: 1024 + 16 q, whose bias is 64 steps, not 1024, so the f32 correction cancels 16 times less).
template <typename T>
struct Half16;
template <>
struct Half16<__nv_bfloat16> {
  static constexpr uint32_t kMagic = 0x4300, kOne = 0x3F80, kBias = 128, kStep = 1;
  __device__ static void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                             uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  // 8 nibbles (columns c0..c7, c_e in bits 4e..4e+3) -> 4 pairs of 128 + q: (c0, c4), (c1, c5), (c2, c6), (c3, c7).
  __device__ static void dequant8(uint32_t w, uint32_t (&p)[4]) {
    constexpr uint32_t kMagic2 = kMagic * 0x10001u, kMask = 0x000f000fu;
    p[0] = and_or(w, kMask, kMagic2);
    p[1] = and_or(shr_mul<4>(w), kMask, kMagic2);
    p[2] = and_or(shr_mul<8>(w), kMask, kMagic2);
    p[3] = and_or(shr_mul<12>(w), kMask, kMagic2);
  }
};
template <>
struct Half16<__half> {
  static constexpr uint32_t kMagic = 0x6400, kOne = 0x3C00, kBias = 1024, kStep = 16;
  __device__ static void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                             uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  // The same pairs as 1024 + 16 q (the nibble in bits 4..7 of each half: c1 and c5 are there already).
  __device__ static void dequant8(uint32_t w, uint32_t (&p)[4]) {
    constexpr uint32_t kMagic2 = kMagic * 0x10001u, kMask = 0x00f000f0u;
    p[0] = and_or(w << 4, kMask, kMagic2);
    p[1] = and_or(w, kMask, kMagic2);
    p[2] = and_or(shr_mul<4>(w), kMask, kMagic2);
    p[3] = and_or(shr_mul<8>(w), kMask, kMagic2);
  }
};

// Pairs of x in the same order: 8 consecutive values (4 words of 2) -> (x0, x4), (x1, x5), (x2, x6), (x3, x7).
__device__ __forceinline__ void pair_up(const uint4& x, uint32_t (&p)[4]) {
  p[0] = __byte_perm(x.x, x.z, 0x5410);
  p[1] = __byte_perm(x.x, x.z, 0x7632);
  p[2] = __byte_perm(x.y, x.w, 0x5410);
  p[3] = __byte_perm(x.y, x.w, 0x7632);
}

// A small integer as f32 without the (slow) conversion pipe: 2^23 + v has v in its mantissa.
__device__ __forceinline__ float small_to_float(uint32_t v) { return __uint_as_float(0x4B000000u + v) - 8388608.0f; }

// What one lane loads for one 128-column block: columns 128 blk + 32 t .. + 32 (16 bytes) of rows 16 r + g (w[r][0])
// and 16 r + g + 8 (w[r][1]) of its tile, and their group's scales and zeros.
template <int kRowTiles>
struct Block {
  uint4 w[kRowTiles][2];
  float s[kRowTiles][2];
  uint32_t z[kRowTiles][2];
};

// The lane's fixed offsets (unsigned 32-bit: w4a16_gemv_applies; one multiply-add each into a 64-bit address, the
// base pointers staying in the kernel's parameters).
template <int kRowTiles>
struct LaneView {
  uint32_t q[kRowTiles][2];   // the rows' 16-byte pieces of 4-bit weight before the lane's piece of block 0
  uint32_t sz[kRowTiles][2];  // the rows' first scale and zero
  int blk0, step, nb;         // the warp's blocks: blk0 + step j, j < nb
  int group_shift;            // a block's group: blk >> group_shift
  int col0;                   // the lane's column offset within a block (32 t)
  int k;
};

// kTail: k % 128 != 0, so a lane's piece of the last block may lie past k (k % 32 == 0: a piece is whole or absent);
// such a piece leaves the weight registers as they were: the matching x piece is zero, and any bias + q times zero is
// zero.
template <bool kTail, int kRowTiles>
__device__ __forceinline__ void load_block(Block<kRowTiles>& b, const W4GemvParams& p, const LaneView<kRowTiles>& v,
                                           int j) {
  const uint32_t blk = v.blk0 + v.step * j;
  const bool live = !kTail || blk * 128 + v.col0 < static_cast<uint32_t>(v.k);
  const uint32_t group = blk >> v.group_shift;
#pragma unroll
  for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (live) b.w[r][h] = load_stream(reinterpret_cast<const uint4*>(p.qweight) + (v.q[r][h] + blk * 4u));
      const uint32_t idx = v.sz[r][h] + group;
      b.s[r][h] = __ldg(p.scales + idx);
      b.z[r][h] = __ldg(p.zeros + idx);
    }
  }
}

// acc += the block's products, each row's (bias + q) products corrected by (bias + z) sum x and scaled. Word e of a
// lane's piece feeds two k16 steps whose weight and x pairs come out of the same columns, so the tensor core's column
// order within a step is immaterial. `xp[i]`: the lane's token of token tile i at the lane's piece of block 0 (a token
// past m reads token m - 1: its products land in out's columns past m, never stored).
template <typename T, bool kTail, int kRowTiles, int kTiles>
__device__ __forceinline__ void multiply_block(float (&acc)[kRowTiles * kTiles][4], const Block<kRowTiles>& b,
                                               const T* const (&xp)[kTiles], const LaneView<kRowTiles>& v, int j) {
  constexpr uint32_t kOnes = Half16<T>::kOne * 0x10001u;
  const uint32_t blk = v.blk0 + v.step * j;
  const bool live = !kTail || blk * 128 + v.col0 < static_cast<uint32_t>(v.k);
  const uint4* xb[kTiles];
#pragma unroll
  for (int i = 0; i < kTiles; ++i) xb[i] = reinterpret_cast<const uint4*>(xp[i] + blk * 128u);
  float c[kRowTiles][kTiles][4] = {}, sum_x[kTiles][4] = {};
#pragma unroll
  for (int e = 0; e < 4; ++e) {  // columns 128 blk + 32 t + 8 e .. + 8
    uint32_t a[kRowTiles][2][4];
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r) {
      Half16<T>::dequant8((&b.w[r][0].x)[e], a[r][0]);
      Half16<T>::dequant8((&b.w[r][1].x)[e], a[r][1]);
    }
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      const uint4 xv = live ? __ldg(xb[i] + e) : make_uint4(0, 0, 0, 0);
      uint32_t xq[4];
      pair_up(xv, xq);
      Half16<T>::mma(sum_x[i], kOnes, kOnes, kOnes, kOnes, xq[0], xq[2]);
      Half16<T>::mma(sum_x[i], kOnes, kOnes, kOnes, kOnes, xq[1], xq[3]);
#pragma unroll
      for (int r = 0; r < kRowTiles; ++r) {
        Half16<T>::mma(c[r][i], a[r][0][0], a[r][1][0], a[r][0][2], a[r][1][2], xq[0], xq[2]);
        Half16<T>::mma(c[r][i], a[r][0][1], a[r][1][1], a[r][0][3], a[r][1][3], xq[1], xq[3]);
      }
    }
  }
  // sum_x[i][0] (= [2]) is token 2t's sum over the block, sum_x[i][1] (= [3]) token 2t + 1's: the ones rows agree.
  // A row's product: s / kStep (c - (kBias + kStep z) sum_x).
  constexpr float kInvStep = 1.0f / Half16<T>::kStep;
#pragma unroll
  for (int r = 0; r < kRowTiles; ++r) {
    const float zb_lo = small_to_float(Half16<T>::kBias + Half16<T>::kStep * b.z[r][0]);
    const float zb_hi = small_to_float(Half16<T>::kBias + Half16<T>::kStep * b.z[r][1]);
    const float s_lo = b.s[r][0] * kInvStep, s_hi = b.s[r][1] * kInvStep;
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      float(&d)[4] = acc[r * kTiles + i];
      d[0] = fmaf(s_lo, fmaf(-zb_lo, sum_x[i][0], c[r][i][0]), d[0]);
      d[1] = fmaf(s_lo, fmaf(-zb_lo, sum_x[i][1], c[r][i][1]), d[1]);
      d[2] = fmaf(s_hi, fmaf(-zb_hi, sum_x[i][0], c[r][i][2]), d[2]);
      d[3] = fmaf(s_hi, fmaf(-zb_hi, sum_x[i][1], c[r][i][3]), d[3]);
    }
  }
}

// kRowTiles 16-row tiles per warp (2 for one token tile: x's loads and pairing serve twice the weight; 1 above, for
// registers) and kTiles 8-token tiles.
// Three blocks in flight are held to 80 registers (56 bytes of spills) so that three 8-warp blocks share an SM: at the
// 104-106 registers ptxas (CUDA 13.0) gives them unbounded, and the two-block kernel's 90-94, only two did, and
// Mistral-7B's qkv (384 blocks) ran in two waves (bench/RESULTS.md, 2026-12-02: qkv 11.3 -> 8.75 us at m = 1, M gptq
// / awq b1 decode +0.7% / +0.9%).
template <typename T, typename B, bool kTail, int kRowTiles, int kTiles, int kStages>
__global__ void __launch_bounds__(kGemvWarpsPerBlock * 32, kStages == 3 ? 3 : 1)
    w4a16_gemv_kernel(T* out, int64_t ldo, const T* x, int64_t ldx, int m, W4GemvParams p, const B* bias, int splits,
                      int group_shift) {
  constexpr int kRows = 16 * kRowTiles;
  __shared__ float partial[kGemvWarpsPerBlock * kRowTiles * kTiles * 4 * 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int part = warp % splits;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * (kGemvWarpsPerBlock / splits) + warp / splits) * kRows;
  const int blocks = static_cast<int>((p.k + 127) / 128);
  // Rows past n (the last tile) read row n - 1 and are never stored; a tile wholly past n reads nothing. No early
  // return: the whole block meets at the reduction's barrier.
  LaneView<kRowTiles> v;
#pragma unroll
  for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = min(row0 + 16 * r + 8 * h + g, p.n - 1);
      v.q[r][h] = static_cast<uint32_t>(row * (p.k / 32) + t);
      v.sz[r][h] = static_cast<uint32_t>(row * p.groups);
    }
  }
  v.blk0 = part;
  v.step = splits;
  v.nb = row0 < p.n && part < blocks ? (blocks - part + splits - 1) / splits : 0;
  v.group_shift = group_shift;
  v.col0 = 32 * t;
  v.k = static_cast<int>(p.k);
  float acc[kRowTiles * kTiles][4] = {};
  Block<kRowTiles> buf[kStages] = {};
  // The first kStages - 1 blocks go out before pdl_wait: the weight, its scales and zeros are constant.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < v.nb) load_block<kTail>(buf[s], p, v, s);
  }
  pdl_wait();
  const T* xp[kTiles];
#pragma unroll
  for (int i = 0; i < kTiles; ++i) xp[i] = x + min(8 * i + g, m - 1) * ldx + 32 * t;
  // A ring of kStages blocks: load block j + kStages - 1 into the slot block j - 1 left, multiply block j.
  for (int j = 0; j < v.nb; j += kStages) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      if (j + s >= v.nb) break;
      if (j + s + kStages - 1 < v.nb) load_block<kTail>(buf[(s + kStages - 1) % kStages], p, v, j + s + kStages - 1);
      multiply_block<T, kTail, kRowTiles, kTiles>(acc, buf[s], xp, v, j + s);
    }
  }
  pdl_trigger();
  if (!reduce_tile_over_splits<kRowTiles * kTiles>(acc, partial, splits)) return;
#pragma unroll
  for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t row = row0 + 16 * r + g + (e >= 2 ? 8 : 0);
        const int tok = 8 * i + 2 * t + (e & 1);
        if (row >= p.n || tok >= m) continue;
        float val = acc[r * kTiles + i][e];
        if (bias != nullptr) val += load_f(bias + row);
        store_f(out + tok * ldo + row, val);
      }
    }
  }
}

// log2 of the 128-column blocks per group (a power of two: w4a16_gemv_applies), or 31 for one group (every block's
// index shifts to 0).
int group_shift_of(const W4GemvParams& p) {
  if (p.groups == 1) return 31;
  int shift = 0;
  while ((int64_t{128} << shift) < p.g) ++shift;
  return shift;
}

// The GEMV's split and thread blocks for warps of `rows_per_warp` weight rows.
struct Grid {
  int splits;
  unsigned blocks;
};
Grid grid_for(const W4GemvParams& p, int64_t rows_per_warp) {
  const int64_t units = (p.n + rows_per_warp - 1) / rows_per_warp, blocks = (p.k + 127) / 128;
  const int splits = choose_gemv_splits(units, blocks / 2);
  return {splits, ceil_div(units, kGemvWarpsPerBlock / splits)};
}

template <typename T, typename B, bool kTail, int kRowTiles, int kTiles, int kStages = 2>
void launch_tiles(Tensor& out, const Tensor& x, const W4GemvParams& p, const B* bias) {
  const auto [splits, grid] = grid_for(p, 16 * kRowTiles);
  launch_pdl("w4a16_gemv_kernel", w4a16_gemv_kernel<T, B, kTail, kRowTiles, kTiles, kStages>, grid,
             kGemvWarpsPerBlock * 32, out.data<T>(), out.stride(0), x.data<T>(), x.stride(0),
             static_cast<int>(x.size(0)), p, bias, splits, group_shift_of(p));
}

template <typename T, typename B, bool kTail>
void launch_m(Tensor& out, const Tensor& x, const W4GemvParams& p, const B* bias) {
  const int64_t m = x.size(0);
  // 32-row warps halve the work per weight, but also the warps: each holds one block's loads in flight while it
  // multiplies the previous one, and ~120 registers let two 8-warp blocks share an SM. So they are taken only where
  // their grid still gives every SM two blocks (Mistral-7B: gate_up); narrower products (qkv, o_proj, down) keep
  // 16-row warps and twice the loads in flight.
  if (m <= 8 && grid_for(p, 32).blocks >= 2u * num_sms()) return launch_tiles<T, B, kTail, 2, 1>(out, x, p, bias);
  // A third block in flight per warp where the grid still runs in one wave at its residency (three 8-warp blocks per
  // SM: its launch bounds; Mistral-7B: qkv, o_proj and down); where it would take two the extra wave costs more
  // (+40%). Four or six blocks in flight were slower than three.
  if (m <= 8 &&
      grid_for(p, 16).blocks <= resident_blocks(reinterpret_cast<const void*>(w4a16_gemv_kernel<T, B, kTail, 1, 1, 3>),
                                                kGemvWarpsPerBlock * 32, 0)) {
    return launch_tiles<T, B, kTail, 1, 1, 3>(out, x, p, bias);
  }
  if (m <= 8) return launch_tiles<T, B, kTail, 1, 1>(out, x, p, bias);
  if (m <= 16) return launch_tiles<T, B, kTail, 1, 2>(out, x, p, bias);
  launch_tiles<T, B, kTail, 1, 4>(out, x, p, bias);
}

template <typename T, typename B>
void launch(Tensor& out, const Tensor& x, const W4GemvParams& p, const B* bias) {
  if (p.k % 128 != 0) return launch_m<T, B, true>(out, x, p, bias);
  launch_m<T, B, false>(out, x, p, bias);
}

template <typename T>
void run(Tensor& out, const Tensor& x, const W4GemvParams& p, const Tensor* bias) {
  if (bias == nullptr) return launch<T, float>(out, x, p, nullptr);
  if (bias->dtype() == DType::kF32) return launch<T, float>(out, x, p, bias->data<float>());
  launch<T, T>(out, x, p, bias->data<T>());
}

}  // namespace

bool w4a16_gemv_applies(int64_t m, DType x_dtype, const W4GemvParams& p) {
  const int64_t bpg = p.g / 128;  // 128-column blocks per group
  const bool groups_ok = p.groups == 1 || (p.g % 128 == 0 && (bpg & (bpg - 1)) == 0);
  // Offsets into the weight, its scales and zeros in 32 bits.
  const bool small = p.n * (p.k / 2) < (int64_t{1} << 32) && p.k < (int64_t{1} << 30);
  return m <= kW4GemvMaxRows && (x_dtype == DType::kBF16 || x_dtype == DType::kF16) && p.k % 32 == 0 && groups_ok &&
         small && aligned16(p.qweight);
}

void w4a16_gemv(Tensor& out, const Tensor& x, const W4GemvParams& p, const Tensor* bias) {
  if (x.dtype() == DType::kBF16) return run<__nv_bfloat16>(out, x, p, bias);
  run<__half>(out, x, p, bias);
}

}  // namespace llmserve::cuda

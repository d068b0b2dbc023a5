// The grouped GEMM of the mixture-of-experts ops on CUDA (ops::moe_gemm, ops::moe_gemm_silu; matching
// kernels/cpu/moe.cc): for 16-bit operands padded to kMoeGemmTileRows, the CUTLASS grouped GEMM on Hopper
// (cutlass_moe_gemm.cu); elsewhere (16-row padding, other GPUs, unaligned rows) WMMA tiles of 64 or 16 rows of
// one expert, a 3-stage cp.async pipeline feeding them; otherwise, for decode-sized batches,
// a kernel streaming each chosen expert's weight rows once against all of its rows (for the down projection it also
// applies silu_and_mul on its input read); a plain row-wise kernel for f32. Every size beyond the host-known capacity
// is read on the device (graph-safe); the streaming kernel is launched with programmatic dependent launch.
#include <mma.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/env.h"
#include "kernels/cuda/attention_common.cuh"  // cp.async helpers
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cutlass_moe_gemm.h"
#include "kernels/cuda/gemv_common.cuh"

namespace llmserve::cuda {
namespace {

// ---- grouped GEMM ----

// The expert owning row r (< expert_offsets[E]): the largest e with offsets[e] <= r (empty experts are skipped).
__device__ __forceinline__ int expert_of_row(const int32_t* offsets, int num_experts, int64_t r) {
  int lo = 0, hi = num_experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= r) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Row-wise: block (r, column group) computes kRowWarps columns of row r, one warp per column, streaming that
// expert's weight rows (16-byte loads when Vec) against the row's x (cached).
constexpr int kRowWarps = 8;
constexpr int kRowUnroll = 4;

template <typename T, bool Vec>
__global__ void __launch_bounds__(kRowWarps * 32)
    moe_gemm_rows_kernel(T* out, int64_t out_stride, const T* x, int64_t x_stride, const T* weight,
                         const int32_t* sorted_pairs, const int32_t* expert_offsets, int num_experts, int64_t n,
                         int64_t k, int gather_top_k) {
  const int64_t r = blockIdx.x;
  if (r >= expert_offsets[num_experts]) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t col = static_cast<int64_t>(blockIdx.y) * kRowWarps + warp;
  if (col >= n) return;
  const int pair = sorted_pairs[r];
  if (pair < 0) {
    if (lane == 0) store_f(out + r * out_stride + col, 0.f);
    return;
  }
  const int e = expert_of_row(expert_offsets, num_experts, r);
  const T* xr = x + (gather_top_k > 0 ? static_cast<int64_t>(pair / gather_top_k) : r) * x_stride;
  const T* w = weight + (static_cast<int64_t>(e) * n + col) * k;
  float acc = 0.f;
  if constexpr (Vec) {
    const int64_t k8 = k / 8;
    const uint4* w4 = reinterpret_cast<const uint4*>(w);
    int64_t i = lane;
    for (; i + 32 * (kRowUnroll - 1) < k8; i += 32 * kRowUnroll) {
      uint4 wv[kRowUnroll];
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) wv[u] = __ldg(w4 + i + 32 * u);
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) {
        float wf[8], xf[8];
        load8(reinterpret_cast<const T*>(&wv[u]), wf);
        load8(xr + (i + 32 * u) * 8, xf);
#pragma unroll
        for (int q = 0; q < 8; ++q) acc = fmaf(wf[q], xf[q], acc);
      }
    }
    for (; i < k8; i += 32) {
      float wf[8], xf[8];
      load8(w + i * 8, wf);
      load8(xr + i * 8, xf);
#pragma unroll
      for (int q = 0; q < 8; ++q) acc = fmaf(wf[q], xf[q], acc);
    }
  } else {
    for (int64_t i = lane; i < k; i += 32) acc = fmaf(load_f(w + i), load_f(xr + i), acc);
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) store_f(out + r * out_stride + col, acc);
}

// Weight streaming (small batches, moe_align's block 1): block (column chunk, slot) works for the slot-th expert
// that has rows. Its warps form kStreamWarps / splits groups of `splits` warps; a group owns kStreamCols adjacent
// weight rows (output columns) of that expert and streams them once, in interleaved 16-byte words with kStreamUnroll
// words per row in flight per lane, dotting each word with every input row of the expert -- so the weight is read
// once per call whatever the number of tokens routed to the expert. The expert's input rows (gathered token rows,
// or silu(g) * u of the gate/up output when kSilu) are staged in shared memory kRows at a time; an expert with more
// rows takes several passes (the weight rows come back from L2). f32 accumulation; one rounding per output.
constexpr int kStreamWarps = 8;
constexpr int kStreamCols = 4;
constexpr int kStreamUnroll = 2;
constexpr int kStreamMaxSplits = 8;
constexpr int kStreamMaxRows = 8;
constexpr int64_t kStreamStageBytes = 64 * 1024;  // staged input rows per block, at most
static_assert(kStreamMaxRows * kStreamCols <= 32, "one output per lane after the warp reduction");
// Short rows (k <= kStreamShortRow, one staged row: decode) compile for kStreamShortRowBlocks blocks per SM (at most
// 64 registers a thread; the general form takes 77 and fits 3): a task there is one or two rounds of loads behind
// the block's fixed latency (offsets, staging, reduction), so more of them at once win -- Qwen3-30B-A3B's down
// projection (k 768, 8 experts x 512 column groups) runs in one wave instead of three, 15.1 -> 12.0 us a layer at
// batch 1, where its gate/up projection (k 2048, four rounds) lost 1.9 us a layer on 64 registers (bench/RESULTS.md).
constexpr int64_t kStreamShortRow = 1024;
constexpr int kStreamShortRowBlocks = 4;

// The slot-th expert (ascending ids) owning at least one row: its id and rows [*begin, *end); false when fewer
// experts have rows. Warp-cooperative (every lane gets the answer): lane l counts the experts with rows in its
// slice of ceil(E / 32) ids, a warp scan finds the slice holding the slot.
__device__ __forceinline__ bool slot_expert(const int32_t* offsets, int num_experts, int slot, int* expert, int* begin,
                                            int* end) {
  const int lane = threadIdx.x % 32, per = (num_experts + 31) / 32;
  const int lo = min(lane * per, num_experts), hi = min(lo + per, num_experts);
  int count = 0;
  for (int e = lo; e < hi; ++e) count += offsets[e + 1] > offsets[e] ? 1 : 0;
  int inclusive = count;
  for (int o = 1; o < 32; o <<= 1) {
    const int up = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += up;
  }
  const unsigned holds = __ballot_sync(0xffffffffu, inclusive > slot);
  if (holds == 0) return false;
  const int owner = __ffs(holds) - 1;
  int found = 0;
  if (lane == owner) {
    int skip = slot - (inclusive - count);  // experts with rows to pass over in this slice
    for (int e = lo; e < hi; ++e) {
      if (offsets[e + 1] <= offsets[e]) continue;
      if (skip == 0) {
        found = e;
        break;
      }
      --skip;
    }
  }
  found = __shfl_sync(0xffffffffu, found, owner);
  *expert = found;
  *begin = offsets[found];
  *end = offsets[found + 1];
  return true;
}

// One halving step of warp_reduce_scatter and the steps after it: a lane keeps half of its 2H values (the upper half
// when lane bit H is set) plus the partner lane's copy of that half.
template <int H, int N>
__device__ __forceinline__ void reduce_scatter_step(float (&v)[N], int lane) {
  if constexpr (H >= 1) {
    const bool upper = (lane & H) != 0;
#pragma unroll
    for (int i = 0; i < H; ++i) {
      const float send = upper ? v[i] : v[i + H], keep = upper ? v[i + H] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, H);
    }
    reduce_scatter_step<H / 2>(v, lane);
  }
}

// Sums each of the N values (a power of two <= 32) of every lane over the warp; lane l returns sum N's value l % N.
// Each halving step trades half of a lane's values with the partner lane (N - 1 shuffles in all, not 5 N).
template <int N>
__device__ __forceinline__ float warp_reduce_scatter(float (&v)[N]) {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "a power of two up to the warp size");
  const int lane = threadIdx.x % 32;
  reduce_scatter_step<N / 2>(v, lane);
  float sum = v[0];
#pragma unroll
  for (int o = N; o < 32; o *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  return sum;
}

template <typename T, int kRows, bool kSilu, int kMinBlocks>
__global__ void __launch_bounds__(kStreamWarps * 32, kMinBlocks)
    moe_gemm_stream_kernel(T* out, int64_t out_stride, const T* x, int64_t x_stride, const T* weight,
                           const int32_t* sorted_pairs, const int32_t* expert_offsets, int num_experts, int64_t n,
                           int64_t k, int gather_top_k, int splits) {
  extern __shared__ uint4 stage[];  // [kRows][k / 8] 16-byte words: this pass's input rows
  __shared__ float partial[kStreamWarps][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int groups = kStreamWarps / splits, part = warp % splits;
  const int64_t col0 = (static_cast<int64_t>(blockIdx.x) * groups + warp / splits) * kStreamCols;
  pdl_wait();  // the offsets, the pairs and x come from the kernels before
  int e = 0, begin = 0, end = 0;
  // Every warp finds the same answer, so a block leaves whole (no barrier is left waiting).
  if (!slot_expert(expert_offsets, num_experts, static_cast<int>(blockIdx.y), &e, &begin, &end)) return;
  const int64_t k8 = k / 8, step = int64_t{32} * splits, first = part * 32 + lane;
  const uint4* w = reinterpret_cast<const uint4*>(weight + (static_cast<int64_t>(e) * n + col0) * k);
  bool col_ok[kStreamCols];
#pragma unroll
  for (int c = 0; c < kStreamCols; ++c) col_ok[c] = col0 + c < n;
  uint4 wv[kStreamUnroll][kStreamCols];
  auto load_round = [&](int64_t i) {
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      const int64_t word = i + step * u;
#pragma unroll
      for (int c = 0; c < kStreamCols; ++c) {
        wv[u][c] = col_ok[c] && word < k8 ? load_stream(w + c * k8 + word) : make_uint4(0, 0, 0, 0);
      }
    }
  };
  for (int row0 = begin; row0 < end; row0 += kRows) {
    const int rows = min(kRows, end - row0);
    if (row0 != begin) __syncthreads();          // the previous pass is done with stage and partial
    load_round(first);                           // in flight while the inputs are staged
    const int row_words = static_cast<int>(k8);  // <= kStreamStageBytes / 16
    for (int idx = threadIdx.x; idx < rows * row_words; idx += kStreamWarps * 32) {
      const int m = idx / row_words;
      const int64_t word = idx - m * row_words, r = row0 + m;
      const int pair = sorted_pairs[r];
      uint4 v = make_uint4(0, 0, 0, 0);  // padding rows (pair < 0) give zeros
      if (pair >= 0) {
        if constexpr (kSilu) {
          float g[8], up[8];
          load8(x + r * x_stride + word * 8, g);
          load8(x + r * x_stride + k + word * 8, up);
#pragma unroll
          for (int q = 0; q < 8; ++q) g[q] = silu_mul(g[q], up[q]);
          store8(reinterpret_cast<T*>(&v), g);
        } else {
          const int64_t src = gather_top_k > 0 ? pair / gather_top_k : r;
          v = reinterpret_cast<const uint4*>(x + src * x_stride)[word];
        }
      }
      stage[m * k8 + word] = v;
    }
    __syncthreads();
    float acc[kRows * kStreamCols];  // (row m, column c) at m * kStreamCols + c
#pragma unroll
    for (int i = 0; i < kRows * kStreamCols; ++i) acc[i] = 0.f;
    for (int64_t i = first; i < k8; i += step * kStreamUnroll) {
      if (i != first) load_round(i);
#pragma unroll
      for (int u = 0; u < kStreamUnroll; ++u) {
        const int64_t word = i + step * u;
        if (word >= k8) break;
        float wf[kStreamCols][8];
#pragma unroll
        for (int c = 0; c < kStreamCols; ++c) load8(reinterpret_cast<const T*>(&wv[u][c]), wf[c]);
#pragma unroll
        for (int m = 0; m < kRows; ++m) {
          if (m >= rows) break;
          float xf[8];
          load8(reinterpret_cast<const T*>(&stage[m * k8 + word]), xf);
#pragma unroll
          for (int c = 0; c < kStreamCols; ++c)
#pragma unroll
            for (int q = 0; q < 8; ++q) acc[m * kStreamCols + c] = fmaf(wf[c][q], xf[q], acc[m * kStreamCols + c]);
        }
      }
    }
    if (row0 == begin) pdl_trigger();
    // Lane m * kStreamCols + c ends with output (row m, column c) summed over the warp, then over its group.
    float mine = warp_reduce_scatter(acc);
    if (splits > 1) {
      partial[warp][lane] = mine;
      __syncthreads();
      if (part == 0) {
        for (int p = 1; p < splits; ++p) mine += partial[warp + p][lane];
      }
    }
    const int m = lane / kStreamCols, c = lane % kStreamCols;
    if (part == 0 && m < rows && col0 + c < n) store_f(out + (row0 + m) * out_stride + col0 + c, mine);
  }
}

// Input rows staged per pass: all of an expert's rows when experts average one (decode: top-k distinct experts per
// token), else room for twice the average, at most kStreamMaxRows, and no more than kStreamStageBytes hold.
int stream_rows(int64_t capacity, int64_t slots, int64_t k, size_t elem_bytes) {
  const int64_t average = (capacity + slots - 1) / slots, want = average <= 1 ? 1 : 2 * average;
  int rows = 1;
  while (rows < kStreamMaxRows && rows < want) rows *= 2;
  while (rows > 1 && static_cast<int64_t>(rows * k * elem_bytes) > kStreamStageBytes) rows /= 2;
  return rows;
}

// Whether the streaming kernel can run: 16-byte words throughout and one input row fits the stage.
template <typename T>
bool stream_applies(const Tensor& x, const Tensor& weight) {
  const int64_t k = weight.size(2);
  return !std::is_same_v<T, float> && k % 8 == 0 && x.stride(0) % 8 == 0 && aligned16(x.raw_data()) &&
         aligned16(weight.raw_data()) && static_cast<int64_t>(k * sizeof(T)) <= kStreamStageBytes;
}

// Warps of `kernel` (kStreamWarps per block, `smem` bytes of dynamic shared memory) resident on the whole GPU at
// once.
int64_t stream_resident_warps(const void* kernel, size_t smem) {
  return resident_blocks(kernel, kStreamWarps * 32, smem) * kStreamWarps;
}

// Warps per column group (a power of two <= kStreamMaxSplits, each lane keeping at least one word per row): the one
// finishing `tasks` column groups soonest when `resident` warps run at once, counting time in waves of resident warps
// -- 4096 tasks on 3168 resident warps take two waves whole, three waves of half tasks when split in two. Ties go
// to fewer splits (less reduction, fewer block prologues).
int stream_splits(int64_t tasks, int64_t row_words, int64_t resident) {
  int best = 1;
  double best_time = static_cast<double>((tasks + resident - 1) / resident);
  for (int splits = 2; splits <= kStreamMaxSplits && row_words >= int64_t{32} * splits; splits *= 2) {
    const double time = static_cast<double>((tasks * splits + resident - 1) / resident) / splits;
    if (time < best_time * 0.95) {
      best = splits;
      best_time = time;
    }
  }
  return best;
}

template <typename T, int kRows, bool kSilu, int kMinBlocks = 1>
void launch_stream_rows(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& sorted_pairs,
                        const Tensor& expert_offsets, int64_t gather_top_k) {
  const int64_t capacity = out.size(0), n = weight.size(1), k = weight.size(2);
  const size_t smem = static_cast<size_t>(kRows) * k * sizeof(T);
  auto kernel = moe_gemm_stream_kernel<T, kRows, kSilu, kMinBlocks>;
  if (smem > 48 * 1024) {
    const bool ok = once_per_device([&] {
      return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(kStreamStageBytes)) == cudaSuccess;
    });
    CHECK(ok) << "moe_gemm_stream_kernel: cannot get " << kStreamStageBytes << " bytes of shared memory";
  }
  const int64_t slots = std::min(capacity, weight.size(0));  // experts that can own rows
  const int64_t col_groups = (n + kStreamCols - 1) / kStreamCols;
  const int splits =
      stream_splits(slots * col_groups, k / 8, stream_resident_warps(reinterpret_cast<const void*>(kernel), smem));
  const dim3 grid(ceil_div(col_groups, kStreamWarps / splits), static_cast<unsigned>(slots));
  launch_pdl_smem("moe_gemm_stream_kernel", kernel, grid, kStreamWarps * 32, smem, out.data<T>(), out.stride(0),
                  x.data<T>(), x.stride(0), weight.data<T>(), sorted_pairs.data<int32_t>(),
                  expert_offsets.data<int32_t>(), static_cast<int>(weight.size(0)), n, k,
                  static_cast<int>(gather_top_k), splits);
}

// x: the token rows (gather_top_k > 0), the grouped rows, or the gate/up output when kSilu.
template <typename T, bool kSilu>
void launch_stream(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& sorted_pairs,
                   const Tensor& expert_offsets, int64_t gather_top_k) {
  const int64_t capacity = out.size(0), slots = std::min(capacity, weight.size(0));
  switch (stream_rows(capacity, slots, weight.size(2), sizeof(T))) {
    case 1:
      if (weight.size(2) <= kStreamShortRow) {
        return launch_stream_rows<T, 1, kSilu, kStreamShortRowBlocks>(out, x, weight, sorted_pairs, expert_offsets,
                                                                      gather_top_k);
      }
      return launch_stream_rows<T, 1, kSilu>(out, x, weight, sorted_pairs, expert_offsets, gather_top_k);
    case 2:
      return launch_stream_rows<T, 2, kSilu>(out, x, weight, sorted_pairs, expert_offsets, gather_top_k);
    case 4:
      return launch_stream_rows<T, 4, kSilu>(out, x, weight, sorted_pairs, expert_offsets, gather_top_k);
    default:
      return launch_stream_rows<T, 8, kSilu>(out, x, weight, sorted_pairs, expert_offsets, gather_top_k);
  }
}

// Tensor-core tiles: block (column tile, row tile) computes kM x kTileN outputs of one expert (moe_align padded every
// expert's rows to a multiple of kM) with WMMA 16x16x16 fragments, f32 accumulation, 4 warps. kM = 64 (prefill: 2 x 2
// warps of 32 x 32) or 16 (mid-size batches, where an expert holds a few rows: less padding computed; 1 x 4 warps of
// 16 x 16). Each weight tile is read once per row tile of its expert. The A (gathered x rows) and B (weight) tiles
// go through a kTileStages-deep cp.async ring, so the loads of the next tiles overlap the current tile's MMAs.
constexpr int kTileN = 64, kTileK = 32;
constexpr int kTileThreads = 128;
constexpr int kTileStages = 3;
constexpr int kSmemPad = 8;  // 16 bytes per row: keeps WMMA's ldm a multiple of 8 elements and spreads banks

template <typename T, int kM>
__global__ void __launch_bounds__(kTileThreads)
    moe_gemm_tiles_kernel(T* out, int64_t out_stride, const T* x, int64_t x_stride, const T* weight,
                          const int32_t* sorted_pairs, const int32_t* expert_offsets, int num_experts, int64_t n,
                          int64_t k, int gather_top_k) {
  using namespace nvcuda;
  constexpr int kWarpsM = kM == 64 ? 2 : 1, kWarpsN = 4 / kWarpsM;
  constexpr int kFragM = kM / (16 * kWarpsM), kFragN = kTileN / (16 * kWarpsN);
  static_assert(kFragM >= 1 && kFragN >= 1 && kM % (16 * kWarpsM) == 0, "tile shape");
  __shared__ __align__(32) T a_tile[kTileStages][kM][kTileK + kSmemPad];
  __shared__ __align__(32) T b_tile[kTileStages][kTileN][kTileK + kSmemPad];
  __shared__ __align__(32) float c_tile[kM][kTileN + 4];
  __shared__ int64_t x_rows[kM];  // source row of each tile row in x, -1 for padding
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kM;
  if (row0 >= expert_offsets[num_experts]) return;  // uniform over the block
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTileN;
  const int e = expert_of_row(expert_offsets, num_experts, row0);
  const T* w = weight + static_cast<int64_t>(e) * n * k;
  const int tid = threadIdx.x, warp = tid / 32;
  if (tid < kM) {
    const int pair = sorted_pairs[row0 + tid];
    x_rows[tid] = pair < 0 ? -1 : (gather_top_k > 0 ? pair / gather_top_k : row0 + tid);
  }
  __syncthreads();
  constexpr int kChunks = kTileK / 8;  // 16-byte chunks per tile row
  // Copies the k-tile starting at k0 into ring slot `stage` (zeros past k, past n and for padding rows) as one
  // cp.async group per thread.
  auto load_tiles = [&](int stage, int64_t k0) {
    for (int c = tid; c < kM * kChunks; c += kTileThreads) {
      const int row = c / kChunks, kc = (c % kChunks) * 8;
      const bool valid = x_rows[row] >= 0 && k0 + kc < k;
      cp_async16(&a_tile[stage][row][kc], valid ? x + x_rows[row] * x_stride + k0 + kc : x, valid);
    }
    for (int c = tid; c < kTileN * kChunks; c += kTileThreads) {
      const int row = c / kChunks, kc = (c % kChunks) * 8;
      const bool valid = col0 + row < n && k0 + kc < k;
      cp_async16(&b_tile[stage][row][kc], valid ? w + (col0 + row) * k + k0 + kc : w, valid);
    }
    cp_async_commit();
  };
  const int64_t k_tiles = (k + kTileK - 1) / kTileK;
  // Every iteration commits one group (empty past the last tile), so "all but kTileStages - 2 groups done" always
  // means "tile `it` has landed".
#pragma unroll
  for (int s = 0; s < kTileStages - 1; ++s) {
    if (s < k_tiles) {
      load_tiles(s, static_cast<int64_t>(s) * kTileK);
    } else {
      cp_async_commit();
    }
  }
  const int warp_m = warp / kWarpsN, warp_n = warp % kWarpsN;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kFragM][kFragN];
#pragma unroll
  for (int i = 0; i < kFragM; ++i)
#pragma unroll
    for (int j = 0; j < kFragN; ++j) wmma::fill_fragment(acc[i][j], 0.f);
  for (int64_t it = 0; it < k_tiles; ++it) {
    cp_async_wait<kTileStages - 2>();
    __syncthreads();  // tile `it` is visible to every warp, and every warp is done with the slot refilled below
    const int64_t next = it + kTileStages - 1;
    if (next < k_tiles) {
      load_tiles(static_cast<int>(next % kTileStages), next * kTileK);
    } else {
      cp_async_commit();
    }
    const int stage = static_cast<int>(it % kTileStages);
#pragma unroll
    for (int kk = 0; kk < kTileK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a[kFragM];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b[kFragN];
#pragma unroll
      for (int i = 0; i < kFragM; ++i) {
        wmma::load_matrix_sync(a[i], &a_tile[stage][(warp_m * kFragM + i) * 16][kk], kTileK + kSmemPad);
      }
#pragma unroll
      for (int j = 0; j < kFragN; ++j) {
        wmma::load_matrix_sync(b[j], &b_tile[stage][(warp_n * kFragN + j) * 16][kk], kTileK + kSmemPad);
      }
#pragma unroll
      for (int i = 0; i < kFragM; ++i)
#pragma unroll
        for (int j = 0; j < kFragN; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
  }
  cp_async_wait<0>();  // only empty groups remain; nothing may be in flight when the block exits
#pragma unroll
  for (int i = 0; i < kFragM; ++i)
#pragma unroll
    for (int j = 0; j < kFragN; ++j) {
      wmma::store_matrix_sync(&c_tile[(warp_m * kFragM + i) * 16][(warp_n * kFragN + j) * 16], acc[i][j], kTileN + 4,
                              wmma::mem_row_major);
    }
  __syncthreads();
  for (int idx = tid; idx < kM * kTileN; idx += kTileThreads) {
    const int row = idx / kTileN, c = idx % kTileN;
    if (col0 + c < n) store_f(out + (row0 + row) * out_stride + col0 + c, c_tile[row][c]);
  }
}

template <typename T, int kM>
void launch_tiles(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& sorted_pairs,
                  const Tensor& expert_offsets, int64_t gather_top_k) {
  const int64_t capacity = out.size(0), n = weight.size(1), k = weight.size(2);
  const dim3 grid(ceil_div(n, kTileN), ceil_div(capacity, kM));
  CHECK_LE(grid.y, 65535u) << "moe_gemm: " << capacity << " rows";
  moe_gemm_tiles_kernel<T, kM><<<grid, kTileThreads, 0, stream()>>>(
      out.data<T>(), out.stride(0), x.data<T>(), x.stride(0), weight.data<T>(), sorted_pairs.data<int32_t>(),
      expert_offsets.data<int32_t>(), static_cast<int>(weight.size(0)), n, k, static_cast<int>(gather_top_k));
  check_launch("moe_gemm_tiles_kernel");
}

// The blocks that take CUTLASS (set_moe_gemm_cutlass_block). LLMSERVE_MOE_CUTLASS=0 starts the process with none,
// so a whole-model benchmark can compare against the WMMA tiles with the same binary.
int64_t initial_cutlass_block() {
  return switch_from_env_or_die("LLMSERVE_MOE_CUTLASS", true) ? ops::kMoeGemmSmallTileRows : 0;
}
std::atomic<int64_t> cutlass_block_multiple{initial_cutlass_block()};

template <typename T>
void launch_moe_gemm(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& sorted_pairs,
                     const Tensor& expert_offsets, int64_t gather_top_k, int64_t block) {
  const int64_t capacity = out.size(0), num_experts = weight.size(0), n = weight.size(1), k = weight.size(2);
  const bool vec = k % 8 == 0 && x.stride(0) % 8 == 0 && aligned16(x.raw_data()) && aligned16(weight.raw_data());
  T* o = out.data<T>();
  const T* xp = x.data<T>();
  const T* w = weight.data<T>();
  const int32_t* sorted = sorted_pairs.data<int32_t>();
  const int32_t* offsets = expert_offsets.data<int32_t>();
  const int experts = static_cast<int>(num_experts), gather = static_cast<int>(gather_top_k);
  if constexpr (!std::is_same_v<T, float>) {
    const int64_t cutlass_block = cutlass_block_multiple.load(std::memory_order_relaxed);
    if (cutlass_block > 0 && block % cutlass_block == 0 && moe_gemm_cutlass_applies(out, x, weight)) {
      return moe_gemm_cutlass(out, x, weight, sorted_pairs, expert_offsets, gather_top_k);
    }
    if (vec && block % 64 == 0) return launch_tiles<T, 64>(out, x, weight, sorted_pairs, expert_offsets, gather_top_k);
    if (vec && block % 16 == 0) return launch_tiles<T, 16>(out, x, weight, sorted_pairs, expert_offsets, gather_top_k);
    if (stream_applies<T>(x, weight)) {
      return launch_stream<T, false>(out, x, weight, sorted_pairs, expert_offsets, gather_top_k);
    }
  }
  const dim3 grid(static_cast<unsigned>(capacity), ceil_div(n, kRowWarps));
  CHECK_LE(grid.y, 65535u) << "moe_gemm: n " << n;
  if constexpr (!std::is_same_v<T, float>) {
    if (vec) {
      moe_gemm_rows_kernel<T, true><<<grid, kRowWarps * 32, 0, stream()>>>(o, out.stride(0), xp, x.stride(0), w, sorted,
                                                                           offsets, experts, n, k, gather);
      check_launch("moe_gemm_rows_kernel");
      return;
    }
  }
  moe_gemm_rows_kernel<T, false><<<grid, kRowWarps * 32, 0, stream()>>>(o, out.stride(0), xp, x.stride(0), w, sorted,
                                                                        offsets, experts, n, k, gather);
  check_launch("moe_gemm_rows_kernel");
}

void moe_gemm(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& sorted_pairs,
              const Tensor& expert_offsets, int64_t gather_top_k, int64_t block) {
  if (out.size(0) == 0 || out.size(1) == 0) return;
  dispatch_float(x.dtype(), "moe_gemm", [&](auto tag) {
    launch_moe_gemm<decltype(tag)>(out, x, weight, sorted_pairs, expert_offsets, gather_top_k, block);
  });
}

// The fused activation runs where the streaming kernel would (block not a tile multiple); elsewhere the activation
// goes through `act` as two kernels.
void moe_gemm_silu(Tensor& out, Tensor& act, const Tensor& gate_up, const Tensor& weight, const Tensor& sorted_pairs,
                   const Tensor& expert_offsets, int64_t block) {
  if (out.size(0) == 0 || out.size(1) == 0) return;
  dispatch_float(gate_up.dtype(), "moe_gemm_silu", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      if (block % ops::kMoeGemmSmallTileRows != 0 && stream_applies<T>(gate_up, weight)) {
        return launch_stream<T, true>(out, gate_up, weight, sorted_pairs, expert_offsets, 0);
      }
    }
    ops::silu_and_mul(act, gate_up);
    launch_moe_gemm<T>(out, act, weight, sorted_pairs, expert_offsets, 0, block);
  });
}

}  // namespace

void set_moe_gemm_cutlass_block(int64_t block) {
  CHECK(block >= 0) << "set_moe_gemm_cutlass_block: " << block;
  cutlass_block_multiple.store(block, std::memory_order_relaxed);
}

void register_moe_gemm_kernels() {
  ops::moe_gemm.register_kernel(DeviceType::kCUDA, moe_gemm);
  ops::moe_gemm_silu.register_kernel(DeviceType::kCUDA, moe_gemm_silu);
}

}  // namespace llmserve::cuda

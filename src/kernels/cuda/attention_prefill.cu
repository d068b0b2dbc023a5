// Varlen paged prefill attention in the FlashAttention-2 style, bf16 / f16: a CTA of 4 warps owns 64 query rows
// of one request and one head, streams 64-key tiles of K/V from the paged cache (via the block table, so
// chunked prefill and prefix-cache hits read their earlier context) into shared memory with cp.async, double
// buffered so the next tile loads while this one is computed, and runs QK^T and PV on
// tensor cores (mma.sync m16n8k16, f32 accumulation) with an online softmax in registers (exp2 domain).
// Invariant: each CTA writes exactly its rows < query_len; masked scores are -inf and never turn into NaN.
#include <algorithm>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_common.cuh"

namespace llmserve::cuda {
namespace {

constexpr int kBlockM = 64, kBlockN = 64, kThreads = 128;

template <int HD>
__host__ __device__ constexpr int smem_stride() {
  return HD + 8;  // +16 bytes per row: the 8 rows of an ldmatrix land in distinct banks
}
// Double-buffered K and V tiles; Q passes through buffer 1's K tile into registers before that tile is first
// filled (69.6 KB at head_dim 128: 3 CTAs per SM instead of 2 with a Q tile of its own).
template <typename T, int HD>
__host__ __device__ constexpr int smem_bytes() {
  return 4 * kBlockN * smem_stride<HD>() * static_cast<int>(sizeof(T));
}

// 3 CTAs per SM (12 warps) cap the registers at 168; the few spills that costs measured faster than 2 CTAs
// (MT = 2 row tiles per warp, FlashAttention-2's 128-row CTA, measured slower too: 255 registers, 2 CTAs per SM).
template <typename T, int HD>
__global__ void __launch_bounds__(kThreads, 3) prefill_kernel(const PagedAttentionParams p) {
  constexpr int kStride = smem_stride<HD>();
  constexpr int kChunks = HD / 8;  // 16-byte chunks per row
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* const base = reinterpret_cast<T*>(smem_raw);
  // K of buffer b, then V of buffer b (arithmetic, not a pointer array: a run-time index into an array would put
  // it in local memory).
  auto sk_buf = [&](int b) { return base + b * kBlockN * kStride; };
  auto sv_buf = [&](int b) { return base + (2 + b) * kBlockN * kStride; };
  T* const sq = sk_buf(1);

  // The last query tiles see the most keys: they start first (launch order follows blockIdx.x).
  const int r = p.num_decode_reqs + blockIdx.z, head = blockIdx.y;
  const int row0 = (gridDim.x - 1 - blockIdx.x) * kBlockM;
  const int q_begin = p.query_start_loc[r];
  const int qlen = p.query_start_loc[r + 1] - q_begin;
  if (row0 >= qlen) return;
  const int rows = min(kBlockM, qlen - row0);
  const int seq = p.seq_lens[r];
  const int ctx0 = seq - qlen;  // position of query row 0
  const int kv_head = head / (p.num_heads / p.num_kv_heads);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  const T* query = static_cast<const T*>(p.query);
  for (int i = tid; i < kBlockM * kChunks; i += kThreads) {
    const int row = i / kChunks, ch = i % kChunks;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row < rows) v = load_chunk(query + (q_begin + row0 + row) * p.query_row_stride + head * HD + ch * 8);
    *reinterpret_cast<uint4*>(sq + row * kStride + ch * 8) = v;
  }
  __syncthreads();
  uint32_t qf[HD / 16][4];  // this warp's 16 rows of Q, as the A fragments of every k step
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk)
    ldmatrix_x4(qf[kk], sq + (warp * 16 + lane % 16) * kStride + kk * 16 + (lane / 16) * 8);
  __syncthreads();  // Q's shared tile is buffer 1's K: every warp has its fragments before it is refilled

  float o[HD / 8][4];
#pragma unroll
  for (int dt = 0; dt < HD / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
  // Rows lane/4 (index 0) and lane/4 + 8 (index 1) of this warp: running max (raw score units) and sum.
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  const float scale_log2 = p.scale * 1.4426950408889634f;
  const int pos0 = ctx0 + row0 + warp * 16 + lane / 4;  // position of row index 0
  const int pos_first = ctx0 + row0, pos_last = ctx0 + row0 + rows - 1;
  const int kv_end = pos_last + 1;
  const int kv_begin = p.sliding_window > 0 ? max(0, pos_first - p.sliding_window + 1) : 0;
  const T* kc = static_cast<const T*>(p.key_cache);
  const T* vc = static_cast<const T*>(p.value_cache);
  const int32_t* bt = p.block_table + r * p.block_table_stride;

  // Tile [n0, n0 + kBlockN) of K and V -> buffer b, asynchronously (zeros past kv_end). A thread copies one
  // 16-byte chunk column of rows kRowStep apart and walks the block table incrementally, without branches: one
  // division per tile (a division and 64-bit products per row cost more instructions than the copies).
  constexpr int kRowStep = kThreads / kChunks, kRowsPerThread = (kBlockN + kRowStep - 1) / kRowStep;
  static_assert(kThreads % kChunks == 0, "a thread's chunk column must not change between rows");
  const int row_elems = p.num_kv_heads * HD;         // one token's K (or V) row in the cache
  const int block_elems = row_elems * p.block_size;  // < 2^31: the block offset is the only 64-bit product
  const int chunk_off = kv_head * HD + (tid % kChunks) * 8;
  const int first_row = tid / kChunks;
  const int step_blocks = kRowStep / p.block_size, step_keys = kRowStep - step_blocks * p.block_size;
  const int last_blk = (kv_end - 1) / p.block_size;  // rows past kv_end read (nothing) at a real block
  auto issue_tile = [&](int n0, int b) {
    int key = n0 + first_row;
    int blk = key / p.block_size, in_blk = key - blk * p.block_size;
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j, key += kRowStep) {
      if (kBlockN % kRowStep != 0 && first_row + j * kRowStep >= kBlockN) break;  // small head_dims: idle threads
      const int64_t off = static_cast<int64_t>(bt[min(blk, last_blk)]) * block_elems + (in_blk * row_elems + chunk_off);
      const int so = (first_row + j * kRowStep) * kStride + (tid % kChunks) * 8;
      cp_async16(sk_buf(b) + so, kc + off, key < kv_end);
      cp_async16(sv_buf(b) + so, vc + off, key < kv_end);
      blk += step_blocks;
      in_blk += step_keys;
      if (in_blk >= p.block_size) in_blk -= p.block_size, ++blk;
    }
  };
  if (kv_begin < kv_end) issue_tile(kv_begin, 0);
  cp_async_commit();
  int buf = 0;
  for (int n0 = kv_begin; n0 < kv_end; n0 += kBlockN, buf ^= 1) {
    // The next tile streams into the other buffer (consumed last iteration) while this one is computed.
    if (n0 + kBlockN < kv_end) issue_tile(n0 + kBlockN, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();  // this tile's group has landed (for this thread) ...
    __syncthreads();     // ... and for every thread
    const T* sk = sk_buf(buf);
    const T* sv = sv_buf(buf);

    // S = Q K^T. K fragments are loaded ahead of their mma (two k16 steps per ldmatrix x4 where head_dim allows),
    // and consecutive mma accumulate into different tiles (mma on one accumulator wait out its latency).
    float s[kBlockN / 8][4];
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
    constexpr int kKPair = HD % 32 == 0 ? 2 : 1;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk += kKPair) {
      // Half a tile's K fragments at a time: 16 registers (the whole tile's 32 spilled at the 168 cap).
      constexpr int kNtGroup = kBlockN / 16;
#pragma unroll
      for (int g = 0; g < kBlockN / 8; g += kNtGroup) {
        uint32_t b[kNtGroup][kKPair][2];
#pragma unroll
        for (int i = 0; i < kNtGroup; ++i) {
          const T* row = sk + ((g + i) * 8 + lane % 8) * kStride + kk * 16;
          if constexpr (kKPair == 2) {
            uint32_t r4[4];
            ldmatrix_x4(r4, row + (lane / 8) * 8);
            b[i][0][0] = r4[0], b[i][0][1] = r4[1];
            b[i][kKPair - 1][0] = r4[2], b[i][kKPair - 1][1] = r4[3];
          } else {
            ldmatrix_x2(b[i][0], row + ((lane / 8) % 2) * 8);
          }
        }
#pragma unroll
        for (int j = 0; j < kKPair; ++j)
#pragma unroll
          for (int i = 0; i < kNtGroup; ++i) mma(s[g + i], qf[kk + j], b[i][j], T());
      }
    }

    // Only tiles that reach past some row's position (the diagonal), or behind a sliding window, need the mask.
    const bool masked = n0 + kBlockN - 1 > pos_first || (p.sliding_window > 0 && n0 < pos_last - p.sliding_window + 1);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (masked) {
          const int key = n0 + nt * 8 + (lane % 4) * 2 + (e & 1);
          const int pos = pos0 + (e < 2 ? 0 : 8);
          const bool ok = key <= pos && key < kv_end && (p.sliding_window <= 0 || key > pos - p.sliding_window);
          if (!ok) s[nt][e] = -INFINITY;
        }
        mx[e / 2] = fmaxf(mx[e / 2], s[nt][e]);
      }
    }
    // Maxima stay in raw score units: exp2(s * scale_log2 - max * scale_log2) is one FFMA and one MUFU.EX2.
    float sub[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float new_m = fmaxf(m_run[h], mx[h]);
      // A row with no valid key so far keeps max -inf: subtract 0 instead so exp2(-inf) = 0, never NaN.
      sub[h] = new_m == -INFINITY ? 0.f : new_m * scale_log2;
      const float alpha = fast_exp2(fmaf(m_run[h], scale_log2, -sub[h]));
      m_run[h] = new_m;
      l_run[h] *= alpha;
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt) {
        o[dt][2 * h] *= alpha;
        o[dt][2 * h + 1] *= alpha;
      }
    }
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = fast_exp2(fmaf(s[nt][e], scale_log2, -sub[e / 2]));
        l_run[e / 2] += s[nt][e];
      }
    }

    // O += P V. P (C layout of two n8 tiles) is exactly the A layout of one k16 step; V fragments come two
    // head_dim tiles per ldmatrix x4 (trans).
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint32_t a[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                             pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dt = 0; dt < HD / 8; dt += 2) {
        uint32_t r4[4];
        ldmatrix_x4_trans(r4, sv + (kk * 16 + lane % 16) * kStride + dt * 8 + (lane / 16) * 8);
        const uint32_t b0[2] = {r4[0], r4[1]}, b1[2] = {r4[2], r4[3]};
        mma(o[dt], a, b0, T());
        mma(o[dt + 1], a, b1, T());
      }
    }
    __syncthreads();  // every warp is done with this buffer before the next iteration refills it
  }
  cp_async_wait<0>();  // no copy may still target shared memory when the CTA exits

  T* out = static_cast<T*>(p.out);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = l_run[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int row = warp * 16 + lane / 4 + 8 * h;
    if (row >= rows) continue;
    T* dst = out + (q_begin + row0 + row) * p.out_row_stride + head * HD + (lane % 4) * 2;
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt)
      *reinterpret_cast<uint32_t*>(dst + dt * 8) = pack2<T>(o[dt][2 * h] * inv, o[dt][2 * h + 1] * inv);
  }
}

}  // namespace

template <typename T, int HD>
void launch_prefill(const PagedAttentionParams& p, cudaStream_t stream) {
  const int num_prefill = p.num_reqs - p.num_decode_reqs;
  if (num_prefill <= 0 || p.max_query_len <= 0) return;
  constexpr int kSmem = smem_bytes<T, HD>();
  const bool attr_set = once_per_device([] {
    return cudaFuncSetAttribute(prefill_kernel<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem) ==
           cudaSuccess;
  });
  CHECK(attr_set) << "prefill_kernel: cannot get " << kSmem << " bytes of shared memory";
  dim3 grid(static_cast<unsigned>((p.max_query_len + kBlockM - 1) / kBlockM), static_cast<unsigned>(p.num_heads),
            static_cast<unsigned>(num_prefill));
  prefill_kernel<T, HD><<<grid, kThreads, kSmem, stream>>>(p);
  check_launch("prefill_kernel");
}

#define LLMSERVE_PREFILL(T, HD) template void launch_prefill<T, HD>(const PagedAttentionParams&, cudaStream_t);
LLMSERVE_PREFILL(__nv_bfloat16, 16)
LLMSERVE_PREFILL(__nv_bfloat16, 32)
LLMSERVE_PREFILL(__nv_bfloat16, 64)
LLMSERVE_PREFILL(__nv_bfloat16, 128)
LLMSERVE_PREFILL(__half, 16)
LLMSERVE_PREFILL(__half, 32)
LLMSERVE_PREFILL(__half, 64)
LLMSERVE_PREFILL(__half, 128)
#undef LLMSERVE_PREFILL

}  // namespace llmserve::cuda

// Multi-head latent attention on tensor cores for DeepSeek's rows (L = 512 latent + R = 64 rope values), bf16 / f16.
// All heads of a token attend over the same latent row per cached token, so a CTA owns one query token and a group
// of 16 or 64 heads (the mma M dimension) and streams 32-row tiles of the cache into shared memory once for all of
// them (cp.async, 2 or 3 stages). Per tile: QK^T on mma.sync m16n8k16 (16 warps: each 16-head tile's scores are
// split over the row's 576 columns, partial scores summed through shared memory), an online softmax in the exp2
// domain, then PV with the output accumulator split across the warps over L (32 columns each). Few CTAs (small
// batches, long contexts): split-K over the context, with partials and arrival counters in the workspace as
// attention_decode.cu does (each token on only the splits its own context fills); the last CTA of a (token, head
// group) combines. Decode and prefill take the same kernel:
// every query token is its own query of context pos + 1 -- prefill re-reads its request's cache once per token, but
// the rows were just written and the CTAs of one request run together, so L2 serves most of it, and with 64+ heads
// per row the kernel is bound by the tensor cores, not by those reads.
// Invariants: every CTA writes exactly its heads of its token (padding tokens: zeros); counters are zero between
// calls; masked keys get probability 0 and zero-filled rows, never NaN.
#include <algorithm>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/mla_attention.h"

namespace llmserve::cuda {
namespace {

constexpr int kL = kMlaFastLatentDim;
constexpr int kD = kMlaFastLatentDim + kMlaFastRopeDim;  // 576
constexpr int kThreads = 512, kWarps = kThreads / 32;
constexpr int kTileKeys = 32;
// +16 bytes per shared row (1168 bytes, an odd number of 16-byte chunks): the 8 rows of an ldmatrix hit distinct
// banks.
constexpr int kRowStride = kD + 8;
constexpr int kChunksPerRow = kD / 8;      // 16-byte chunks of one cache row
constexpr int kSteps = kD / 16;            // k16 steps of one score
constexpr int kColsPerWarp = kL / kWarps;  // 32 output columns per warp: 4 n8 tiles
constexpr int kSStride = kTileKeys + 8;    // f32 partial-score rows: float2 stores of a half-warp in distinct banks
constexpr int kPStride = kTileKeys + 8;    // 16-bit probability rows (80 bytes): conflict-free ldmatrix
constexpr int kMaxSplits = 32;             // the combine's lanes
constexpr int kMinKeysPerSplit = 64;       // two tiles
static_assert(kColsPerWarp == 32, "the PV loop covers 4 n8 tiles per warp");

// MT 16-head mma tiles per CTA.
template <int MT>
struct MlaShape {
  static constexpr int kHeads = 16 * MT;
  static constexpr int kDSplit = kWarps / MT;     // warps sharing one head tile's scores, each over a slice of D
  static constexpr int kTpr = kThreads / kHeads;  // softmax threads per head
  static constexpr int kCpt = kTileKeys / kTpr;   // softmax keys per thread
  static constexpr int kQBytes = kHeads * kRowStride * 2;
  // Cache tiles in flight: 16-head CTAs are bandwidth-bound (~30 FLOP per byte), so they keep two tiles loading
  // while one is computed; 64-head CTAs (compute-bound) have room for one only (227 KB of shared memory).
  static constexpr int kStages = MT == 1 ? 3 : 2;
  static constexpr int kKBytes = kStages * kTileKeys * kRowStride * 2;
  static constexpr int kSBytes = kWarps * 16 * kSStride * 4;
  static constexpr int kPBytes = kHeads * kPStride * 2;
  static constexpr int kSmemBytes = kQBytes + kKBytes + kSBytes + kPBytes + 3 * kHeads * 4;  // + alpha, m, l
  static_assert(kTpr >= 1 && kTpr <= 32 && 32 % kTpr == 0 && kCpt >= 1, "softmax lanes");
  static_assert(kHeads * kMaxSplits * 4 <= kSBytes, "the combine's weights reuse the score buffer");
};

template <typename T, int MT>
__global__ void __launch_bounds__(kThreads, 1) mla_mma_kernel(const MlaAttentionParams p) {
  using S = MlaShape<MT>;
  extern __shared__ __align__(16) unsigned char smem[];
  T* sm_q = reinterpret_cast<T*>(smem);                                         // [kHeads][kRowStride]
  T* sm_k = reinterpret_cast<T*>(smem + S::kQBytes);                            // [kStages][kTileKeys][kRowStride]
  float* sm_s = reinterpret_cast<float*>(smem + S::kQBytes + S::kKBytes);       // [kWarps][16][kSStride]
  T* sm_p = reinterpret_cast<T*>(smem + S::kQBytes + S::kKBytes + S::kSBytes);  // [kHeads][kPStride]
  float* sm_alpha = reinterpret_cast<float*>(smem + S::kQBytes + S::kKBytes + S::kSBytes + S::kPBytes);
  float* sm_m = sm_alpha + S::kHeads;
  float* sm_l = sm_m + S::kHeads;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // x: (token, head group), the groups of a token adjacent so that they run together and share the rows in L2.
  const int num_groups = (p.num_heads + S::kHeads - 1) / S::kHeads;
  const int t = blockIdx.x / num_groups, group = blockIdx.x % num_groups, split = blockIdx.y;
  const int split_stride = gridDim.y;  // the partials' layout; a token uses num_splits <= split_stride of them
  const int head0 = group * S::kHeads;
  const int gh = min(S::kHeads, p.num_heads - head0);
  T* out = static_cast<T*>(p.out) + static_cast<int64_t>(t) * p.out_row_stride + static_cast<int64_t>(head0) * kL;

  if (t >= p.query_start_loc[p.num_reqs]) {  // padding token: zeros, from split 0 (no split takes part)
    if (split == 0) {
      for (int e = tid; e < gh * kL; e += kThreads) out[e] = from_float<T>(0.f);
    }
    return;
  }
  const int r = token_request(p.query_start_loc, p.num_reqs, t);
  const int q_begin = p.query_start_loc[r], q_end = p.query_start_loc[r + 1];
  const int ctx = max(0, p.seq_lens[r] - (q_end - q_begin) + (t - q_begin) + 1);  // keys [0, pos]
  // This token's splits: as many of the grid's as its keys fill with kMinKeysPerSplit each (the grid's count comes
  // from a host bound: under CUDA graphs the block table's reach); the CTAs past them leave before touching anything.
  const int num_splits = max(1, min(split_stride, (ctx + kMinKeysPerSplit - 1) / kMinKeysPerSplit));
  if (split >= num_splits) return;
  // This split's keys, whole tiles except the context's last one.
  const int per = ((ctx + num_splits - 1) / num_splits + kTileKeys - 1) / kTileKeys * kTileKeys;
  const int start = min(ctx, split * per), end = min(ctx, start + per);
  const int num_tiles = (end - start + kTileKeys - 1) / kTileKeys;

  const T* cache = static_cast<const T*>(p.cache);
  const int32_t* bt = p.block_table + static_cast<int64_t>(r) * p.block_table_stride;
  const int bs = p.block_size;
  // Rows past `end` are zero-filled (their probabilities are 0 too: 0 * 0, never 0 * stale NaN).
  auto load_tile = [&](int tile, int buf) {
    T* dst = sm_k + buf * kTileKeys * kRowStride;
    const int key0 = start + tile * kTileKeys;
    for (int c = tid; c < kTileKeys * kChunksPerRow; c += kThreads) {
      const int row = c / kChunksPerRow, col = (c % kChunksPerRow) * 8, key = key0 + row;
      const bool valid = key < end;
      const T* src = cache;
      if (valid) {
        const int b = key / bs;
        src = cache + (static_cast<int64_t>(__ldg(bt + b)) * bs + (key - b * bs)) * kD + col;
      }
      cp_async16(dst + row * kRowStride + col, src, valid);
    }
  };
  {
    const T* query = static_cast<const T*>(p.query) + static_cast<int64_t>(t) * p.query_row_stride +
                     static_cast<int64_t>(head0) * kD;
    for (int c = tid; c < S::kHeads * kChunksPerRow; c += kThreads) {
      const int row = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
      const bool valid = row < gh;  // heads past the last: zero queries (their outputs are never stored)
      cp_async16(sm_q + row * kRowStride + col, valid ? query + row * kD + col : query, valid);
    }
  }
  // Prologue: the query and tiles 0 .. kStages - 2, one commit group each (empty groups past the last tile).
#pragma unroll
  for (int st = 0; st < S::kStages - 1; ++st) {
    if (st < num_tiles) load_tile(st, st);
    cp_async_commit();
  }

  // Scores: warp -> (16-head tile smt, D slice dq); softmax: thread -> (head sh, keys part * kCpt ...).
  const int smt = warp / S::kDSplit, dq = warp % S::kDSplit;
  const int ks_begin = dq * kSteps / S::kDSplit, ks_end = (dq + 1) * kSteps / S::kDSplit;
  const int sh = tid / S::kTpr, part = tid % S::kTpr;
  const float scale_log2 = p.scale * 1.4426950408889634f;
  float m_run = -INFINITY, l_run = 0.f;  // of head sh, replicated over its kTpr threads
  float acc[MT][4][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int x = 0; x < 4; ++x) acc[mt][nt][x] = 0.f;

  for (int i = 0; i < num_tiles; ++i) {
    cp_async_wait<S::kStages - 2>();  // this thread's copies of tile i (group i) have landed
    __syncthreads();  // tile i is in for every thread; every warp is done with tile i - 1 (its buffer is free)
    const int ahead = i + S::kStages - 1;  // refills the buffer of tile i - 1
    if (ahead < num_tiles) load_tile(ahead, ahead % S::kStages);
    cp_async_commit();
    const T* kt = sm_k + (i % S::kStages) * kTileKeys * kRowStride;

    // Partial scores of 16 heads x 32 keys over this warp's slice of the row.
    {
      float sacc[4][4];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int x = 0; x < 4; ++x) sacc[nt][x] = 0.f;
      for (int ks = ks_begin; ks < ks_end; ++ks) {
        uint32_t a[4];
        ldmatrix_x4(a, sm_q + (smt * 16 + (lane & 15)) * kRowStride + ks * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          uint32_t b[4];  // keys np*16 + [0, 8): b[0], b[1]; keys + [8, 16): b[2], b[3]
          ldmatrix_x4(b, kt + (np * 16 + (lane & 7) + (lane >> 4) * 8) * kRowStride + ks * 16 + ((lane >> 3) & 1) * 8);
          const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
          mma(sacc[2 * np], a, b0, T());
          mma(sacc[2 * np + 1], a, b1, T());
        }
      }
      float* sw = sm_s + warp * 16 * kSStride;
      const int row = lane / 4, col = (lane % 4) * 2;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        *reinterpret_cast<float2*>(sw + row * kSStride + nt * 8 + col) = make_float2(sacc[nt][0], sacc[nt][1]);
        *reinterpret_cast<float2*>(sw + (row + 8) * kSStride + nt * 8 + col) = make_float2(sacc[nt][2], sacc[nt][3]);
      }
    }
    __syncthreads();

    // Online softmax of head sh over this tile's keys (exp2 domain: scores pre-multiplied by log2(e)).
    {
      const int mt = sh / 16, hr = sh % 16, key0 = start + i * kTileKeys;
      float s[S::kCpt];
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < S::kCpt; ++c) {
        const int col = part * S::kCpt + c;
        float v = 0.f;
#pragma unroll
        for (int x = 0; x < S::kDSplit; ++x) v += sm_s[((mt * S::kDSplit + x) * 16 + hr) * kSStride + col];
        v = key0 + col < end ? v * scale_log2 : -INFINITY;
        s[c] = v;
        mx = fmaxf(mx, v);
      }
#pragma unroll
      for (int o = S::kTpr / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_new = fmaxf(m_run, mx);
      // No valid key yet: keep the state and give every key weight 0.
      const float alpha = m_new == -INFINITY ? 1.f : fast_exp2(m_run - m_new);
      float psum = 0.f;
#pragma unroll
      for (int c = 0; c < S::kCpt; ++c) {
        const float pr = m_new == -INFINITY ? 0.f : fast_exp2(s[c] - m_new);
        psum += pr;
        sm_p[sh * kPStride + part * S::kCpt + c] = from_float<T>(pr);
      }
#pragma unroll
      for (int o = S::kTpr / 2; o > 0; o >>= 1) psum += __shfl_xor_sync(0xffffffffu, psum, o);
      l_run = l_run * alpha + psum;
      m_run = m_new;
      if (part == 0) sm_alpha[sh] = alpha;
    }
    __syncthreads();

    // acc = alpha acc + P V over this warp's 32 columns of L (V = the tile's first L columns).
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const float a0 = sm_alpha[mt * 16 + lane / 4], a1 = sm_alpha[mt * 16 + lane / 4 + 8];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        acc[mt][nt][0] *= a0;
        acc[mt][nt][1] *= a0;
        acc[mt][nt][2] *= a1;
        acc[mt][nt][3] *= a1;
      }
    }
#pragma unroll
    for (int ks = 0; ks < kTileKeys / 16; ++ks) {
      uint32_t b[2][4];  // columns np*16 + [0, 8): b[np][0..1]; + [8, 16): b[np][2..3]
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        ldmatrix_x4_trans(b[np], kt + (ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kRowStride +
                                     warp * kColsPerWarp + np * 16 + (lane >> 4) * 8);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t a[4];
        ldmatrix_x4(a, sm_p + (mt * 16 + (lane & 15)) * kPStride + ks * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          const uint32_t b0[2] = {b[np][0], b[np][1]}, b1[2] = {b[np][2], b[np][3]};
          mma(acc[mt][2 * np], a, b0, T());
          mma(acc[mt][2 * np + 1], a, b1, T());
        }
      }
    }
  }
  cp_async_wait<0>();  // only empty groups, or the query's copies when there was no tile, can be pending
  if (part == 0) {
    sm_m[sh] = m_run;
    sm_l[sh] = l_run;
  }
  __syncthreads();

  if (num_splits == 1) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int h = mt * 16 + lane / 4 + half * 8;
        if (h >= gh) continue;
        const float inv = sm_l[h] > 0.f ? 1.f / sm_l[h] : 0.f;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const int col = warp * kColsPerWarp + nt * 8 + (lane % 4) * 2;
          *reinterpret_cast<uint32_t*>(out + h * kL + col) =
              pack2<T>(acc[mt][nt][2 * half] * inv, acc[mt][nt][2 * half + 1] * inv);
        }
      }
    }
    return;
  }

  // Split-K: this split's partial [kL unnormalised outputs, max (log2 domain), sum] per head.
  const int64_t head_row = static_cast<int64_t>(t) * p.num_heads + head0;  // (token, first head) partial index
  float* ws = p.workspace + kSplitCounterElems;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int h = mt * 16 + lane / 4 + half * 8;
      if (h >= gh) continue;
      float* part_out = ws + ((head_row + h) * split_stride + split) * (kL + 2);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int col = warp * kColsPerWarp + nt * 8 + (lane % 4) * 2;
        *reinterpret_cast<float2*>(part_out + col) = make_float2(acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]);
      }
    }
  }
  for (int h = tid; h < gh; h += kThreads) {
    float* part_out = ws + ((head_row + h) * split_stride + split) * (kL + 2);
    part_out[kL] = sm_m[h];
    part_out[kL + 1] = sm_l[h];
  }
  __shared__ bool sm_last;
  __threadfence();  // this thread's partial is visible device-wide before the counter moves
  __syncthreads();
  if (tid == 0) {
    int* counter = reinterpret_cast<int*>(p.workspace) + blockIdx.x;
    const bool last = atomicAdd(counter, 1) == num_splits - 1;
    if (last) atomicExch(counter, 0);  // every split has arrived: ready for the next call (graph replays too)
    sm_last = last;
  }
  __syncthreads();
  if (!sm_last) return;
  __threadfence();  // order the partial reads after the counter read

  // Combine: out = sum_s w_s acc_s / sum_s w_s l_s, w_s = 2^(m_s - max m). Partials come from other SMs: ld.cg.
  float* sm_w = sm_s;  // [kHeads][kMaxSplits]; the score buffer is free
  for (int h = warp; h < gh; h += kWarps) {
    const float* part_in = ws + ((head_row + h) * split_stride + lane) * (kL + 2);
    const float m = lane < num_splits ? __ldcg(part_in + kL) : -INFINITY;
    const float l = lane < num_splits ? __ldcg(part_in + kL + 1) : 0.f;
    float mx = m;
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const float w = (mx == -INFINITY || m == -INFINITY) ? 0.f : fast_exp2(m - mx);
    float lsum = w * l;
    for (int o = 16; o > 0; o >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
    sm_w[h * kMaxSplits + lane] = lsum > 0.f ? w / lsum : 0.f;
  }
  __syncthreads();
  // Two adjacent columns per thread (sum_split_pairs, as attention_decode.cu's combine).
  for (int e = 2 * tid; e < gh * kL; e += 2 * kThreads) {
    const int h = e / kL, d = e % kL;
    const float* part_in = ws + (head_row + h) * split_stride * (kL + 2) + d;
    const float2 sum = sum_split_pairs(part_in, kL + 2, num_splits, sm_w + h * kMaxSplits);
    out[e] = from_float<T>(sum.x);
    out[e + 1] = from_float<T>(sum.y);
  }
}

// Splits per (token, head group): at most one CTA per SM in all, each split >= two tiles by the
// max_seq_len hint, only as many as the workspace holds, none when the groups outnumber the counters. Host-known
// sizes only (graph-safe).
int choose_splits(const MlaAttentionParams& p, int base_ctas) {
  if (p.workspace == nullptr || base_ctas <= 0 || base_ctas > kSplitCounterElems) return 1;
  // Rounded down: one CTA fits an SM, so 5 splits of 32 (token, group) CTAs on 132 SMs would run 1.2 waves.
  int splits = std::max(1, std::min(kMaxSplits, num_sms() / base_ctas));
  if (p.max_seq_len > 0) splits = std::min(splits, (p.max_seq_len + kMinKeysPerSplit - 1) / kMinKeysPerSplit);
  const int64_t per_split = static_cast<int64_t>(p.num_tokens) * p.num_heads * (kL + 2);
  while (splits > 1 && kSplitCounterElems + per_split * splits > p.workspace_elems) --splits;
  return std::max(splits, 1);
}

template <typename T, int MT>
void launch(const MlaAttentionParams& p, cudaStream_t stream) {
  constexpr int kSmem = MlaShape<MT>::kSmemBytes;
  const bool attr_set = once_per_device([] {
    return cudaFuncSetAttribute(mla_mma_kernel<T, MT>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem) ==
           cudaSuccess;
  });
  CHECK(attr_set) << "mla_mma_kernel: cannot get " << kSmem << " bytes of shared memory";
  const int groups = (p.num_heads + MlaShape<MT>::kHeads - 1) / MlaShape<MT>::kHeads;
  const int splits = choose_splits(p, p.num_tokens * groups);
  const dim3 grid(static_cast<unsigned>(p.num_tokens * groups), static_cast<unsigned>(splits));
  mla_mma_kernel<T, MT><<<grid, kThreads, kSmem, stream>>>(p);
  check_launch("mla_mma_kernel");
}

template <typename T>
void launch_heads(const MlaAttentionParams& p, int heads_per_cta, cudaStream_t stream) {
  // 64 heads per CTA read each cache tile once for 64 heads (H = 128: two CTAs per token); 16 for up to 16 heads
  // (DeepSeek under 8-way tensor parallelism, the test shapes), where 64 would leave most of the mma rows idle, and
  // for batches too small to fill the GPU with 64-head CTAs even at the most splits (batch 1 at 128 heads: 64 CTAs
  // of 64 heads vs 128 of 16). `mla_gpu_test --bench` times both groupings.
  if (heads_per_cta == 0) {
    const int64_t wide_ctas =
        static_cast<int64_t>(p.num_tokens) * ((p.num_heads + 63) / 64) * (p.workspace != nullptr ? kMaxSplits : 1);
    heads_per_cta = p.num_heads <= 16 || wide_ctas < num_sms() ? 16 : 64;
  }
  if (heads_per_cta == 16) return launch<T, 1>(p, stream);
  launch<T, 4>(p, stream);
}

}  // namespace

bool mla_mma_applies(const MlaAttentionParams& p) {
  if (p.dtype != DType::kBF16 && p.dtype != DType::kF16) return false;
  if (p.latent_dim != kMlaFastLatentDim || p.rope_dim != kMlaFastRopeDim) return false;
  return aligned16(p.query) && aligned16(p.cache) && (p.query_row_stride * 2) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(p.out) % 4 == 0 && p.out_row_stride % 2 == 0;
}

void launch_mla_mma(const MlaAttentionParams& p, int heads_per_cta, cudaStream_t stream) {
  CHECK(heads_per_cta == 0 || heads_per_cta == 16 || heads_per_cta == 64)
      << "mla_attention: heads per CTA " << heads_per_cta << " (want 16 or 64)";
  if (p.dtype == DType::kBF16) return launch_heads<__nv_bfloat16>(p, heads_per_cta, stream);
  launch_heads<__half>(p, heads_per_cta, stream);
}

}  // namespace llmserve::cuda

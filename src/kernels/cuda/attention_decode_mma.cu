// Paged decode attention on tensor cores (mma.sync m16n8k16, bf16 / f16) for grouped-query heads: one CTA owns up
// to 8 query heads of one kv head and the whole context of one request. The keys are the MMA's rows: S^T = K Q^T
// (16 keys x 8 heads per tile) and O^T += V^T P^T (head_dim x 8 heads), with P^T taken from S^T's accumulators by
// movmatrix, so a 16-key tile costs 2 x head_dim / 16 MMAs and a few shuffles where the CUDA-core kernel spends a
// 16-lane reduction per (key, head). Each of the 4 warps streams its own tiles (w, w + 4, ...) through a private
// cp.async pipeline (swizzled rows: conflict-free ldmatrix) and keeps an online softmax; the warps merge through
// shared memory. No split-K: the dispatcher (attention_decode.cu) sends here only batches that fill the GPU.
// Invariants: every CTA writes exactly its heads' rows; keys past the range are zero-filled and masked.
#include "core/env.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_common.cuh"

namespace llmserve::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTileKeys = 16;    // the MMA's m
constexpr int kHeadsPerCta = 8;  // the MMA's n: query heads of one kv head (groups over 8 take several CTAs)
template <int HD, int kStages>
struct MmaDecodeShape {
  static constexpr int kChunks = HD / 8;  // 16-byte chunks per cache row
  static_assert(kChunks % 8 == 0 && kChunks <= 32, "head_dim 64, 128 or 256: the swizzle permutes 8 chunks");
  static constexpr int kRowsPerPass = 32 / kChunks;  // key rows one warp-wide copy instruction covers
  static constexpr int kPasses = kTileKeys / kRowsPerPass;
  static constexpr int kTileElems = kTileKeys * HD;  // one K (or V) tile
  static constexpr int kStageElems = 2 * kTileElems;
  static constexpr int kPipeBytes = kWarps * kStages * kStageElems * 2;
  // The warps' merge reuses the pipeline's memory: o [kWarps][8][kOStride], m and l [kWarps][8] (f32). The padded
  // stride puts the 4 heads a quad writes in different banks.
  static constexpr int kOStride = HD + 4;
  static constexpr int kMergeBytes = (kWarps * kHeadsPerCta * kOStride + 2 * kWarps * kHeadsPerCta) * 4;
  static constexpr int kQOffsetBytes = kPipeBytes > kMergeBytes ? kPipeBytes : kMergeBytes;
  static constexpr int kSmemBytes = kQOffsetBytes + kHeadsPerCta * HD * 2;
};

// CTAs per kv head: its group of query heads in chunks of kHeadsPerCta.
int head_chunks(const PagedAttentionParams& p) {
  const int group = p.num_heads / p.num_kv_heads;
  return (group + kHeadsPerCta - 1) / kHeadsPerCta;
}

// Element offset of 16-byte chunk `chunk` of row `row` in a [rows][HD] tile: chunks XOR-permuted by the row's low
// three bits, so the 8 rows of one ldmatrix matrix hit 8 different bank groups.
template <int HD>
__device__ __forceinline__ int swizzled(int row, int chunk) {
  return row * HD + ((chunk ^ (row & 7)) << 3);
}

// Transposes an 8x8 b16 matrix held in mma fragment layout (lane: row lane / 4, columns 2 (lane % 4) + {0, 1}).
__device__ __forceinline__ uint32_t transpose8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// Grid: x (kv head, head chunk of 8), y request; kStages: the per-warp pipeline depth (launch_decode_mma).
template <typename T, int HD, int kStages>
__global__ void __launch_bounds__(kThreads) mma_decode_kernel(const PagedAttentionParams p, int num_head_chunks) {
  pdl_wait();  // launch_pdl: the queries and the cache come from the kernels before
  using S = MmaDecodeShape<HD, kStages>;
  extern __shared__ uint4 smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  T* sq = reinterpret_cast<T*>(reinterpret_cast<char*>(smem_raw) + S::kQOffsetBytes);

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int kv_head = blockIdx.x / num_head_chunks, chunk = blockIdx.x % num_head_chunks;
  const int r = blockIdx.y;
  const int group = p.num_heads / p.num_kv_heads;
  const int head0 = kv_head * group + chunk * kHeadsPerCta;
  const int gh = min(kHeadsPerCta, group - chunk * kHeadsPerCta);
  const int q_end = p.query_start_loc[r + 1];
  if (q_end <= p.query_start_loc[r]) return;  // empty request: nothing to write
  const int token = q_end - 1;
  const int seq = p.seq_lens[r];
  const int lo = p.sliding_window > 0 ? max(0, seq - p.sliding_window) : 0;
  const int num_tiles = seq > lo ? (seq - lo + kTileKeys - 1) / kTileKeys : 0;
  const int my_tiles = num_tiles > warp ? (num_tiles - warp + kWarps - 1) / kWarps : 0;

  const T* kc = static_cast<const T*>(p.key_cache);
  const T* vc = static_cast<const T*>(p.value_cache);
  const int32_t* bt = p.block_table + r * p.block_table_stride;
  const int bs = p.block_size;
  T* pipe = smem + warp * kStages * S::kStageElems;
  // Copy roles: lane copies chunk `cc` of rows row0 + kRowsPerPass * pass (K and V).
  const int cc = lane % S::kChunks, row0 = lane / S::kChunks;
  // The cache slots (block * block_size + offset) of this lane's rows of tile i, -1 past the range: loaded a tile
  // before their copies are issued (the prologue's all at once), so issuing never waits on the block table. A slot
  // fits in int32: 2^31 slots of even 64 bf16 values would be 256 GB of keys.
  auto fetch_slots = [&](int i, int(&slot)[S::kPasses]) {
    const int k0 = lo + (warp + i * kWarps) * kTileKeys;
    const int b0 = k0 / bs, rem0 = k0 - b0 * bs;
#pragma unroll
    for (int pass = 0; pass < S::kPasses; ++pass) {
      const int row = row0 + pass * S::kRowsPerPass;
      int b = b0, rr = rem0 + row;
      while (rr >= bs) rr -= bs, ++b;  // at most one step for blocks of >= 16 keys
      slot[pass] = i < my_tiles && k0 + row < seq ? __ldg(bt + b) * bs + rr : -1;
    }
  };
  auto issue = [&](int i, const int(&slot)[S::kPasses]) {  // this warp's i-th tile into stage i % kStages
    T* stage = pipe + (i % kStages) * S::kStageElems;
#pragma unroll
    for (int pass = 0; pass < S::kPasses; ++pass) {
      const bool valid = slot[pass] >= 0;
      const int64_t off = valid ? (static_cast<int64_t>(slot[pass]) * p.num_kv_heads + kv_head) * HD + cc * 8 : 0;
      const int so = swizzled<HD>(row0 + pass * S::kRowsPerPass, cc);
      cp_async16(stage + so, kc + off, valid);
      cp_async16(stage + S::kTileElems + so, vc + off, valid);
    }
  };
  {
    int slots[kStages - 1][S::kPasses];
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) fetch_slots(i, slots[i]);
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) {
      if (i < my_tiles) issue(i, slots[i]);
      cp_async_commit();
    }
  }
  int next_slots[S::kPasses];
  fetch_slots(kStages - 1, next_slots);

  // The query rows of this CTA's heads (zeros past the group), swizzled like the tiles.
  const T* query = static_cast<const T*>(p.query) + token * p.query_row_stride + static_cast<int64_t>(head0) * HD;
  for (int e = tid; e < kHeadsPerCta * S::kChunks; e += kThreads) {
    const int h = e / S::kChunks, c = e % S::kChunks;
    const uint4 v = h < gh ? load_chunk(query + h * HD + c * 8) : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(sq + swizzled<HD>(h, c)) = v;
  }
  __syncthreads();
  // Q^T as the B operand of each 16-dim step: b[0] = dims 0-7, b[1] = dims 8-15 (lane: head lane / 4).
  uint32_t qf[HD / 16][2];
#pragma unroll
  for (int ks = 0; ks < HD / 16; ks += 2) {
    uint32_t x[4];
    ldmatrix_x4(x, sq + swizzled<HD>(lane % 8, 2 * ks + lane / 8));
    qf[ks][0] = x[0], qf[ks][1] = x[1], qf[ks + 1][0] = x[2], qf[ks + 1][1] = x[3];
  }

  // Accumulator layout (m16n8): lane holds rows lane / 4 and + 8, columns (heads) 2 (lane % 4) and + 1; index
  // h (0, 1) is head 2 (lane % 4) + h in elements h and h + 2.
  const int g = lane / 4;
  const float qk_scale = p.scale * 1.4426950408889634f;  // scores in log2 units: exp2 below
  float o[HD / 16][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  for (int i = 0; i < my_tiles; ++i) {
    __syncwarp();  // every lane's ldmatrix of the stage refilled below (read in step i - 1) is done
    if (i + kStages - 1 < my_tiles) {
      issue(i + kStages - 1, next_slots);
      fetch_slots(i + kStages, next_slots);
    }
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncwarp();  // the other lanes' copies of tile i have landed too
    const T* ks_tile = pipe + (i % kStages) * S::kStageElems;
    const T* vs_tile = ks_tile + S::kTileElems;

    float s[4] = {0.f, 0.f, 0.f, 0.f};  // S^T: keys g, g + 8 x heads 2 (lane % 4) + {0, 1}
#pragma unroll
    for (int ks = 0; ks < HD / 16; ++ks) {
      const int mi = lane / 8, row = (mi & 1) * 8 + lane % 8;
      uint32_t a[4];
      ldmatrix_x4(a, ks_tile + swizzled<HD>(row, 2 * ks + (mi >> 1)));
      mma(s, a, qf[ks], T());
    }
    const int k0 = lo + (warp + i * kWarps) * kTileKeys;
    const bool valid_lo = k0 + g < seq, valid_hi = k0 + g + 8 < seq;
    uint32_t pb[2];  // P^T as the B operand: keys 0-7 and 8-15
    float pv[4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float s_lo = valid_lo ? s[h] * qk_scale : -INFINITY;
      const float s_hi = valid_hi ? s[h + 2] * qk_scale : -INFINITY;
      float mx = fmaxf(s_lo, s_hi);
#pragma unroll
      for (int off = 4; off < 32; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      mx = fmaxf(mx, m[h]);
      // No valid key yet for this head: keep the state and give every key weight 0.
      const float alpha = mx == -INFINITY ? 1.f : fast_exp2(m[h] - mx);
      pv[h] = mx == -INFINITY ? 0.f : fast_exp2(s_lo - mx);
      pv[h + 2] = mx == -INFINITY ? 0.f : fast_exp2(s_hi - mx);
      l[h] = l[h] * alpha + pv[h] + pv[h + 2];
      m[h] = mx;
#pragma unroll
      for (int d = 0; d < HD / 16; ++d) o[d][h] *= alpha, o[d][h + 2] *= alpha;
    }
    pb[0] = transpose8x8(pack2<T>(pv[0], pv[1]));
    pb[1] = transpose8x8(pack2<T>(pv[2], pv[3]));
#pragma unroll
    for (int d = 0; d < HD / 16; ++d) {
      const int mi = lane / 8, row = (mi >> 1) * 8 + lane % 8;
      uint32_t a[4];
      ldmatrix_x4_trans(a, vs_tile + swizzled<HD>(row, 2 * d + (mi & 1)));
      mma(o[d], a, pb, T());
    }
  }
  // Each lane summed only its own keys' weights: total them over the 8 lanes of a head column.
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) l[h] += __shfl_xor_sync(0xffffffffu, l[h], off);
  cp_async_wait<0>();  // only empty groups can be pending; none may land in the merge's memory
  __syncthreads();     // every warp is done with its pipeline

  float* sm_o = reinterpret_cast<float*>(smem_raw);  // [kWarps][8][kOStride]
  float* sm_m = sm_o + kWarps * kHeadsPerCta * S::kOStride;
  float* sm_l = sm_m + kWarps * kHeadsPerCta;
  const int t2 = 2 * (lane % 4);
  float* wo = sm_o + warp * kHeadsPerCta * S::kOStride;
#pragma unroll
  for (int d = 0; d < HD / 16; ++d) {
    wo[t2 * S::kOStride + 16 * d + g] = o[d][0];
    wo[(t2 + 1) * S::kOStride + 16 * d + g] = o[d][1];
    wo[t2 * S::kOStride + 16 * d + g + 8] = o[d][2];
    wo[(t2 + 1) * S::kOStride + 16 * d + g + 8] = o[d][3];
  }
  if (g == 0) {
    sm_m[warp * kHeadsPerCta + t2] = m[0], sm_m[warp * kHeadsPerCta + t2 + 1] = m[1];
    sm_l[warp * kHeadsPerCta + t2] = l[0], sm_l[warp * kHeadsPerCta + t2 + 1] = l[1];
  }
  __syncthreads();
  T* out = static_cast<T*>(p.out) + token * p.out_row_stride + static_cast<int64_t>(head0) * HD;
  for (int e = 2 * tid; e < gh * HD; e += 2 * kThreads) {  // two adjacent dims per thread
    const int h = e / HD, d = e % HD;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, sm_m[w * kHeadsPerCta + h]);
    float sum0 = 0.f, sum1 = 0.f, lsum = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float wt = fast_exp2(sm_m[w * kHeadsPerCta + h] - mx);
        const float* ow = sm_o + (w * kHeadsPerCta + h) * S::kOStride + d;
        sum0 += wt * ow[0], sum1 += wt * ow[1];
        lsum += wt * sm_l[w * kHeadsPerCta + h];
      }
    }
    const float inv = lsum > 0.f ? 1.f / lsum : 0.f;  // no valid key at all (empty window): zeros, like the CPU op
    *reinterpret_cast<uint32_t*>(out + h * HD + d) = pack2<T>(sum0 * inv, sum1 * inv);
  }
}

}  // namespace

// LLMSERVE_DECODE_MMA=0 keeps every decode on the CUDA-core kernel (the A/B switch); default 1.
bool mma_decode_enabled() {
  static const bool enabled = switch_from_env_or_die("LLMSERVE_DECODE_MMA", true);
  return enabled;
}

namespace {

template <typename T, int HD, int kStages>
void launch_stages(const PagedAttentionParams& p, cudaStream_t stream) {
  constexpr int kSmem = MmaDecodeShape<HD, kStages>::kSmemBytes;
  const bool attr_set = once_per_device([] {
    return cudaFuncSetAttribute(mma_decode_kernel<T, HD, kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                kSmem) == cudaSuccess;
  });
  CHECK(attr_set) << "mma_decode_kernel: cannot get " << kSmem << " bytes of shared memory";
  const int num_head_chunks = head_chunks(p);
  const dim3 grid(static_cast<unsigned>(p.num_kv_heads * num_head_chunks), static_cast<unsigned>(p.num_decode_reqs));
  CHECK(stream == cuda::stream()) << "mma_decode_kernel: launch_pdl launches on the current stream";
  launch_pdl_smem("mma_decode_kernel", mma_decode_kernel<T, HD, kStages>, grid, kThreads, kSmem, p, num_head_chunks);
}
}  // namespace

// Pipeline depth: 3 stages (two tiles in flight per warp; 2 CTAs per SM at head_dim 128) while the grid is under
// 6 CTAs per SM, else 2 (a third resident CTA streams while another starts or merges). Measured on an H200
// (bench/RESULTS.md): M batch 64 x 1024 keys 93% of the copy bandwidth at 3 stages, 84% at 2; M batch 128 x 256 82%
// at 2, 72% at 3; S batch 128 x 192 62% at 2, 58% at 3; 4 stages (1 CTA per SM) 45-62%.
int64_t mma_decode_ctas(const PagedAttentionParams& p) {
  return static_cast<int64_t>(p.num_decode_reqs) * p.num_kv_heads * head_chunks(p);
}

template <typename T, int HD>
void launch_decode_mma(const PagedAttentionParams& p, cudaStream_t stream) {
  if (mma_decode_ctas(p) >= 6 * num_sms()) return launch_stages<T, HD, 2>(p, stream);
  launch_stages<T, HD, 3>(p, stream);
}

#define LLMSERVE_DECODE_MMA(T, HD) template void launch_decode_mma<T, HD>(const PagedAttentionParams&, cudaStream_t);
LLMSERVE_DECODE_MMA(__nv_bfloat16, 64)
LLMSERVE_DECODE_MMA(__nv_bfloat16, 128)
LLMSERVE_DECODE_MMA(__half, 64)
LLMSERVE_DECODE_MMA(__half, 128)
#undef LLMSERVE_DECODE_MMA

}  // namespace llmserve::cuda

// Paged decode attention (one query token per request), bf16 / f16, head_dim a template constant. One CTA owns
// up to GH query heads of each of KVH adjacent kv heads (GQA: K/V read once for the group; KVH = 2 halves the CTA
// count of large batches) over one split of the context. K/V chunks stream into shared memory through a
// cp.async pipeline; each thread copies and later reads only its own 16-byte chunks, so the loop needs no
// barrier. Threads form groups of HD/8 lanes per kv head, each group keeps an online softmax over its keys, and
// the groups merge through shared memory. With split-K every CTA writes its partial (max, sum, unnormalised
// output) to the f32 workspace and the last CTA of its (request, head group) to arrive (an atomic counter in the
// workspace, reset by that CTA) combines them: one launch per call. The grid's split count is a bound set on the
// host (under CUDA graphs from the block table's reach, not the context); each request uses only as many splits as
// its own length fills with min_keys_per_split keys each, and the CTAs past those leave at once. launch_decode sends
// groups of >= 4 heads whose batch fills the GPU without split-K to the tensor-core kernel (attention_decode_mma.cu).
// Both decode kernels launch with programmatic dependent launch and wait (pdl_wait) before their first read of the
// queries or the step's keys: they are resident when the rotary + cache write ends, one launch gap less per layer
// (bench/RESULTS.md, eighth session); this one can also copy the keys earlier steps cached before it
// (pdl_early_reads).
// Invariants: every CTA of a request writes exactly its heads; the counters are zero between calls.
#include <algorithm>

#include "core/env.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_common.cuh"

namespace llmserve::cuda {
namespace {

constexpr int kDecodeThreads = 128;
constexpr int kMaxSplits = 32;  // also the lane count of the combine's per-split weights
// One CTA step at head_dim 128: batch-1 decode is latency-bound, so more, shorter splits win (measured on an
// H100: context 2048 went from 52 to ~16 us per call with 32-key instead of 128-key splits, bench/RESULTS.md).
constexpr int kMinKeysPerSplit = 32;

// Keys per split below which a request uses fewer splits than the grid has (decided on the device from its length).
// LLMSERVE_DECODE_MIN_KEYS_PER_SPLIT=N (1..4096) overrides it so one binary can measure the choice (1: every request
// of >= 32 keys uses all of the grid's splits, as before this was decided per request).
int min_keys_per_split() {
  static const int keys =
      static_cast<int>(int_from_env_or_die("LLMSERVE_DECODE_MIN_KEYS_PER_SPLIT", 1, 4096, kMinKeysPerSplit));
  return keys;
}

// Compile-time shape of one decode CTA: KVH adjacent kv heads (their rows are contiguous in the cache, so one
// key's KVH * HD values are one coalesced read), GH query heads of each.
template <int HD, int GH, int KVH, int kStages>
struct DecodeShape {
  static constexpr int kVec = 8;                         // 16 bytes of f16 / bf16 per thread and key
  static constexpr int kHeadThreads = HD / kVec;         // threads per (key, kv head): the dot-product lanes
  static constexpr int kTpk = KVH * kHeadThreads;        // threads per key
  static constexpr int kGroups = kDecodeThreads / kTpk;  // key groups; each thread owns kUnroll keys per step
  static constexpr int kUnroll = GH >= 8 ? 2 : 4;
  static constexpr int kStepKeys = kGroups * kUnroll;
  static constexpr int kHeads = KVH * GH;  // query heads per CTA
  static_assert(kTpk >= 1 && kTpk <= 32 && 32 % kTpk == 0, "KVH * head_dim must be 8..256, a power of two");
  // Pipeline: [kStages][K, V][kUnroll][kDecodeThreads] 16-byte chunks.
  static constexpr int kPipeBytes = kStages * 2 * kUnroll * kDecodeThreads * 16;
  // The groups' merge, after the pipeline drained, reuses the same memory: m, l [kGroups][kHeads] and
  // acc [kHeads][kGroups][HD].
  static constexpr int kMergeBytes = (2 * kGroups * kHeads + kHeads * kGroups * HD) * 4;
  static constexpr int kSmemBytes = kPipeBytes > kMergeBytes ? kPipeBytes : kMergeBytes;
};

// Split-K epilogue of the last CTA of a (request, head group): out = sum_s w_s acc_s / sum_s w_s l_s with
// w_s = exp(m_s - max m). Partials are read with ld.global.cg: they were written by other SMs (L1 is not coherent).
// Partials of head h, split s at ws_group[(h * split_stride + s) * (HD + 2)].
template <typename T, int HD, int GH>
__device__ void combine_splits(const float* ws_group, int split_stride, int num_splits, int gh, T* out_group) {
  __shared__ float sm_w[GH][kMaxSplits];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  constexpr int kWarps = kDecodeThreads / 32;
  for (int h = warp; h < gh; h += kWarps) {
    const float* part = ws_group + (static_cast<int64_t>(h) * split_stride + lane) * (HD + 2);
    const float m = lane < num_splits ? __ldcg(part + HD) : -INFINITY;
    const float l = lane < num_splits ? __ldcg(part + HD + 1) : 0.f;
    float mx = m;
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const float w = (mx == -INFINITY || m == -INFINITY) ? 0.f : __expf(m - mx);
    float lsum = w * l;
    for (int o = 16; o > 0; o >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
    sm_w[h][lane] = lsum > 0.f ? w / lsum : 0.f;  // no valid key at all (empty window): zeros, like the CPU op
  }
  __syncthreads();
  // Two adjacent columns per thread (sum_split_pairs): same sums in the same order.
  for (int e = 2 * tid; e < gh * HD; e += 2 * kDecodeThreads) {
    const int h = e / HD, d = e % HD;
    const float* part = ws_group + static_cast<int64_t>(h) * split_stride * (HD + 2) + d;
    const float2 sum = sum_split_pairs(part, HD + 2, num_splits, sm_w[h]);
    out_group[h * HD + d] = from_float<T>(sum.x);
    out_group[h * HD + d + 1] = from_float<T>(sum.y);
  }
}

// At most 128 registers for head groups up to 4 (measured 143 without the bound): 4 CTAs per SM instead of 3.
// Rows: request blockIdx.y; x: (kv head group of KVH, head chunk); z: split.
// early_reads (pdl_early_reads): the prologue's copies (a whole split at batch 1: 32 keys) go out before pdl_wait
// for the keys earlier steps cached; only the step's new keys (and the queries) come from the kernel before, so the
// threads owning those copy them after it. No pdl_trigger: the next kernel (the o projection's GEMV) starts when
// this one ends -- triggering early let its weight loads compete with this latency-bound kernel's, neutral to
// slower in two measurements (bench/RESULTS.md, third and eighth sessions).
template <typename T, int HD, int GH, int KVH, int kStages>
__global__ void __launch_bounds__(kDecodeThreads, GH <= 4 ? 4 : 2)
    decode_kernel(const PagedAttentionParams p, int num_head_chunks, int min_keys_per_split, int early_reads) {
  if (!early_reads) pdl_wait();  // launch_pdl: the queries and the cache come from the kernels before
  using S = DecodeShape<HD, GH, KVH, kStages>;
  constexpr int kVec = S::kVec, kHeadThreads = S::kHeadThreads, kTpk = S::kTpk, kGroups = S::kGroups;
  constexpr int kUnroll = S::kUnroll, kHeads = S::kHeads;
  extern __shared__ uint4 smem[];

  const int tid = threadIdx.x, g = tid / kTpk, c = tid % kTpk, j = c / kHeadThreads, cc = c % kHeadThreads;
  const int kv_base = blockIdx.x / num_head_chunks * KVH, chunk = blockIdx.x % num_head_chunks;
  const int r = blockIdx.y, split = blockIdx.z, split_stride = gridDim.z;
  const int group = p.num_heads / p.num_kv_heads;
  const int gh = min(GH, group - chunk * GH);
  const int q_begin = p.query_start_loc[r], q_end = p.query_start_loc[r + 1];
  if (q_end <= q_begin) return;  // empty request: nothing to write, no split counts (all CTAs leave)
  const int token = q_end - 1;
  const int seq = p.seq_lens[r];
  // Keys [cached_end, seq) are this step's: the rotary + cache kernel before this one writes them.
  const int cached_end = seq - (q_end - q_begin);
  const int lo = p.sliding_window > 0 ? max(0, seq - p.sliding_window) : 0;
  // This request's splits: as many of the grid's as its keys fill with min_keys_per_split each (at least one); the
  // CTAs past them leave before touching anything, and the arrival count and the combine use this number.
  const int num_splits = max(1, min(split_stride, (seq - lo + min_keys_per_split - 1) / min_keys_per_split));
  if (split >= num_splits) return;
  // This split's keys: the request's range cut into num_splits near-equal pieces (any seq_len is covered).
  const int per = (seq - lo + num_splits - 1) / num_splits;
  const int start = lo + split * per, end = min(seq, start + per);
  const int num_steps = end > start ? (end - start + S::kStepKeys - 1) / S::kStepKeys : 0;  // uniform over the CTA

  const T* kc = static_cast<const T*>(p.key_cache);
  const T* vc = static_cast<const T*>(p.value_cache);
  const int32_t* bt = p.block_table + r * p.block_table_stride;
  const int bs = p.block_size;
  // A thread's keys in step i are k0(i) + u, u < kUnroll: consecutive, so one division per step and then at most
  // a few block crossings. Block ids are loaded a step before their copies are issued (the prologue's all at
  // once), so issuing rarely waits on the block table.
  auto fetch_blocks = [&](int step, int(&blk)[kUnroll], int& rem0) {
    const int k0 = start + step * S::kStepKeys + g * kUnroll;
    const int b0 = k0 / bs;
    rem0 = k0 - b0 * bs;
#pragma unroll
    for (int u = 0, b = b0, rr = rem0; u < kUnroll; ++u, ++rr) {
      while (rr >= bs) rr -= bs, ++b;
      blk[u] = k0 + u < end ? __ldg(bt + b) : 0;
    }
  };
  auto key_copy = [&](uint4* buf, int u, int64_t block, int rr, bool valid) {
    const int64_t off = ((block * bs + rr) * p.num_kv_heads + kv_base) * HD + c * kVec;
    cp_async16(buf + u * kDecodeThreads + tid, valid ? kc + off : kc, valid);
    cp_async16(buf + (kUnroll + u) * kDecodeThreads + tid, valid ? vc + off : vc, valid);
  };
  // Keys from `skip_from` on (to end) are left out: the prologue before pdl_wait leaves this step's keys alone.
  auto issue = [&](int step, const int(&blk)[kUnroll], int rem0, int skip_from) {
    uint4* buf = smem + (step % kStages) * 2 * kUnroll * kDecodeThreads;
    const int k0 = start + step * S::kStepKeys + g * kUnroll;
#pragma unroll
    for (int u = 0, rr = rem0; u < kUnroll; ++u, ++rr) {
      while (rr >= bs) rr -= bs;
      if (k0 + u >= skip_from && k0 + u < end) continue;
      key_copy(buf, u, blk[u], rr, k0 + u < end);
    }
  };
  {
    int blk[kStages - 1][kUnroll], rem[kStages - 1];
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st)
      if (st < num_steps) fetch_blocks(st, blk[st], rem[st]);
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) {
      if (st < num_steps) issue(st, blk[st], rem[st], early_reads ? max(start, cached_end) : end);
      cp_async_commit();
    }
  }
  if (early_reads) {
    pdl_wait();  // the queries and this step's keys come from the kernels before
    // The prologue's keys it left out (at most the request's new ones, in the split holding its end), copied now;
    // the thread waits for its whole prologue, so the pipeline's group count needs no change.
    bool late = false;
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) {
      const int k0 = start + st * S::kStepKeys + g * kUnroll;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int key = k0 + u;
        if (st >= num_steps || key < cached_end || key >= end) continue;
        key_copy(smem + (st % kStages) * 2 * kUnroll * kDecodeThreads, u, __ldg(bt + key / bs), key % bs, true);
        late = true;
      }
    }
    if (late) {
      cp_async_commit();
      cp_async_wait<0>();
    }
  }
  int blk[kUnroll], rem0 = 0;
  if (kStages - 1 < num_steps) fetch_blocks(kStages - 1, blk, rem0);

  const int h_begin = (kv_base + j) * group + chunk * GH;  // this thread's kv head's first query head
  const T* query = static_cast<const T*>(p.query);
  float q[GH][kVec];
#pragma unroll
  for (int h = 0; h < GH; ++h) {
    if (h < gh) {
      const uint4 raw = load_chunk(query + token * p.query_row_stride + (h_begin + h) * HD + cc * kVec);
      chunk_to_floats(raw, q[h], T());
#pragma unroll
      for (int i = 0; i < kVec; ++i) q[h][i] *= p.scale;
    } else {
#pragma unroll
      for (int i = 0; i < kVec; ++i) q[h][i] = 0.f;
    }
  }
  float m[GH], l[GH], acc[GH][kVec];
#pragma unroll
  for (int h = 0; h < GH; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.f;
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[h][i] = 0.f;
  }

  for (int i = 0; i < num_steps; ++i) {
    const int ahead = i + kStages - 1;
    if (ahead < num_steps) {
      issue(ahead, blk, rem0, end);  // refills the buffer this thread read in step i - 1 (own chunks: no barrier)
      if (ahead + 1 < num_steps) fetch_blocks(ahead + 1, blk, rem0);
    }
    cp_async_commit();
    cp_async_wait<kStages - 1>();  // step i's copies (this thread's) have landed
    const uint4* buf = smem + (i % kStages) * 2 * kUnroll * kDecodeThreads;
    const int k0 = start + i * S::kStepKeys + g * kUnroll;
    float s[GH][kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kf[kVec];
      chunk_to_floats(buf[u * kDecodeThreads + tid], kf, T());
#pragma unroll
      for (int h = 0; h < GH; ++h) {
        float d = 0.f;
#pragma unroll
        for (int x = 0; x < kVec; ++x) d = fmaf(q[h][x], kf[x], d);
        s[h][u] = d;
      }
    }
#pragma unroll
    for (int h = 0; h < GH; ++h) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int o = kHeadThreads / 2; o > 0; o >>= 1) s[h][u] += __shfl_xor_sync(0xffffffffu, s[h][u], o);
        if (k0 + u >= end) s[h][u] = -INFINITY;
      }
    }
    // Online softmax: s becomes the unnormalised probabilities; acc is rescaled once per step, then V is
    // converted one key at a time (fewer live registers than converting the whole step: more CTAs per SM).
#pragma unroll
    for (int h = 0; h < GH; ++h) {
      float mx = m[h];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) mx = fmaxf(mx, s[h][u]);
      // No valid key yet for this head: keep the state (-inf max) and give every key weight 0.
      const float alpha = mx == -INFINITY ? 1.f : __expf(m[h] - mx);
      float psum = 0.f;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        s[h][u] = mx == -INFINITY ? 0.f : __expf(s[h][u] - mx);
        psum += s[h][u];
      }
      l[h] = l[h] * alpha + psum;
      m[h] = mx;
#pragma unroll
      for (int x = 0; x < kVec; ++x) acc[h][x] *= alpha;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float vf[kVec];
      chunk_to_floats(buf[(kUnroll + u) * kDecodeThreads + tid], vf, T());
#pragma unroll
      for (int h = 0; h < GH; ++h) {
#pragma unroll
        for (int x = 0; x < kVec; ++x) acc[h][x] = fmaf(s[h][u], vf[x], acc[h][x]);
      }
    }
  }
  cp_async_wait<0>();  // only empty groups can be pending here; none may target memory the merge reuses
  __syncthreads();     // every thread is done with the pipeline buffers

  // Merge the groups' states: global max per head, then rescaled sums. CTA head index jh = j * GH + h.
  float* sm_m = reinterpret_cast<float*>(smem);  // [kGroups][kHeads]
  float* sm_l = sm_m + kGroups * kHeads;         // [kGroups][kHeads]
  float* sm_acc = sm_l + kGroups * kHeads;       // [kHeads][kGroups][HD]
#pragma unroll
  for (int h = 0; h < GH; ++h) {
    const int jh = j * GH + h;
    if (cc == 0) {
      sm_m[g * kHeads + jh] = m[h];
      sm_l[g * kHeads + jh] = l[h];
    }
#pragma unroll
    for (int x = 0; x < kVec; ++x) sm_acc[(jh * kGroups + g) * HD + cc * kVec + x] = acc[h][x];
  }
  __syncthreads();
  T* out = static_cast<T*>(p.out) + token * p.out_row_stride;
  // Split-K partials of this (request, head group) (KVH == 1): [gh][split_stride][HD + 2] after the counters.
  const int head0 = kv_base * group + chunk * GH;
  float* ws_group =
      p.workspace + kSplitCounterElems + (static_cast<int64_t>(r) * p.num_heads + head0) * split_stride * (HD + 2);
  for (int e = tid; e < kHeads * HD; e += kDecodeThreads) {
    const int jh = e / HD, d = e % HD, h = jh % GH;
    if (h >= gh) continue;
    float mx = -INFINITY;
    for (int x = 0; x < kGroups; ++x) mx = fmaxf(mx, sm_m[x * kHeads + jh]);
    float sum = 0.f, lsum = 0.f;
    if (mx != -INFINITY) {
      for (int x = 0; x < kGroups; ++x) {
        const float w = __expf(sm_m[x * kHeads + jh] - mx);
        sum += w * sm_acc[(jh * kGroups + x) * HD + d];
        lsum += w * sm_l[x * kHeads + jh];
      }
    }
    const int head = (kv_base + jh / GH) * group + chunk * GH + h;
    if (KVH > 1 || num_splits == 1) {
      out[head * HD + d] = from_float<T>(lsum > 0.f ? sum / lsum : 0.f);
    } else {
      float* part = ws_group + (static_cast<int64_t>(h) * split_stride + split) * (HD + 2);
      part[d] = sum;
      if (d == 0) {
        part[HD] = mx;
        part[HD + 1] = lsum;
      }
    }
  }
  if (KVH > 1 || num_splits == 1) return;  // the host runs KVH > 1 without split-K only

  // Split-K: publish this partial, count arrivals; the last CTA combines (threadfence-reduction pattern).
  __shared__ bool sm_last;
  __threadfence();  // this thread's partial is visible device-wide before the counter moves
  __syncthreads();
  if (tid == 0) {
    int* counter = reinterpret_cast<int*>(p.workspace) + r * gridDim.x + blockIdx.x;
    const bool last = atomicAdd(counter, 1) == num_splits - 1;
    if (last) atomicExch(counter, 0);  // every split has arrived: ready for the next call (graph replays too)
    sm_last = last;
  }
  __syncthreads();
  if (!sm_last) return;
  __threadfence();  // order the partial reads after the counter read
  combine_splits<T, HD, GH>(ws_group, split_stride, num_splits, gh, out + head0 * HD);
}

// Splits per request: enough CTAs for ~2 waves of the GPU, each split >= kMinKeysPerSplit keys (by the
// max_seq_len hint), only as many as the workspace holds, and none when the head groups outnumber the
// counters. Depends only on host-known sizes (graph-safe).
int choose_splits(const PagedAttentionParams& p, int base_ctas, int head_dim) {
  if (p.workspace == nullptr || base_ctas <= 0 || base_ctas > kSplitCounterElems) return 1;
  int splits = std::min(kMaxSplits, (2 * num_sms() + base_ctas - 1) / base_ctas);
  const int min_keys = min_keys_per_split();
  if (p.max_seq_len > 0) splits = std::min(splits, (p.max_seq_len + min_keys - 1) / min_keys);
  const int64_t per_split = static_cast<int64_t>(p.num_decode_reqs) * p.num_heads * (head_dim + 2);
  while (splits > 1 && kSplitCounterElems + per_split * splits > p.workspace_elems) --splits;
  return std::max(splits, 1);
}

// Pipeline depth: 2 (one step in flight while one is computed) measured faster than 3 and 4 on an H100 at batch
// 128 (bench/RESULTS.md): deeper stages cost shared memory and a longer prologue for these short per-CTA ranges.
constexpr int kPipelineStages = 2;

template <typename T, int HD, int GH, int KVH>
void launch_kernel(const PagedAttentionParams& p, int num_head_chunks, int splits, cudaStream_t stream) {
  constexpr int kSmem = DecodeShape<HD, GH, KVH, kPipelineStages>::kSmemBytes;
  const bool attr_set = once_per_device([] {
    return cudaFuncSetAttribute(decode_kernel<T, HD, GH, KVH, kPipelineStages>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem) == cudaSuccess;
  });
  CHECK(attr_set) << "decode_kernel: cannot get " << kSmem << " bytes of shared memory";
  dim3 grid(static_cast<unsigned>(p.num_kv_heads / KVH * num_head_chunks), static_cast<unsigned>(p.num_decode_reqs),
            static_cast<unsigned>(splits));
  CHECK(stream == cuda::stream()) << "decode_kernel: launch_pdl launches on the current stream";
  launch_pdl_smem("decode_kernel", decode_kernel<T, HD, GH, KVH, kPipelineStages>, grid, kDecodeThreads, kSmem, p,
                  num_head_chunks, min_keys_per_split(), pdl_early_reads() ? 1 : 0);
}

// Two kv heads per CTA halve the CTA count: worth it once one kv head per CTA needs more than one wave of the
// GPU (4 CTAs per SM at <= 128 registers), e.g. batch 128 x 8 kv heads: measured on an H100, S shape 38.2 -> 33.7
// us, M 63.2 -> 60.4 us at context 256. Never with split-K (which only runs below ~2 waves).
bool pair_kv_heads(const PagedAttentionParams& p, int gh, int num_head_chunks, int splits, int head_dim) {
  return splits == 1 && gh <= 4 && num_head_chunks == 1 && p.num_kv_heads % 2 == 0 && head_dim <= 128 &&
         p.num_decode_reqs * p.num_kv_heads > 4 * num_sms();
}

template <typename T, int HD, int GH>
void launch_kvh(const PagedAttentionParams& p, int num_head_chunks, int splits, bool pair, cudaStream_t stream) {
  if constexpr (GH <= 4 && HD <= 128) {
    if (pair) return launch_kernel<T, HD, GH, 2>(p, num_head_chunks, splits, stream);
  }
  launch_kernel<T, HD, GH, 1>(p, num_head_chunks, splits, stream);
}

}  // namespace

template <typename T, int HD>
void launch_decode(const PagedAttentionParams& p, cudaStream_t stream) {
  if (p.num_decode_reqs == 0) return;
  const int group = p.num_heads / p.num_kv_heads;
  // Groups of >= 4 heads on tensor cores once the batch fills the GPU without split-K (that kernel has none).
  if constexpr (HD == 64 || HD == 128) {
    if (group >= 4 && mma_decode_enabled() && choose_splits(p, static_cast<int>(mma_decode_ctas(p)), HD) == 1)
      return launch_decode_mma<T, HD>(p, stream);
  }
  // Heads per CTA: the smallest of 1, 2, 4, 8 covering the group (groups over 8 take several CTAs).
  int gh = group >= 8 ? 8 : group >= 4 ? (group == 4 ? 4 : 8) : group == 3 ? 4 : group;
  // Small batches: halve it (down to 2) while twice the CTAs still fit in one wave. A CTA's work there is one long
  // dependent chain (one warp per scheduler, every instruction waits its full latency) that grows with the heads it
  // keeps; more CTAs with fewer heads each read the group's K/V once per chunk, from L2. Nsight Compute, Qwen3-MoE
  // shape at batch 1 (32 / 4 heads, head_dim 128, GH 8): ~4,000 instructions per warp at ~4.2 cycles each, 13.4 us.
  while (gh > 2 && 2 * p.num_decode_reqs * p.num_kv_heads * ((group + gh - 1) / gh) <= num_sms()) gh /= 2;
  const int num_head_chunks = (group + gh - 1) / gh;
  const int splits = choose_splits(p, p.num_decode_reqs * p.num_kv_heads * num_head_chunks, HD);
  const bool pair = pair_kv_heads(p, gh, num_head_chunks, splits, HD);
  switch (gh) {
    case 1:
      return launch_kvh<T, HD, 1>(p, num_head_chunks, splits, pair, stream);
    case 2:
      return launch_kvh<T, HD, 2>(p, num_head_chunks, splits, pair, stream);
    case 4:
      return launch_kvh<T, HD, 4>(p, num_head_chunks, splits, pair, stream);
    default:
      return launch_kvh<T, HD, 8>(p, num_head_chunks, splits, pair, stream);
  }
}

#define LLMSERVE_DECODE(T, HD) template void launch_decode<T, HD>(const PagedAttentionParams&, cudaStream_t);
LLMSERVE_DECODE(__nv_bfloat16, 16)
LLMSERVE_DECODE(__nv_bfloat16, 32)
LLMSERVE_DECODE(__nv_bfloat16, 64)
LLMSERVE_DECODE(__nv_bfloat16, 128)
LLMSERVE_DECODE(__half, 16)
LLMSERVE_DECODE(__half, 32)
LLMSERVE_DECODE(__half, 64)
LLMSERVE_DECODE(__half, 128)
#undef LLMSERVE_DECODE

}  // namespace llmserve::cuda

// Paged decode attention (one query token per request), bf16 / f16, head_dim a template constant. One CTA owns
// up to GH query heads of one kv head (GQA: K/V read once for the group) over one split of the context; threads
// form groups of HD/8 lanes, each group streams its own keys with 16-byte loads and keeps an online softmax, and
// the groups merge through shared memory. With split-K the partial (max, sum, unnormalised output) go to the
// f32 workspace and a second kernel combines them. Invariant: every CTA of a request writes exactly its heads.
#include <algorithm>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_common.cuh"

namespace llmserve::cuda {
namespace {

constexpr int kDecodeThreads = 128;
constexpr int kMaxSplits = 32;  // also bounds the combine kernel's per-thread arrays
// One CTA step at head_dim 128: batch-1 decode is latency-bound, so more, shorter splits win (measured on an
// H100: context 2048 went from 52 to ~16 us per call with 32-key instead of 128-key splits, bench/RESULTS.md).
constexpr int kMinKeysPerSplit = 32;

template <typename T, int HD, int GH>
__global__ void __launch_bounds__(kDecodeThreads) decode_kernel(const PagedAttentionParams p, int num_head_chunks) {
  constexpr int kVec = 8;                         // 16 bytes of f16 / bf16
  constexpr int kTpk = HD / kVec;                 // threads per key
  constexpr int kGroups = kDecodeThreads / kTpk;  // keys in flight per CTA step, times kUnroll
  constexpr int kUnroll = GH >= 8 ? 2 : 4;
  static_assert(kTpk >= 1 && kTpk <= 32 && 32 % kTpk == 0, "head_dim must be 8..256, a power of two");
  __shared__ float sm_m[kGroups][GH], sm_l[kGroups][GH];
  __shared__ float sm_acc[GH][kGroups][HD];

  const int kv_head = blockIdx.x / num_head_chunks, chunk = blockIdx.x % num_head_chunks;
  const int r = blockIdx.y, split = blockIdx.z, num_splits = gridDim.z;
  const int group = p.num_heads / p.num_kv_heads;
  const int h_begin = kv_head * group + chunk * GH;
  const int gh = min(GH, group - chunk * GH);
  const int q_end = p.query_start_loc[r + 1];
  if (q_end <= p.query_start_loc[r]) return;  // empty request: nothing to write (combine skips it too)
  const int token = q_end - 1;
  const int seq = p.seq_lens[r];
  const int lo = p.sliding_window > 0 ? max(0, seq - p.sliding_window) : 0;
  // This split's keys: the request's range cut into num_splits near-equal pieces (any seq_len is covered).
  const int per = (seq - lo + num_splits - 1) / num_splits;
  const int start = lo + split * per, end = min(seq, start + per);

  const int tid = threadIdx.x, g = tid / kTpk, c = tid % kTpk;
  const T* query = static_cast<const T*>(p.query);
  float q[GH][kVec];
#pragma unroll
  for (int h = 0; h < GH; ++h) {
    if (h < gh) {
      const uint4 raw = load_chunk(query + token * p.query_row_stride + (h_begin + h) * HD + c * kVec);
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

  const T* kc = static_cast<const T*>(p.key_cache);
  const T* vc = static_cast<const T*>(p.value_cache);
  const int32_t* bt = p.block_table + r * p.block_table_stride;
  // The trip count is uniform over the CTA so the shuffles below always see full warps. (Prefetching the next
  // step's K/V before this step's math was measured slower at batch 128: +56 registers cost a CTA per SM.)
  for (int base = start; base < end; base += kGroups * kUnroll) {
    uint4 kr[kUnroll], vr[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = base + g * kUnroll + u;
      if (k < end) {
        const int64_t off = cache_offset(bt, k, p.block_size, p.num_kv_heads, kv_head, HD) + c * kVec;
        kr[u] = load_chunk(kc + off);
        vr[u] = load_chunk(vc + off);
      } else {
        kr[u] = make_uint4(0, 0, 0, 0);
        vr[u] = kr[u];
      }
    }
    float s[GH][kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kf[kVec];
      chunk_to_floats(kr[u], kf, T());
#pragma unroll
      for (int h = 0; h < GH; ++h) {
        float d = 0.f;
#pragma unroll
        for (int i = 0; i < kVec; ++i) d = fmaf(q[h][i], kf[i], d);
        s[h][u] = d;
      }
    }
#pragma unroll
    for (int h = 0; h < GH; ++h) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int o = kTpk / 2; o > 0; o >>= 1) s[h][u] += __shfl_xor_sync(0xffffffffu, s[h][u], o);
        if (base + g * kUnroll + u >= end) s[h][u] = -INFINITY;
      }
    }
    float vf[kUnroll][kVec];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) chunk_to_floats(vr[u], vf[u], T());
#pragma unroll
    for (int h = 0; h < GH; ++h) {
      float mx = m[h];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) mx = fmaxf(mx, s[h][u]);
      if (mx == -INFINITY) continue;  // no valid key yet for this group
      const float alpha = __expf(m[h] - mx);
      float pu[kUnroll];
      float psum = 0.f;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        pu[u] = __expf(s[h][u] - mx);
        psum += pu[u];
      }
      l[h] = l[h] * alpha + psum;
      m[h] = mx;
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        float a = acc[h][i] * alpha;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) a = fmaf(pu[u], vf[u][i], a);
        acc[h][i] = a;
      }
    }
  }

  // Merge the groups' states: global max per head, then rescaled sums.
#pragma unroll
  for (int h = 0; h < GH; ++h) {
    if (c == 0) {
      sm_m[g][h] = m[h];
      sm_l[g][h] = l[h];
    }
#pragma unroll
    for (int i = 0; i < kVec; ++i) sm_acc[h][g][c * kVec + i] = acc[h][i];
  }
  __syncthreads();
  T* out = static_cast<T*>(p.out);
  for (int e = tid; e < GH * HD; e += kDecodeThreads) {
    const int h = e / HD, d = e % HD;
    if (h >= gh) continue;
    float mx = -INFINITY;
    for (int j = 0; j < kGroups; ++j) mx = fmaxf(mx, sm_m[j][h]);
    float sum = 0.f, lsum = 0.f;
    if (mx != -INFINITY) {
      for (int j = 0; j < kGroups; ++j) {
        const float w = __expf(sm_m[j][h] - mx);
        sum += w * sm_acc[h][j][d];
        lsum += w * sm_l[j][h];
      }
    }
    const int head = h_begin + h;
    if (num_splits == 1) {
      out[token * p.out_row_stride + head * HD + d] = from_float<T>(lsum > 0.f ? sum / lsum : 0.f);
    } else {
      float* ws = p.workspace + ((static_cast<int64_t>(r) * p.num_heads + head) * num_splits + split) * (HD + 2);
      ws[d] = sum;
      if (d == 0) {
        ws[HD] = mx;
        ws[HD + 1] = lsum;
      }
    }
  }
}

// Combines the splits of one (request, head): out = sum_s w_s acc_s / sum_s w_s l_s, w_s = exp(m_s - max m).
template <typename T, int HD>
__global__ void __launch_bounds__(128) decode_combine_kernel(const PagedAttentionParams p, int num_splits) {
  const int r = blockIdx.x, head = blockIdx.y;
  const int q_end = p.query_start_loc[r + 1];
  if (q_end <= p.query_start_loc[r]) return;
  const float* ws = p.workspace + (static_cast<int64_t>(r) * p.num_heads + head) * num_splits * (HD + 2);
  float w[kMaxSplits];
  float mx = -INFINITY;
  for (int s = 0; s < num_splits; ++s) mx = fmaxf(mx, ws[s * (HD + 2) + HD]);
  float lsum = 0.f;
#pragma unroll
  for (int s = 0; s < kMaxSplits; ++s) {
    w[s] = (s < num_splits && mx != -INFINITY) ? __expf(ws[s * (HD + 2) + HD] - mx) : 0.f;
    if (s < num_splits) lsum += w[s] * ws[s * (HD + 2) + HD + 1];
  }
  T* out = static_cast<T*>(p.out) + (q_end - 1) * p.out_row_stride + head * HD;
  for (int d = threadIdx.x; d < HD; d += blockDim.x) {
    float sum = 0.f;
#pragma unroll
    for (int s = 0; s < kMaxSplits; ++s)
      if (s < num_splits) sum += w[s] * ws[s * (HD + 2) + d];
    out[d] = from_float<T>(lsum > 0.f ? sum / lsum : 0.f);
  }
}

int num_sms() {
  static const int n = [] {
    int dev = 0, count = 0;
    CHECK(cudaGetDevice(&dev) == cudaSuccess);
    CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess);
    return count;
  }();
  return n;
}

// Splits per request: enough CTAs for ~2 waves of the GPU, each split >= kMinKeysPerSplit keys (by the
// max_seq_len hint), and only as many as the workspace holds. Depends only on host-known sizes (graph-safe).
int choose_splits(const PagedAttentionParams& p, int base_ctas, int head_dim) {
  if (p.workspace == nullptr || base_ctas <= 0) return 1;
  int splits = std::min(kMaxSplits, (2 * num_sms() + base_ctas - 1) / base_ctas);
  if (p.max_seq_len > 0) splits = std::min(splits, (p.max_seq_len + kMinKeysPerSplit - 1) / kMinKeysPerSplit);
  const int64_t per_split = static_cast<int64_t>(p.num_decode_reqs) * p.num_heads * (head_dim + 2);
  while (splits > 1 && per_split * splits > p.workspace_elems) --splits;
  return std::max(splits, 1);
}

template <typename T, int HD, int GH>
void launch_gh(const PagedAttentionParams& p, int num_head_chunks, int splits, cudaStream_t stream) {
  dim3 grid(static_cast<unsigned>(p.num_kv_heads * num_head_chunks), static_cast<unsigned>(p.num_decode_reqs),
            static_cast<unsigned>(splits));
  decode_kernel<T, HD, GH><<<grid, kDecodeThreads, 0, stream>>>(p, num_head_chunks);
  check_launch("decode_kernel");
}

}  // namespace

template <typename T, int HD>
void launch_decode(const PagedAttentionParams& p, cudaStream_t stream) {
  if (p.num_decode_reqs == 0) return;
  const int group = p.num_heads / p.num_kv_heads;
  // Heads per CTA: the smallest of 1, 2, 4, 8 covering the group (groups over 8 take several CTAs).
  const int gh = group >= 8 ? 8 : group >= 4 ? (group == 4 ? 4 : 8) : group == 3 ? 4 : group;
  const int num_head_chunks = (group + gh - 1) / gh;
  const int splits = choose_splits(p, p.num_decode_reqs * p.num_kv_heads * num_head_chunks, HD);
  switch (gh) {
    case 1:
      launch_gh<T, HD, 1>(p, num_head_chunks, splits, stream);
      break;
    case 2:
      launch_gh<T, HD, 2>(p, num_head_chunks, splits, stream);
      break;
    case 4:
      launch_gh<T, HD, 4>(p, num_head_chunks, splits, stream);
      break;
    default:
      launch_gh<T, HD, 8>(p, num_head_chunks, splits, stream);
      break;
  }
  if (splits > 1) {
    dim3 grid(static_cast<unsigned>(p.num_decode_reqs), static_cast<unsigned>(p.num_heads));
    decode_combine_kernel<T, HD><<<grid, 128, 0, stream>>>(p, splits);
    check_launch("decode_combine_kernel");
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

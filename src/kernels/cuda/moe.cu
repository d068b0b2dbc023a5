// The mixture-of-experts ops on CUDA around the grouped GEMM (ops.h; its kernels are in moe_gemm.cu), matching
// kernels/cpu/moe.cc: the router (one warp per token), the stable grouping by expert (one block: shared-memory
// counts, a block scan of the padded counts, then one warp places pairs in ascending order with __match_any_sync), both
// in one block for decode batches (moe_route_and_align), and the weighted combine. No host synchronisation, no
// allocation (graph-safe); launched with programmatic dependent launch: each kernel waits for its inputs before
// reading or writing anything, so only launch gaps overlap.
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/moe_combine.cuh"

namespace llmserve::cuda {
namespace {

// ---- router ----

constexpr int kRouteWarps = 4;  // tokens per block
static_assert(ops::kMaxMoeTopK <= 32, "the routers keep choice j in lane j");

template <typename T>
__global__ void __launch_bounds__(kRouteWarps * 32)
    moe_route_kernel(float* weights, int64_t weights_stride, int32_t* ids, int64_t ids_stride, const T* logits,
                     int64_t logits_stride, int64_t num_tokens, int num_experts, int k, int scoring, int renormalize) {
  __shared__ float scores[kRouteWarps][ops::kMaxMoeExperts];
  pdl_wait();  // the logits come from the router's linear
  pdl_trigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarps + warp;
  if (t >= num_tokens) return;  // whole warps leave: the kernel has no block-wide barrier
  const T* l = logits + t * logits_stride;
  float* s = scores[warp];
  if (scoring == ops::kMoeScoringSoftmax) {
    float max = -INFINITY;
    for (int e = lane; e < num_experts; e += 32) {
      s[e] = load_f(l + e);
      max = fmaxf(max, s[e]);
    }
    for (int o = 16; o > 0; o >>= 1) max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, o));
    float sum = 0.f;
    for (int e = lane; e < num_experts; e += 32) {
      s[e] = expf(s[e] - max);
      sum += s[e];
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    for (int e = lane; e < num_experts; e += 32) s[e] = s[e] / sum;
  } else {
    for (int e = lane; e < num_experts; e += 32) s[e] = 1.f / (1.f + expf(-load_f(l + e)));
  }
  __syncwarp();
  uint32_t taken = 0;  // bit i: expert lane + 32 i already chosen
  float total = 0.f;
  int my_id = 0;  // lane j keeps choice j (k <= 32): one coalesced store at the end, not k dependent ones
  float my_weight = 0.f;
  for (int j = 0; j < k; ++j) {
    uint64_t best = 0;
    for (int e = lane, i = 0; e < num_experts; e += 32, ++i) {
      const uint64_t key = (taken >> i) & 1u ? 0 : rank_key(s[e], e);
      best = key > best ? key : best;
    }
    for (int o = 16; o > 0; o >>= 1) {
      const uint64_t other = __shfl_xor_sync(0xffffffffu, best, o);
      best = other > best ? other : best;
    }
    const int chosen = key_id(best);
    const float value = s[chosen];
    if (chosen % 32 == lane) taken |= 1u << (chosen / 32);
    if (lane == j) {
      my_id = chosen;
      my_weight = value;
    }
    total += value;
  }
  if (lane < k) {
    ids[t * ids_stride + lane] = my_id;
    weights[t * weights_stride + lane] = renormalize != 0 ? my_weight / total : my_weight;
  }
}

// The same routing with one block per token and one thread per expert, for small batches: each thread counts the
// experts that rank above its own (the same (value, id) keys), so the top-k takes one pass over the scores instead of
// k dependent warp reductions (Nsight Compute, 128 experts, top-8, one token: moe_route_kernel ran ~2,100 dependent
// instructions per warp, 7.2 us). Warp 0 reduces the softmax exactly as moe_route_kernel's warp does and the
// renormalising sum runs in rank order as there: both kernels give the same bits, whatever the batch. Here: token t
// by the whole block (blockDim.x >= max(num_experts, 32)); a caller routing several tokens in turn puts a barrier
// between them (the last reads of s, keys and chosen are at the end).
template <typename T>
__device__ void route_rank_token(float* weights, int64_t weights_stride, int32_t* ids, int64_t ids_stride,
                                 const T* logits, int64_t logits_stride, int num_experts, int k, int scoring,
                                 int renormalize, int64_t t) {
  __shared__ float s[ops::kMaxMoeExperts];
  __shared__ uint64_t keys[ops::kMaxMoeExperts];
  __shared__ float chosen[ops::kMaxMoeTopK];
  __shared__ float softmax_max, softmax_sum;
  const int e = threadIdx.x, lane = e % 32;
  const T* l = logits + t * logits_stride;
  float value = 0.f;
  if (scoring == ops::kMoeScoringSoftmax) {
    if (e < num_experts) s[e] = load_f(l + e);
    __syncthreads();
    if (e < 32) {  // moe_route_kernel's reductions, lane for lane
      float max = -INFINITY;
      for (int i = lane; i < num_experts; i += 32) max = fmaxf(max, s[i]);
      for (int o = 16; o > 0; o >>= 1) max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, o));
      float sum = 0.f;
      for (int i = lane; i < num_experts; i += 32) sum += expf(s[i] - max);
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      if (lane == 0) {
        softmax_max = max;
        softmax_sum = sum;
      }
    }
    __syncthreads();
    if (e < num_experts) value = expf(s[e] - softmax_max) / softmax_sum;
  } else if (e < num_experts) {
    value = 1.f / (1.f + expf(-load_f(l + e)));
  }
  const uint64_t mine = e < num_experts ? rank_key(value, e) : 0;
  keys[e] = mine;
  __syncthreads();
  if (e < num_experts) {
    int above = 0;
    for (int i = 0; i < num_experts; ++i) above += keys[i] > mine ? 1 : 0;
    if (above < k) {
      ids[t * ids_stride + above] = e;
      chosen[above] = value;
    }
  }
  __syncthreads();
  if (e < k) {
    float total = 0.f;
    for (int j = 0; j < k; ++j) total += chosen[j];
    weights[t * weights_stride + e] = renormalize != 0 ? chosen[e] / total : chosen[e];
  }
}

template <typename T>
__global__ void __launch_bounds__(ops::kMaxMoeExperts)
    moe_route_rank_kernel(float* weights, int64_t weights_stride, int32_t* ids, int64_t ids_stride, const T* logits,
                          int64_t logits_stride, int num_experts, int k, int scoring, int renormalize) {
  pdl_wait();  // the logits come from the router's linear
  pdl_trigger();
  route_rank_token(weights, weights_stride, ids, ids_stride, logits, logits_stride, num_experts, k, scoring,
                   renormalize, blockIdx.x);
}

// Tokens up to which moe_route runs one block per token (decode batches); larger batches one warp per token.
constexpr int64_t kRouteRankMaxTokens = 256;

void moe_route(Tensor& topk_weights, Tensor& topk_ids, const Tensor& router_logits, int64_t scoring,
               int64_t renormalize) {
  const int64_t num_tokens = router_logits.size(0), num_experts = router_logits.size(1);
  if (num_tokens == 0) return;
  if (num_tokens <= kRouteRankMaxTokens) {
    dispatch_float(router_logits.dtype(), "moe_route", [&](auto tag) {
      using T = decltype(tag);
      launch_pdl("moe_route_rank_kernel", moe_route_rank_kernel<T>, static_cast<unsigned>(num_tokens),
                 static_cast<unsigned>((std::max<int64_t>(num_experts, 32) + 31) / 32 * 32),
                 topk_weights.data<float>(), topk_weights.stride(0), topk_ids.data<int32_t>(), topk_ids.stride(0),
                 router_logits.data<T>(), router_logits.stride(0), static_cast<int>(num_experts),
                 static_cast<int>(topk_ids.size(1)), static_cast<int>(scoring), static_cast<int>(renormalize));
    });
    return;
  }
  dispatch_float(router_logits.dtype(), "moe_route", [&](auto tag) {
    using T = decltype(tag);
    launch_pdl("moe_route_kernel", moe_route_kernel<T>, ceil_div(num_tokens, kRouteWarps), kRouteWarps * 32,
               topk_weights.data<float>(), topk_weights.stride(0), topk_ids.data<int32_t>(), topk_ids.stride(0),
               router_logits.data<T>(), router_logits.stride(0), num_tokens, static_cast<int>(router_logits.size(1)),
               static_cast<int>(topk_ids.size(1)), static_cast<int>(scoring), static_cast<int>(renormalize));
  });
}

// DeepSeek-V3's group-limited routing: one warp per token; lane g scores group g (its two best choice values), the
// warp keeps the topk_groups best groups, then picks the top-k experts of those groups as moe_route does.
template <typename T>
__global__ void __launch_bounds__(kRouteWarps * 32)
    moe_route_grouped_kernel(float* weights, int64_t weights_stride, int32_t* ids, int64_t ids_stride, const T* logits,
                             int64_t logits_stride, const float* bias, int64_t num_tokens, int num_experts, int k,
                             int num_groups, int topk_groups, int renormalize, float routed_scaling_factor) {
  __shared__ float scores[kRouteWarps][ops::kMaxMoeExperts];
  __shared__ float choice[kRouteWarps][ops::kMaxMoeExperts];
  pdl_wait();  // the logits come from the router's linear
  pdl_trigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarps + warp;
  if (t >= num_tokens) return;  // whole warps leave: no block-wide barrier follows
  const T* l = logits + t * logits_stride;
  float* s = scores[warp];
  float* c = choice[warp];
  for (int e = lane; e < num_experts; e += 32) {
    s[e] = 1.f / (1.f + expf(-load_f(l + e)));
    c[e] = s[e] + bias[e];
  }
  __syncwarp();
  const int group_size = num_experts / num_groups;
  uint64_t group_key = 0;  // lanes past num_groups stay 0: never chosen
  if (lane < num_groups) {
    const float* g = c + lane * group_size;
    float first = g[0], second = g[1];
    uint64_t first_key = rank_key(first, 0), second_key = rank_key(second, 1);
    if (second_key > first_key) {
      const float v = first;
      first = second;
      second = v;
      const uint64_t key = first_key;
      first_key = second_key;
      second_key = key;
    }
    for (int i = 2; i < group_size; ++i) {
      const uint64_t key = rank_key(g[i], i);
      if (key > first_key) {
        second = first;
        second_key = first_key;
        first = g[i];
        first_key = key;
      } else if (key > second_key) {
        second = g[i];
        second_key = key;
      }
    }
    group_key = rank_key(first + second, lane);
  }
  uint32_t kept = 0;  // bit g: group g kept
  for (int i = 0; i < topk_groups; ++i) {
    uint64_t best = (kept >> lane) & 1u ? 0 : group_key;
    for (int o = 16; o > 0; o >>= 1) {
      const uint64_t other = __shfl_xor_sync(0xffffffffu, best, o);
      best = other > best ? other : best;
    }
    kept |= 1u << key_id(best);
  }
  uint32_t taken = 0;
  float total = 0.f;
  int my_id = 0;  // lane j keeps choice j, as moe_route_kernel
  float my_weight = 0.f;
  for (int j = 0; j < k; ++j) {
    uint64_t best = 0;
    for (int e = lane, i = 0; e < num_experts; e += 32, ++i) {
      const bool open = !((taken >> i) & 1u) && ((kept >> (e / group_size)) & 1u);
      const uint64_t key = open ? rank_key(c[e], e) : 0;
      best = key > best ? key : best;
    }
    for (int o = 16; o > 0; o >>= 1) {
      const uint64_t other = __shfl_xor_sync(0xffffffffu, best, o);
      best = other > best ? other : best;
    }
    const int chosen = key_id(best);
    const float value = s[chosen];
    if (chosen % 32 == lane) taken |= 1u << (chosen / 32);
    if (lane == j) {
      my_id = chosen;
      my_weight = value;
    }
    total += value;
  }
  if (lane < k) {
    float v = my_weight;
    if (renormalize != 0) v /= total + 1e-20f;
    ids[t * ids_stride + lane] = my_id;
    weights[t * weights_stride + lane] = v * routed_scaling_factor;
  }
}

void moe_route_grouped(Tensor& topk_weights, Tensor& topk_ids, const Tensor& router_logits,
                       const Tensor& correction_bias, int64_t num_groups, int64_t topk_groups, int64_t renormalize,
                       float routed_scaling_factor) {
  const int64_t num_tokens = router_logits.size(0);
  if (num_tokens == 0) return;
  dispatch_float(router_logits.dtype(), "moe_route_grouped", [&](auto tag) {
    using T = decltype(tag);
    launch_pdl("moe_route_grouped_kernel", moe_route_grouped_kernel<T>, ceil_div(num_tokens, kRouteWarps),
               kRouteWarps * 32, topk_weights.data<float>(), topk_weights.stride(0), topk_ids.data<int32_t>(),
               topk_ids.stride(0), router_logits.data<T>(), router_logits.stride(0), correction_bias.data<float>(),
               num_tokens, static_cast<int>(router_logits.size(1)), static_cast<int>(topk_ids.size(1)),
               static_cast<int>(num_groups), static_cast<int>(topk_groups), static_cast<int>(renormalize),
               routed_scaling_factor);
  });
}

// ---- alignment ----

constexpr int kAlignThreads = 1024;  // >= kMaxMoeExperts: one expert per thread in the scan
static_assert(kAlignThreads >= ops::kMaxMoeExperts, "moe_align scans one expert per thread");

// Shared memory of the per-chunk table: [chunks][num_experts] ints, 32 KB: with the scan's static shared memory within
// the 48 KB a launch gets without opting in.
constexpr int kAlignTableInts = 8 * 1024;

// blockDim.x: a multiple of 32, >= num_experts, <= kAlignThreads. The pairs are cut into `chunks` contiguous ranges
// (chunks <= blockDim.x / 32, chunks x num_experts <= kAlignTableInts), one warp each, which walks its range in pair
// order twice: first counting its pairs per expert, then, from its own cursor per expert (the expert's offset plus
// the earlier chunks' counts), placing them. Rows therefore keep ascending pair order within each expert, and each
// warp's serial walk is num_pairs / chunks long (one warp over every pair took ~150 us at 2048 tokens x 8).
// chunk_table: [chunks][num_experts] ints of shared memory (counts, then cursors).
__device__ void align_pairs(int32_t* sorted_pairs, int32_t* pair_rows, int32_t* expert_offsets,
                            int64_t* experts_touched, const int32_t* topk_ids, int num_pairs, int num_experts,
                            int block, int chunks, int* chunk_table) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (int i = tid; i < chunks * num_experts; i += blockDim.x) chunk_table[i] = 0;
  __syncthreads();
  const int per_chunk = (num_pairs + chunks - 1) / chunks;
  const int chunk_begin = warp * per_chunk, chunk_end = min(num_pairs, chunk_begin + per_chunk);
  int* mine = chunk_table + warp * num_experts;
  // Walks this warp's chunk 32 pairs at a time; f(p, e, same-expert lane mask, rank among them) for each valid pair.
  auto walk = [&](auto&& f) {
    if (warp >= chunks) return;
    for (int base = chunk_begin; base < chunk_end; base += 32) {
      const int p = base + lane;
      const bool valid = p < chunk_end;
      const int e = valid ? topk_ids[p] : -1;
      const unsigned same = __match_any_sync(0xffffffffu, e);
      const int rank = __popc(same & ((1u << lane) - 1u));
      if (valid) f(p, e, same, rank);
      __syncwarp();
      if (valid && __ffs(same) - 1 == lane) mine[e] += __popc(same);  // one lane per expert: no atomics
      __syncwarp();
    }
  };
  walk([&](int, int e, unsigned, int) { device_check(e >= 0 && e < num_experts); });
  __syncthreads();
  int count = 0;
  if (tid < num_experts) {
    for (int c = 0; c < chunks; ++c) count += chunk_table[c * num_experts + tid];
  }
  const int touched = __syncthreads_count(tid < num_experts && count > 0);
  if (tid == 0) *experts_touched += touched;  // one block: no other writer
  const int padded = (count + block - 1) / block * block;
  int total = 0;
  const int start = block_exclusive_scan<int>(padded, &total);
  if (tid < num_experts) {
    expert_offsets[tid] = start;
    for (int c = 0, cursor = start; c < chunks; ++c) {  // counts become each chunk's first row of this expert
      const int n = chunk_table[c * num_experts + tid];
      chunk_table[c * num_experts + tid] = cursor;
      cursor += n;
    }
  }
  if (tid == 0) expert_offsets[num_experts] = total;
  for (int r = tid; r < total; r += blockDim.x) sorted_pairs[r] = -1;
  __syncthreads();
  walk([&](int p, int e, unsigned, int rank) {
    const int r = mine[e] + rank;
    sorted_pairs[r] = p;
    pair_rows[p] = r;
  });
}

__global__ void __launch_bounds__(kAlignThreads)
    moe_align_kernel(int32_t* sorted_pairs, int32_t* pair_rows, int32_t* expert_offsets, int64_t* experts_touched,
                     const int32_t* topk_ids, int num_pairs, int num_experts, int block, int chunks) {
  extern __shared__ int chunk_table[];
  pdl_wait();  // the ids come from the router
  pdl_trigger();
  align_pairs(sorted_pairs, pair_rows, expert_offsets, experts_touched, topk_ids, num_pairs, num_experts, block, chunks,
              chunk_table);
}

// moe_route_and_align for a few tokens: the block routes them one after another (route_rank_token), then groups
// their pairs (align_pairs) once the ids it wrote are visible to all of its threads (__syncthreads orders global
// memory within a block). blockDim.x: a multiple of 32 >= max(num_experts, num_pairs, 32).
template <typename T>
__global__ void __launch_bounds__(kAlignThreads)
    moe_route_align_kernel(float* weights, int64_t weights_stride, int32_t* ids, const T* logits, int64_t logits_stride,
                           int num_tokens, int num_experts, int k, int scoring, int renormalize, int32_t* sorted_pairs,
                           int32_t* pair_rows, int32_t* expert_offsets, int64_t* experts_touched, int block,
                           int chunks) {
  extern __shared__ int chunk_table[];
  pdl_wait();  // the logits come from the router's linear
  pdl_trigger();
  for (int t = 0; t < num_tokens; ++t) {  // ids: contiguous [T, k] (moe_align's check)
    route_rank_token(weights, weights_stride, ids, k, logits, logits_stride, num_experts, k, scoring, renormalize, t);
    __syncthreads();  // the next token's routing reuses the shared scores; align_pairs reads every token's ids
  }
  align_pairs(sorted_pairs, pair_rows, expert_offsets, experts_touched, ids, num_tokens * k, num_experts, block, chunks,
              chunk_table);
}

// As few threads as the experts and pairs use (decode: barriers over 128 threads, not 1024).
int64_t align_threads(int64_t num_pairs, int64_t num_experts) {
  return std::min<int64_t>(kAlignThreads, (std::max({num_pairs, num_experts, int64_t{32}}) + 31) / 32 * 32);
}
// Chunks of align_pairs' table for `threads` threads, the table at most table_ints ints.
int64_t align_chunks(int64_t threads, int64_t num_experts, int64_t table_ints) {
  return std::max<int64_t>(1, std::min<int64_t>(threads / 32, table_ints / num_experts));
}

void moe_align(Tensor& sorted_pairs, Tensor& pair_rows, Tensor& expert_offsets, Tensor& experts_touched,
               const Tensor& topk_ids, int64_t block) {
  const int64_t num_pairs = topk_ids.numel(), num_experts = expert_offsets.size(0) - 1;
  const int64_t threads = align_threads(num_pairs, num_experts);
  const int64_t chunks = align_chunks(threads, num_experts, kAlignTableInts);
  launch_pdl_smem("moe_align_kernel", moe_align_kernel, 1, static_cast<unsigned>(threads),
                  static_cast<size_t>(chunks * num_experts) * sizeof(int), sorted_pairs.data<int32_t>(),
                  pair_rows.data<int32_t>(), expert_offsets.data<int32_t>(), experts_touched.data<int64_t>(),
                  topk_ids.data<int32_t>(), static_cast<int>(num_pairs), static_cast<int>(num_experts),
                  static_cast<int>(block), static_cast<int>(chunks));
}

void moe_route_and_align(Tensor& topk_weights, Tensor& topk_ids, const Tensor& router_logits, int64_t scoring,
                         int64_t renormalize, Tensor& sorted_pairs, Tensor& pair_rows, Tensor& expert_offsets,
                         Tensor& experts_touched, int64_t block) {
  const int64_t num_tokens = router_logits.size(0), num_experts = router_logits.size(1), k = topk_ids.size(1);
  if (num_tokens == 0 || num_tokens > ops::kMoeRouteAlignMaxTokens) {
    moe_route(topk_weights, topk_ids, router_logits, scoring, renormalize);
    moe_align(sorted_pairs, pair_rows, expert_offsets, experts_touched, topk_ids, block);
    return;
  }
  const int64_t num_pairs = num_tokens * k, threads = align_threads(num_pairs, num_experts);
  // The routing's static shared memory (12 KB at 1024 experts) beside the table: within the 48 KB of a plain launch.
  const int64_t chunks = align_chunks(threads, num_experts, kAlignTableInts / 2);
  dispatch_float(router_logits.dtype(), "moe_route_and_align", [&](auto tag) {
    using T = decltype(tag);
    launch_pdl_smem("moe_route_align_kernel", moe_route_align_kernel<T>, 1, static_cast<unsigned>(threads),
                    static_cast<size_t>(chunks * num_experts) * sizeof(int), topk_weights.data<float>(),
                    topk_weights.stride(0), topk_ids.data<int32_t>(), router_logits.data<T>(), router_logits.stride(0),
                    static_cast<int>(num_tokens), static_cast<int>(num_experts), static_cast<int>(k),
                    static_cast<int>(scoring), static_cast<int>(renormalize), sorted_pairs.data<int32_t>(),
                    pair_rows.data<int32_t>(), expert_offsets.data<int32_t>(), experts_touched.data<int64_t>(),
                    static_cast<int>(block), static_cast<int>(chunks));
  });
}

// ---- combine ----

constexpr int kCombineThreads = 256;

// V adjacent columns per thread: 8 (16-byte loads of 16-bit rows) where every row is aligned, else 1. The 2-byte
// scalar form ran a 2048-token Qwen3-MoE combine at ~50% of the copy bandwidth. Same sums in the same order.
template <int V, typename T>
__device__ __forceinline__ void store_cols(T* p, const float (&f)[V]) {
  if constexpr (V == 8) {
    store8(p, f);
  } else {
    store_f(p, f[0]);
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(kCombineThreads)
    moe_combine_kernel(T* out, int64_t out_stride, const T* expert_out, int64_t expert_stride, const float* weights,
                       int64_t weights_stride, const int32_t* pair_rows, const T* shared_out, int64_t shared_stride,
                       const T* shared_gate, int64_t gate_stride, int64_t hidden, int k) {
  __shared__ float w[ops::kMaxMoeTopK];
  __shared__ int64_t rows[ops::kMaxMoeTopK];
  pdl_wait();  // the expert outputs come from the down projection
  pdl_trigger();
  const int64_t t = blockIdx.x;
  if (threadIdx.x < k) {
    w[threadIdx.x] = weights[t * weights_stride + threadIdx.x];
    rows[threadIdx.x] = pair_rows[t * k + threadIdx.x];
  }
  __syncthreads();
  const float shared_scale = moe_shared_scale(shared_gate != nullptr ? shared_gate + t * gate_stride : nullptr);
  const T* shared_row = shared_out != nullptr ? shared_out + t * shared_stride : nullptr;
  for (int64_t h = (static_cast<int64_t>(blockIdx.y) * kCombineThreads + threadIdx.x) * V; h < hidden;
       h += static_cast<int64_t>(gridDim.y) * kCombineThreads * V) {
    float acc[V];
    moe_combine_cols<V>(acc, expert_out, expert_stride, w, rows, k, shared_row, shared_scale, h);
    store_cols<V>(out + t * out_stride + h, acc);
  }
}

void moe_combine(Tensor& out, const Tensor& expert_out, const Tensor& topk_weights, const Tensor& pair_rows,
                 const Tensor* shared_out, const Tensor* shared_gate) {
  const int64_t num_tokens = out.size(0), hidden = out.size(1);
  if (num_tokens == 0 || hidden == 0) return;
  dispatch_float(out.dtype(), "moe_combine", [&](auto tag) {
    using T = decltype(tag);
    const bool vec = hidden % 8 == 0 && out.stride(0) % 8 == 0 && expert_out.stride(0) % 8 == 0 &&
                     aligned16(out.raw_data()) && aligned16(expert_out.raw_data()) &&
                     (shared_out == nullptr || (shared_out->stride(0) % 8 == 0 && aligned16(shared_out->raw_data())));
    auto run = [&](auto cols) {
      constexpr int V = decltype(cols)::value;
      const dim3 grid(static_cast<unsigned>(num_tokens), std::min<unsigned>(ceil_div(hidden / V, kCombineThreads), 8));
      launch_pdl("moe_combine_kernel", moe_combine_kernel<T, V>, grid, kCombineThreads, out.data<T>(), out.stride(0),
                 expert_out.data<T>(), expert_out.stride(0), topk_weights.data<float>(), topk_weights.stride(0),
                 pair_rows.data<int32_t>(), shared_out != nullptr ? shared_out->data<T>() : nullptr,
                 shared_out != nullptr ? shared_out->stride(0) : 0,
                 shared_gate != nullptr ? shared_gate->data<T>() : nullptr,
                 shared_gate != nullptr ? shared_gate->stride(0) : 0, hidden, static_cast<int>(topk_weights.size(1)));
    };
    if (vec) {
      run(std::integral_constant<int, 8>{});
    } else {
      run(std::integral_constant<int, 1>{});
    }
  });
}

}  // namespace

void register_moe_kernels() {
  ops::moe_route.register_kernel(DeviceType::kCUDA, moe_route);
  ops::moe_route_grouped.register_kernel(DeviceType::kCUDA, moe_route_grouped);
  ops::moe_align.register_kernel(DeviceType::kCUDA, moe_align);
  ops::moe_route_and_align.register_kernel(DeviceType::kCUDA, moe_route_and_align);
  ops::moe_combine.register_kernel(DeviceType::kCUDA, moe_combine);
}

}  // namespace llmserve::cuda

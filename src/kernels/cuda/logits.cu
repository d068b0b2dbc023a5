// Logit kernels on CUDA (f32 rows, row-strided): log_softmax, argmax, top-k (radix selection) and the sampled
// token's logprob and rank. One block per row (top-k: a cluster of blocks per row while rows are few). Rankings
// follow the CPU ops exactly: larger value first, ties to the lower id, NaN below every number (a 64-bit key
// (value key, ~id) makes that one unsigned comparison).
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/radix.cuh"

namespace llmserve::cuda {
namespace {

constexpr int kThreads = 1024;

__global__ void log_softmax_kernel(float* out, int64_t out_stride, const float* logits, int64_t in_stride,
                                   int64_t vocab) {
  const float* x = logits + blockIdx.x * in_stride;
  float* o = out + blockIdx.x * out_stride;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = block_max(mx);
  // A NaN anywhere makes the CPU's max NaN-free but its sum NaN; fmaxf skips NaN and expf(NaN) propagates it.
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) sum += expf(x[j] - mx);
  sum = block_sum(sum);
  const float lse = mx + logf(sum);
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) o[j] = x[j] - lse;
}

__global__ void argmax_kernel(int32_t* out, const float* logits, int64_t stride, int64_t vocab) {
  const int32_t id = block_argmax(logits + blockIdx.x * stride, vocab);
  if (threadIdx.x == 0) out[blockIdx.x] = id;
}

// Value key of the ranking: NaN below every number (key 1; numbers and infinities are >= 0x007fffff).
__device__ __forceinline__ uint32_t value_key(float v) { return isnan(v) ? 1u : float_key(v); }

// Top-k by radix selection: the k-th largest value key, then the keys above it (fewer than k) and the
// lowest-id ties at it, then a rank-by-counting sort of those k in shared memory. Six passes over the row, split
// over a group of blocks when rows are few (row_group.cuh): every block adds its picks to rank 0's list.
template <typename G>
__global__ void __launch_bounds__(kThreads)
    top_k_kernel(float* values, int64_t v_stride, int32_t* ids, int64_t i_stride, const float* logits, int64_t stride,
                 int64_t vocab, int k) {
  __shared__ RadixSelectState s;
  __shared__ uint64_t picked[kMaxTopK];
  __shared__ uint32_t num_picked;
  __shared__ uint32_t ties_slot;
  const G g;
  const int row = static_cast<int>(blockIdx.x) / g.size();
  const int64_t slice = (vocab + g.size() - 1) / g.size();
  const int64_t lo = min(vocab, g.rank() * slice), hi = min(vocab, lo + slice);
  const float* x = logits + row * stride;
  auto key_of = [&](int64_t j, uint32_t* key) {
    *key = value_key(x[j]);
    return true;
  };
  uint32_t kth = 0, needed = 0;
  radix_select(g, lo, hi, static_cast<uint32_t>(k), key_of, s, &kth, &needed);  // k <= vocab: always found
  if (threadIdx.x == 0) num_picked = 0;
  g.sync();  // rank 0's list is empty before any block adds to it
  uint64_t* const list = g.at(picked, 0);
  uint32_t* const list_size = g.at(&num_picked, 0);
  for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
    const float v = x[j];
    if (value_key(v) > kth) list[atomicAdd(list_size, 1u)] = rank_key(v, j);
  }
  // The first `needed` ties at the k-th key in id order: threads own contiguous id ranges of the block's slice,
  // and the ties of the lower ranks' slices come first.
  const int64_t chunk = (hi - lo + blockDim.x - 1) / blockDim.x;
  const int64_t begin = lo + threadIdx.x * chunk, end = min(hi, begin + chunk);
  uint32_t mine = 0;
  for (int64_t j = begin; j < end; ++j) mine += value_key(x[j]) == kth;
  uint32_t block_ties;
  uint32_t rank = block_exclusive_scan<uint32_t>(mine, &block_ties);
  if (threadIdx.x == 0) ties_slot = block_ties;
  g.sync();
  for (int r = 0; r < g.rank(); ++r) rank += *g.at(&ties_slot, r);
  for (int64_t j = begin; j < end && rank < needed; ++j) {
    if (value_key(x[j]) != kth) continue;
    list[atomicAdd(list_size, 1u)] = rank_key(x[j], j);
    ++rank;
  }
  g.sync();  // every block's picks are in rank 0's list
  if (g.rank() != 0) return;
  if (threadIdx.x < k) {  // picked holds exactly k distinct keys: each one's position is how many rank above it
    const uint64_t me = picked[threadIdx.x];
    int position = 0;
    for (int i = 0; i < k; ++i) position += picked[i] > me;
    const int32_t id = key_id(me);
    ids[row * i_stride + position] = id;
    values[row * v_stride + position] = x[id];
  }
}

__global__ void gather_logprobs_kernel(float* out_logprobs, int32_t* out_ranks, const float* logprobs, int64_t stride,
                                       const int32_t* token_ids, int64_t vocab) {
  const float* x = logprobs + blockIdx.x * stride;
  const int32_t id = token_ids[blockIdx.x];
  device_check(id >= 0 && id < vocab);
  const float value = x[id];
  float count = 0.f;  // exact: at most 2^24 per thread
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) count += x[j] >= value ? 1.f : 0.f;
  const int64_t rank = static_cast<int64_t>(block_sum_t<double>(count));
  if (threadIdx.x == 0) {
    out_logprobs[blockIdx.x] = value;
    out_ranks[blockIdx.x] = static_cast<int32_t>(rank);
  }
}

}  // namespace

void log_softmax(Tensor& out, const Tensor& logits) {
  const int64_t n = logits.size(0), vocab = logits.size(1);
  if (n == 0 || vocab == 0) return;
  log_softmax_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream()>>>(
      out.data<float>(), out.stride(0), logits.data<float>(), logits.stride(0), vocab);
  check_launch("log_softmax_kernel");
}

void argmax(Tensor& out_ids, const Tensor& logits) {
  const int64_t n = logits.size(0), vocab = logits.size(1);
  if (n == 0) return;
  argmax_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream()>>>(out_ids.data<int32_t>(), logits.data<float>(),
                                                                     logits.stride(0), vocab);
  check_launch("argmax_kernel");
}

void top_k(Tensor& values, Tensor& ids, const Tensor& x, int64_t k) {
  CHECK_LE(k, kMaxTopK) << "top_k: k " << k << " is above the CUDA limit " << kMaxTopK;
  const int64_t n = x.size(0), vocab = x.size(1);
  if (n == 0 || k == 0) return;
  launch_rows(top_k_kernel<OneBlock>, top_k_kernel<RowCluster>, n, kThreads, "top_k_kernel", values.data<float>(),
              values.stride(0), ids.data<int32_t>(), ids.stride(0), x.data<float>(), x.stride(0), vocab,
              static_cast<int>(k));
}

void gather_token_logprobs(Tensor& out_logprobs, Tensor& out_ranks, const Tensor& logprobs, const Tensor& token_ids) {
  const int64_t n = logprobs.size(0), vocab = logprobs.size(1);
  if (n == 0) return;
  gather_logprobs_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream()>>>(
      out_logprobs.data<float>(), out_ranks.data<int32_t>(), logprobs.data<float>(), logprobs.stride(0),
      token_ids.data<int32_t>(), vocab);
  check_launch("gather_logprobs_kernel");
}

}  // namespace llmserve::cuda

// Logit kernels on CUDA (f32 rows, row-strided): log_softmax, argmax, top-k (radix selection) and the sampled
// token's logprob and rank. One block per row, or a cluster of blocks per row while rows are few. Rankings
// follow the CPU ops exactly: larger value first, ties to the lower id, NaN below every number (a 64-bit key
// (value key, ~id) makes that one unsigned comparison).
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/radix.cuh"

namespace llmserve::cuda {
namespace {

constexpr int kThreads = 1024;

template <typename G>
__global__ void __launch_bounds__(kThreads)
    log_softmax_kernel(float* out, int64_t out_stride, const float* logits, int64_t in_stride, int64_t vocab) {
  __shared__ float slot;
  const G g;
  const int row = static_cast<int>(blockIdx.x) / g.size();
  int64_t lo, hi;
  row_slice(g, vocab, &lo, &hi);
  const float* x = logits + row * in_stride;
  float* o = out + row * out_stride;
  float mx = -INFINITY;
  for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = group_reduce(g, block_max(mx), &slot, [](float a, float b) { return fmaxf(a, b); });
  // A NaN anywhere makes the CPU's max NaN-free but its sum NaN; fmaxf skips NaN and expf(NaN) propagates it.
  float sum = 0.f;
  for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) sum += expf(x[j] - mx);
  sum = group_reduce(g, block_sum(sum), &slot, [](float a, float b) { return a + b; });
  const float lse = mx + logf(sum);
  for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) o[j] = x[j] - lse;
}

template <typename G>
__global__ void __launch_bounds__(kThreads)
    argmax_kernel(int32_t* out, const float* logits, int64_t stride, int64_t vocab) {
  __shared__ uint64_t slot;
  const G g;
  const int row = static_cast<int>(blockIdx.x) / g.size();
  int64_t lo, hi;
  row_slice(g, vocab, &lo, &hi);
  const uint64_t best = group_reduce(g, block_argmax_key(logits + row * stride, lo, hi), &slot,
                                     [](uint64_t a, uint64_t b) { return a > b ? a : b; });
  if (g.rank() == 0 && threadIdx.x == 0) out[row] = argmax_key_id(best);
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
  int64_t lo, hi;
  row_slice(g, vocab, &lo, &hi);
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

template <typename G>
__global__ void __launch_bounds__(kThreads)
    gather_logprobs_kernel(float* out_logprobs, int32_t* out_ranks, const float* logprobs, int64_t stride,
                           const int32_t* token_ids, int64_t vocab) {
  __shared__ double slot;
  const G g;
  const int row = static_cast<int>(blockIdx.x) / g.size();
  int64_t lo, hi;
  row_slice(g, vocab, &lo, &hi);
  const float* x = logprobs + row * stride;
  const int32_t id = token_ids[row];
  device_check(id >= 0 && id < vocab);
  const float value = x[id];
  float count = 0.f;  // exact: at most 2^24 per thread
  for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) count += x[j] >= value ? 1.f : 0.f;
  const double rank =
      group_reduce(g, block_sum_t<double>(count), &slot, [](double a, double b) { return a + b; });  // exact
  if (g.rank() == 0 && threadIdx.x == 0) {
    out_logprobs[row] = value;
    out_ranks[row] = static_cast<int32_t>(rank);
  }
}

}  // namespace

void log_softmax(Tensor& out, const Tensor& logits) {
  const int64_t n = logits.size(0), vocab = logits.size(1);
  if (n == 0 || vocab == 0) return;
  launch_rows(log_softmax_kernel<OneBlock>, log_softmax_kernel<RowCluster>, n, kThreads, "log_softmax_kernel",
              out.data<float>(), out.stride(0), logits.data<float>(), logits.stride(0), vocab);
}

void argmax(Tensor& out_ids, const Tensor& logits) {
  const int64_t n = logits.size(0), vocab = logits.size(1);
  if (n == 0) return;
  launch_rows(argmax_kernel<OneBlock>, argmax_kernel<RowCluster>, n, kThreads, "argmax_kernel", out_ids.data<int32_t>(),
              logits.data<float>(), logits.stride(0), vocab);
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
  launch_rows(gather_logprobs_kernel<OneBlock>, gather_logprobs_kernel<RowCluster>, n, kThreads,
              "gather_logprobs_kernel", out_logprobs.data<float>(), out_ranks.data<int32_t>(), logprobs.data<float>(),
              logprobs.stride(0), token_ids.data<int32_t>(), vocab);
}

void register_logits_kernels() {
  ops::log_softmax.register_kernel(DeviceType::kCUDA, log_softmax);
  ops::argmax.register_kernel(DeviceType::kCUDA, argmax);
  ops::top_k.register_kernel(DeviceType::kCUDA, top_k);
  ops::gather_token_logprobs.register_kernel(DeviceType::kCUDA, gather_token_logprobs);
}

}  // namespace llmserve::cuda

// Logit kernels on CUDA (f32 rows, row-strided): log_softmax, argmax, top-k and the sampled token's logprob and
// rank. One block per row. Rankings follow the CPU ops exactly: larger value first, ties to the lower id, NaN
// below every number (a 64-bit key (value key, ~id) makes that one unsigned comparison).
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

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

// Each thread keeps its best K keys (sorted, registers; compile-time indices), then the block merges the
// per-thread lists k times by their heads.
template <int K, int kBlock>
__global__ void __launch_bounds__(kBlock) top_k_kernel(float* values, int64_t v_stride, int32_t* ids, int64_t i_stride,
                                                       const float* logits, int64_t stride, int64_t vocab, int k) {
  __shared__ uint64_t lists[kBlock * K];
  const float* x = logits + blockIdx.x * stride;
  uint64_t best[K];
#pragma unroll
  for (int i = 0; i < K; ++i) best[i] = 0;
  for (int64_t j = threadIdx.x; j < vocab; j += kBlock) {
    const uint64_t key = rank_key(x[j], j);
    if (key > best[K - 1]) {
      best[K - 1] = key;
#pragma unroll
      for (int i = K - 1; i > 0; --i) {
        if (best[i] > best[i - 1]) {
          const uint64_t t = best[i];
          best[i] = best[i - 1];
          best[i - 1] = t;
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < K; ++i) lists[threadIdx.x * K + i] = best[i];
  __syncthreads();
  int head = 0;
  for (int r = 0; r < k; ++r) {
    const uint64_t mine = head < K ? lists[threadIdx.x * K + head] : 0;
    const uint64_t top = block_max_u64(mine);
    if (mine == top && top != 0) ++head;  // keys are unique (they carry the id): one owner advances
    if (threadIdx.x == 0) {
      const int32_t id = key_id(top);
      ids[blockIdx.x * i_stride + r] = id;
      values[blockIdx.x * v_stride + r] = x[id];
    }
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
  const unsigned grid = static_cast<unsigned>(n);
  if (k <= 8) {
    top_k_kernel<8, 256><<<grid, 256, 0, stream()>>>(values.data<float>(), values.stride(0), ids.data<int32_t>(),
                                                     ids.stride(0), x.data<float>(), x.stride(0), vocab,
                                                     static_cast<int>(k));
  } else {
    top_k_kernel<32, 128><<<grid, 128, 0, stream()>>>(values.data<float>(), values.stride(0), ids.data<int32_t>(),
                                                      ids.stride(0), x.data<float>(), x.stride(0), vocab,
                                                      static_cast<int>(k));
  }
  check_launch("top_k_kernel");
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

// Embedding lookup and rotate-half rotary embedding on CUDA, launched on the current stream. One block per token;
// f32 math (rotary: x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin, the CPU formula), rounded once on store.
// Out-of-range ids / positions trap (device_check) instead of reading past a buffer.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace llmserve::cuda {
namespace {

constexpr int kThreads = 256;

template <typename O, typename T>
__global__ void embedding_kernel(O* out, int64_t out_stride, const int32_t* ids, const T* table, int64_t vocab,
                                 int64_t hidden) {
  const int32_t id = ids[blockIdx.x];
  device_check(id >= 0 && id < vocab);
  const T* src = table + static_cast<int64_t>(id) * hidden;
  O* dst = out + blockIdx.x * out_stride;
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) store_f(dst + j, load_f(src + j));
}

template <typename T>
__device__ __forceinline__ void rotate_heads(T* x, int num_heads, int head_dim, const float* cos, const float* sin) {
  const int half = head_dim / 2;
  for (int i = threadIdx.x; i < num_heads * half; i += blockDim.x) {
    const int h = i / half, j = i % half;
    T* x1 = x + h * head_dim + j;
    T* x2 = x1 + half;
    const float a = load_f(x1), b = load_f(x2), c = cos[j], s = sin[j];
    store_f(x1, a * c - b * s);
    store_f(x2, b * c + a * s);
  }
}

template <typename T>
__global__ void rotary_kernel(const int64_t* positions, T* query, int64_t q_stride, int num_heads, T* key,
                              int64_t k_stride, int num_kv_heads, int head_dim, const float* cache,
                              int64_t max_position) {
  const int64_t pos = positions[blockIdx.x];
  device_check(pos >= 0 && pos < max_position);
  const float* cos = cache + pos * head_dim;
  const float* sin = cos + head_dim / 2;
  rotate_heads(query + blockIdx.x * q_stride, num_heads, head_dim, cos, sin);
  rotate_heads(key + blockIdx.x * k_stride, num_kv_heads, head_dim, cos, sin);
}

}  // namespace

void embedding(Tensor& out, const Tensor& ids, const Tensor& table) {
  const int64_t n = ids.size(0), vocab = table.size(0), hidden = table.size(1);
  if (n == 0 || hidden == 0) return;
  dispatch_float(out.dtype(), "embedding", [&](auto o) {
    dispatch_float(table.dtype(), "embedding", [&](auto t) {
      using O = decltype(o);
      using T = decltype(t);
      embedding_kernel<O, T><<<static_cast<unsigned>(n), kThreads, 0, stream()>>>(
          out.data<O>(), out.stride(0), ids.data<int32_t>(), table.data<T>(), vocab, hidden);
      check_launch("embedding_kernel");
    });
  });
}

void rotary_embedding(const Tensor& positions, Tensor& query, Tensor& key, int64_t head_dim,
                      const Tensor& cos_sin_cache) {
  const int64_t n = positions.size(0);
  if (n == 0) return;
  const int64_t q_row = query.numel() / n, k_row = key.numel() / n;
  dispatch_float(query.dtype(), "rotary_embedding", [&](auto t) {
    using T = decltype(t);
    rotary_kernel<T><<<static_cast<unsigned>(n), kThreads, 0, stream()>>>(
        positions.data<int64_t>(), query.data<T>(), query.stride(0), static_cast<int>(q_row / head_dim), key.data<T>(),
        key.stride(0), static_cast<int>(k_row / head_dim), static_cast<int>(head_dim), cos_sin_cache.data<float>(),
        cos_sin_cache.size(0));
    check_launch("rotary_kernel");
  });
}

}  // namespace llmserve::cuda

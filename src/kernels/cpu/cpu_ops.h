// CPU implementations of the ops in kernels/ops.h. ops.cc has already checked shapes, dtypes and devices;
// these check only what depends on tensor contents (ids, positions, slots, block ids in range).
// Tensors may be row-strided: dimension 0 may have any stride, the remaining dimensions are contiguous.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace llmserve::cpu {

void embedding(Tensor& out, const Tensor& ids, const Tensor& table);
void rms_norm(Tensor& out, const Tensor& x, const Tensor& weight, float eps);
void fused_add_rms_norm(Tensor& x, Tensor& residual, const Tensor& weight, float eps);
void silu_and_mul(Tensor& out, const Tensor& x);
void add(Tensor& a, const Tensor& b);
void rotary_embedding(const Tensor& positions, Tensor& query, Tensor& key, int64_t head_dim,
                      const Tensor& cos_sin_cache);
void linear(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor* bias);
void reshape_and_cache(const Tensor& key, const Tensor& value, Tensor& key_cache, Tensor& value_cache,
                       const Tensor& slot_mapping);
void paged_attention(Tensor& out, const Tensor& query, const Tensor& key_cache, const Tensor& value_cache,
                     const ops::AttentionMetadata& metadata, float scale, int64_t sliding_window);
void log_softmax(Tensor& out, const Tensor& logits);
void top_k(Tensor& values, Tensor& ids, const Tensor& x, int64_t k);
void argmax(Tensor& out_ids, const Tensor& logits);

// Which library `linear` uses (process-wide): oneDNN on llmserve's thread pool (default), oneDNN on its own
// OpenMP threads, or OpenBLAS (the fallback). Chosen by $LLMSERVE_GEMM (onednn | onednn-omp | openblas) or by
// tests and benchmarks.
enum class GemmBackend { kOnednn, kOnednnOmp, kOpenblas };
void set_gemm_backend(GemmBackend backend);
GemmBackend gemm_backend();

// Row i of a row-strided tensor (see above), as T*.
template <typename T>
inline T* row_ptr(const Tensor& t, int64_t i) {
  return t.data<T>() + i * t.stride(0);
}

// Number of elements in one row (product of dimensions 1..).
inline int64_t row_numel(const Tensor& t) {
  int64_t n = 1;
  for (int i = 1; i < t.dim(); ++i) n *= t.size(i);
  return n;
}

}  // namespace llmserve::cpu

// What the CPU kernel files share, and what tests and benchmarks call directly (the GEMM library choice). The
// kernels themselves are reached only through the op table (each file's register_*_kernels, register_kernels.cc):
// the op's check has run, so a kernel checks only what depends on tensor contents (ids, positions, slots in range).
// Tensors may be row-strided: dimension 0 may have any stride, the remaining dimensions are contiguous.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace llmserve::cpu {

// Shared by two kernels: rotary_embedding and rotary_embedding_and_cache (cache.cc) run it.
void rotary_embedding(const Tensor& positions, Tensor& query, Tensor& key, int64_t head_dim,
                      const Tensor& cos_sin_cache);

// Shared by paged_attention and mla_attention: checks the metadata's contents against the batch (query lengths within
// seq_lens, block ids inside the num_blocks of the cache, the table wide enough; aborts naming `op`) and returns
// each of the num_tokens tokens' request (-1: padding past query_start_loc[num_reqs]) and the longest seq_len.
std::vector<int32_t> token_to_request(const ops::AttentionMetadata& md, int64_t num_tokens, int64_t num_blocks,
                                      int64_t block_size, int64_t* max_seq_len, const char* op);

// Dynamic quantization of one f32 row of k values to `dtype` (fp8_e4m3 or i8): dynamic_scaled_quantize's rule with
// one group, writing out[0, k) and returning the scale. dynamic_scaled_quantize and the fused per-token ops
// (rms_norm_quant, fused_add_rms_norm_quant, silu_and_mul_quant) share it, so fused and unfused agree bit for bit.
float quantize_row_dynamic(const float* row, int64_t k, void* out, DType dtype);
// Row i of a fused per-token op's output: y [d] quantized into out's row i in scales.size(1) groups (scales' row i),
// each by quantize_row_dynamic.
void quantize_row_groups(const float* y, int64_t i, Tensor& out, Tensor& scales);

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

// Parameters and launchers of CUDA multi-head latent attention (ops::mla_attention): one plain struct filled from
// the tensors by mla_attention.cu and validated by check() before any launch (STYLE.md: Params + check()).
// Plain C++ plus the runtime API's stream type: the struct is passed to kernels by value, so it holds only PODs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace llmserve::cuda {

// DeepSeek-V2 / V3's latent and rope widths: the tensor-core kernel's compile-time row (L + R = 576).
inline constexpr int kMlaFastLatentDim = 512;
inline constexpr int kMlaFastRopeDim = 64;
// Largest L + R of the simple kernel: 32 values per lane of one warp.
inline constexpr int kMlaMaxRowDim = 1024;

// One mla_attention call. Every query token is its own query over positions [0, pos] of its request (pos from
// query_start_loc and seq_lens, as paged_attention); all index tensors live on the device (graph-safe).
struct MlaAttentionParams {
  void* out = nullptr;                       // [num_tokens, num_heads, latent_dim] dtype, row stride out_row_stride
  const void* query = nullptr;               // [num_tokens, num_heads, latent_dim + rope_dim], row-strided
  const void* cache = nullptr;               // [num_blocks, block_size, latent_dim + rope_dim] dtype
  int64_t out_row_stride = 0;                // elements between consecutive tokens of out
  int64_t query_row_stride = 0;              // elements between consecutive tokens of query
  const int32_t* query_start_loc = nullptr;  // [num_reqs + 1]
  const int32_t* seq_lens = nullptr;         // [num_reqs]
  const int32_t* block_table = nullptr;      // [num_reqs, max_blocks_per_seq], row stride block_table_stride
  int64_t block_table_stride = 0;
  // Split-K scratch (f32), laid out as paged_attention's: kSplitCounterElems int32 arrival counters (zero between
  // calls; every call leaves them zero), then per (token, head, split) L unnormalised outputs, max and sum.
  // Null: no split-K.
  float* workspace = nullptr;
  int64_t workspace_elems = 0;
  DType dtype = DType::kF32;
  int num_tokens = 0;
  int num_heads = 0;
  int latent_dim = 0;  // L: out's width, the cache row's first L values
  int rope_dim = 0;    // R: the rest of the row
  int block_size = 0;
  int num_reqs = 0;
  int max_seq_len = 0;  // hint for the split-K decision; 0 = unknown
  float scale = 1.f;

  int row_dim() const { return latent_dim + rope_dim; }
  // InvalidArgument naming the field that is out of range.
  Status check() const;
};

// Whether the tensor-core kernel takes p: f16 / bf16, L = 512, R = 64, 16-byte aligned rows.
bool mla_mma_applies(const MlaAttentionParams& p);
// The tensor-core kernel (mla_attention_mma.cu); heads_per_cta 16 or 64 (0: chosen by the batch).
void launch_mla_mma(const MlaAttentionParams& p, int heads_per_cta, cudaStream_t stream);
// Any dtype, any L + R <= kMlaMaxRowDim (mla_attention.cu): CUDA cores, one CTA per (token, head), no split-K.
void launch_mla_simple(const MlaAttentionParams& p, cudaStream_t stream);

}  // namespace llmserve::cuda

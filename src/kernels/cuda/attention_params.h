// Parameters of the CUDA paged-attention and KV-cache kernels: one plain struct per kernel family, filled from
// tensors by attention.cu / cache.cu and validated by check() before any launch (STYLE.md: Params + check()).
// Plain C++ (no CUDA headers): the structs are passed to kernels by value, so they hold only PODs.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace llmserve::cuda {

// Largest head_dim the generic (any-size, slower) attention kernel handles: 8 values per lane of one warp.
inline constexpr int kGenericMaxHeadDim = 256;

// Leading elements of the split-K workspace that hold the decode kernel's per-(request, head group) arrival
// counters; split-K runs only while a call has at most this many such groups (it pays only below ~2 waves of
// CTAs, i.e. a few hundred groups). Equal to ops::kPagedAttentionWorkspaceCounters (checked in attention.cu).
inline constexpr int kSplitCounterElems = 1024;

// One paged_attention call. Token rows of query/out may be strided (fused QKV slices); heads and head_dim are
// contiguous. All index tensors live on the device: the kernels read lengths and block ids there (graph-safe).
struct PagedAttentionParams {
  void* out = nullptr;                       // [num_tokens, num_heads, head_dim] dtype
  const void* query = nullptr;               // [num_tokens, num_heads, head_dim] dtype
  const void* key_cache = nullptr;           // [num_blocks, block_size, num_kv_heads, head_dim] dtype
  const void* value_cache = nullptr;         // same shape as key_cache
  int64_t out_row_stride = 0;                // elements between consecutive tokens of out
  int64_t query_row_stride = 0;              // elements between consecutive tokens of query
  const int32_t* query_start_loc = nullptr;  // [num_reqs + 1]
  const int32_t* seq_lens = nullptr;         // [num_reqs]
  const int32_t* block_table = nullptr;      // [num_reqs, max_blocks_per_seq], row stride block_table_stride
  int64_t block_table_stride = 0;
  // Split-K scratch (f32); null: no split-K. Its first kSplitCounterElems elements are int32 counters that must be
  // zero when the workspace is first used (allocate it zeroed); every call leaves them zero again.
  float* workspace = nullptr;
  int64_t workspace_elems = 0;
  DType dtype = DType::kF32;
  int num_tokens = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  int num_reqs = 0;
  int num_decode_reqs = 0;  // the first num_decode_reqs requests have exactly one query token
  int max_query_len = 0;    // upper bound on every query length (sizes the prefill grid)
  int max_seq_len = 0;      // hint for the split-K decision; 0 = unknown
  float scale = 1.f;
  int sliding_window = 0;  // <= 0: unlimited
  // The SM90 prefill kernel's work lists ([8, width] i32, kernels/prefill_schedule.h) when this call runs its prefill
  // requests there (attention.cu decides); null: the portable prefill kernel.
  const int32_t* prefill_schedule = nullptr;
  int64_t prefill_schedule_width = 0;

  // InvalidArgument naming the field that is out of range (sizes, alignment of the vector paths is checked by
  // the dispatcher, which falls back to the generic kernel).
  Status check() const;
};

// One reshape_and_cache call: token t's key/value rows go to slot slot_mapping[t]; negative slots are skipped.
struct ReshapeAndCacheParams {
  const void* key = nullptr;    // [num_tokens, num_kv_heads, head_dim], row stride key_row_stride elements
  const void* value = nullptr;  // same, row stride value_row_stride
  void* key_cache = nullptr;    // [num_blocks, block_size, num_kv_heads, head_dim]
  void* value_cache = nullptr;
  const int64_t* slot_mapping = nullptr;  // [num_tokens]
  int64_t key_row_stride = 0;
  int64_t value_row_stride = 0;
  int64_t num_slots = 0;  // num_blocks * block_size: slots at or past it are skipped (the device cannot abort)
  int num_tokens = 0;
  int row_elems = 0;  // num_kv_heads * head_dim
  int elem_size = 0;  // bytes per element (the copy is dtype-agnostic)

  Status check() const;
};

}  // namespace llmserve::cuda

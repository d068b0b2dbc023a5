// CUDA paged KV cache write and paged attention (kernels/ops.h semantics), bf16 / f16 fast paths and an f32
// (or odd head_dim) generic path. ops.cc has checked shapes, dtypes and devices; these build the Params, check
// them and launch on llmserve::cuda::current_stream(). Plain C++ header so ops.cc compiles with the host compiler.
#pragma once

#include "core/tensor.h"
#include "kernels/ops.h"

namespace llmserve::cuda {

// key, value [n, num_kv_heads, head_dim] (row-strided) -> caches [num_blocks, block_size, num_kv_heads, head_dim]
// of the same dtype. Negative slots are skipped; on the device slots past the cache are skipped too.
void reshape_and_cache(const Tensor& key, const Tensor& value, Tensor& key_cache, Tensor& value_cache,
                       const Tensor& slot_mapping);

// See ops::paged_attention. Decode requests (the first md.num_decode_tokens) run the split-K decode kernel,
// the rest the tiled tensor-core prefill kernel; f32 and head_dims without a fast path run the generic kernel.
void paged_attention(Tensor& out, const Tensor& query, const Tensor& key_cache, const Tensor& value_cache,
                     const ops::AttentionMetadata& md, float scale, int64_t sliding_window);

}  // namespace llmserve::cuda

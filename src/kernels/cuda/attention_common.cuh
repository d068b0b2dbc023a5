// Device helpers shared by the attention kernels: 16-byte chunk <-> f32 conversion for f32 / f16 / bf16, paged
// cache addressing, warp reductions, and the launcher templates each attention*.cu instantiates.
// Invariant: every cache element offset is computed in int64 (caches can exceed 2^31 elements).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention_params.h"

namespace llmserve::cuda {

// Element offset of (token position `pos` of a request whose block-table row is `bt`, kv head) in the cache.
__device__ __forceinline__ int64_t cache_offset(const int32_t* bt, int pos, int block_size, int num_kv_heads,
                                                int kv_head, int head_dim) {
  const int blk_idx = pos / block_size;
  const int off = pos - blk_idx * block_size;
  const int64_t block = bt[blk_idx];
  return ((block * block_size + off) * num_kv_heads + kv_head) * static_cast<int64_t>(head_dim);
}

// The request of query token t < query_start_loc[num_reqs]: the largest r with query_start_loc[r] <= t (so empty
// requests, whose start equals the next one's, are never chosen). Binary search over the device offsets.
__device__ __forceinline__ int token_request(const int32_t* query_start_loc, int num_reqs, int t) {
  int lo = 0, hi = num_reqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (query_start_loc[mid] <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Two floats packed as one 32-bit register of two 16-bit values (low half = lo), as mma and stores want them.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

// 16 bytes holding 16 / sizeof(T) elements -> f32.
__device__ __forceinline__ void chunk_to_floats(const uint4& raw, float (&f)[8], __nv_bfloat16) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}
__device__ __forceinline__ void chunk_to_floats(const uint4& raw, float (&f)[8], __half) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

// cp.async: 16-byte global -> shared copies that bypass registers. The "memory" clobbers keep the compiler from
// moving shared-memory reads above a wait (the decode kernel reads its own copies without a barrier).
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// src_bytes 0 (valid false) writes zeros: keys past the range read as zeros, never as stale data.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most `n` of this thread's committed groups are still in flight.
template <int n>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(n) : "memory");
}

// Tensor-core fragments (the prefill and MLA kernels): ldmatrix loads of 8x8 b16 tiles from shared memory and
// mma.sync m16n8k16 with f32 accumulators.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// d += a (16x16, row) * b (16x8, col), f32 accumulators. Not volatile: registers only, so the compiler may
// interleave independent mma with other work (volatile asm keeps source order).
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], __nv_bfloat16) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], __half) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// 2^x in one MUFU.EX2 (denormal results flush to 0: a probability below 2^-126 of the row maximum).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint4 load_chunk(const void* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

// The split-K combines' weighted sum of two adjacent columns (8-byte loads: `stride` and the column even) over the
// splits' partials: w[0] * part[0..1] + w[1] * part[stride..] + ... in split order, the loads issued kBatch at a time
// before any is used (a loop that summed each load as it arrived waited one L2 round trip per split). ld.global.cg:
// the partials were written by other SMs (L1 is not coherent).
__device__ __forceinline__ float2 sum_split_pairs(const float* part, int stride, int num_splits, const float* w) {
  constexpr int kBatch = 8;
  float sum0 = 0.f, sum1 = 0.f;
  for (int s0 = 0; s0 < num_splits; s0 += kBatch) {
    float2 v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      v[b] = s0 + b < num_splits ? __ldcg(reinterpret_cast<const float2*>(part + (s0 + b) * stride))
                                 : make_float2(0.f, 0.f);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (s0 + b < num_splits) {
        sum0 += w[s0 + b] * v[b].x;
        sum1 += w[s0 + b] * v[b].y;
      }
    }
  }
  return make_float2(sum0, sum1);
}

// Launchers, one per kernel family; each attention*.cu explicitly instantiates the (T, HD) pairs the dispatch
// table in attention.cu names. All run on `stream` and check the launch.
template <typename T, int HD>
void launch_decode(const PagedAttentionParams& p, cudaStream_t stream);
template <typename T, int HD>
void launch_prefill(const PagedAttentionParams& p, cudaStream_t stream);
// The tensor-core decode of grouped-query heads (attention_decode_mma.cu; T bf16 or f16, HD 64 or 128; no split-K):
// launch_decode sends it the batches that fill the GPU. mma_decode_enabled(): LLMSERVE_DECODE_MMA is not 0;
// mma_decode_ctas(p): its grid's CTA count for the call (requests x kv heads x head chunks of 8).
template <typename T, int HD>
void launch_decode_mma(const PagedAttentionParams& p, cudaStream_t stream);
bool mma_decode_enabled();
int64_t mma_decode_ctas(const PagedAttentionParams& p);
// FlashInfer's Hopper prefill kernel over p.prefill_schedule's work lists (T bf16 or f16, HD 64 or 128; the
// prefill requests only, no sliding window): attention_prefill_sm90*.cu.
template <typename T, int HD>
void launch_prefill_sm90(const PagedAttentionParams& p, cudaStream_t stream);
// Any dtype, any head_dim <= kGenericMaxHeadDim, every token (padding rows included) in one launch.
void launch_generic(const PagedAttentionParams& p, cudaStream_t stream);
// Zeroes out rows [query_start_loc[num_reqs], num_tokens) (padding) when the fast kernels ran.
void launch_zero_padding(const PagedAttentionParams& p, cudaStream_t stream);

}  // namespace llmserve::cuda

// Reading a weight matrix once per call at bandwidth, shared by the weight-streaming kernels (the bf16 GEMV, the
// MoE decode GEMM): the L1-bypassing 16-byte load and how many warps share one weight row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace llmserve::cuda {

// ~ 132 SMs x 64 resident warps: enough 16-byte loads in flight to reach HBM bandwidth.
inline constexpr int64_t kStreamWantWarps = 8192;

// Streaming load: each weight word is read once per call, so it must not evict what L1 holds (x, partial sums).
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Warps per weight row (a power of two <= max_splits): the fewest that put ~want_warps warps on the GPU (a kernel
// with fewer resident warps than kStreamWantWarps passes its own residency) for `rows` rows of `row_words` 16-byte
// words, while each warp keeps at least two rounds of `unroll` words per lane (fewer and the cross-warp reduction
// costs more than it hides).
inline int stream_splits(int64_t rows, int64_t row_words, int unroll, int max_splits,
                         int64_t want_warps = kStreamWantWarps) {
  int splits = 1;
  while (splits < max_splits && rows * splits < want_warps && row_words >= int64_t{32} * unroll * splits * 2) {
    splits *= 2;
  }
  return splits;
}

}  // namespace llmserve::cuda

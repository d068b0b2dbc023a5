// The load of the weight-streaming kernels (the bf16 GEMV, the MoE decode GEMM), which read each weight word once
// per call: one home for the PTX both rely on to reach bandwidth.
#pragma once

#include <cuda_runtime.h>

namespace llmserve::cuda {

// Streaming load: 16 bytes that skip L1 allocation, so the weight stream does not evict what L1 holds (x, partials).
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

}  // namespace llmserve::cuda

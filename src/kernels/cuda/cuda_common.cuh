// Helpers shared by the CUDA kernels: f32/bf16 loads and stores through float, block-wide sum, launch check.
// Arithmetic is always f32; bf16 values are rounded once, on store.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "core/logging.h"

namespace llmserve::cuda {

__device__ __forceinline__ float load_f(const float* p) { return *p; }
__device__ __forceinline__ float load_f(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store_f(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_f(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float warp_sums[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  const int num_warps = blockDim.x / 32;
  float total = 0.f;
  for (int w = 0; w < num_warps; ++w) total += warp_sums[w];
  __syncthreads();  // warp_sums may be reused by a later call
  return total;
}

// Aborts with the kernel's name if the launch failed.
inline void check_launch(const char* what) {
  cudaError_t err = cudaGetLastError();
  CHECK(err == cudaSuccess) << what << ": " << cudaGetErrorString(err);
}

}  // namespace llmserve::cuda

// What the weight-streaming GEMVs share (gemv.cu: 16-bit; scaled_gemv.cu: fp8 / int8; w4a16_gemv.cu: 4-bit;
// moe_gemm.cu: the MoE decode GEMM over its experts' rows): the streaming load, the split of each output unit over
// several warps of a block, and the tensor-core fragment the quantized ones reduce. Decode-sized products are
// memory-bound: each keeps the weight read exactly once per call.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"

namespace llmserve::cuda {

constexpr int kGemvWarpsPerBlock = 8;
constexpr int kGemvMaxSplits = 8;         // warps per output unit (a power of two dividing kGemvWarpsPerBlock)
constexpr int64_t kGemvWantWarps = 8192;  // ~ 132 SMs x 64 resident warps: enough loads in flight to reach bandwidth

// Streaming load: the weight is read once per call, so keep it out of L1. Only for data no kernel of this stream
// writes while the GEMV runs (weights), as it may be issued before pdl_wait().
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Warps per output unit (a weight row, or a 16-row tile): the fewest that put ~kGemvWantWarps warps on the GPU,
// while each warp still gets at least one whole unrolled round of loads (`rounds`: the rounds one warp alone would
// make; fewer and the cross-warp reduction costs more than it hides). A small weight (a 4-bit o_proj is 8 MB) is
// then requested whole by the first round, before pdl_wait.
inline int choose_gemv_splits(int64_t units, int64_t rounds) {
  int splits = 1;
  while (splits < kGemvMaxSplits && units * splits < kGemvWantWarps && rounds >= int64_t{2} * splits) splits *= 2;
  return splits;
}

// The tensor-core GEMVs (mma.sync m16n8kK) compute a warp's 16-row x 8-token tile of out^T. Lane (g = lane / 4,
// t = lane % 4) holds rows g and g + 8 of the tile at tokens 2t and 2t + 1: c[0] (g, 2t), c[1] (g, 2t + 1),
// c[2] (g + 8, 2t), c[3] (g + 8, 2t + 1). A warp that streams 1 / splits of k adds its fragments to those of the
// other warps of its tile through shared memory; the first warp of the tile (part 0) gets the sum and true, the
// others false. `partial` holds kGemvWarpsPerBlock x kTiles x 4 x 32 floats. Every warp of the block must call it
// (it has a barrier).
template <int kTiles>
__device__ __forceinline__ bool reduce_tile_over_splits(float (&acc)[kTiles][4], float* partial, int splits) {
  if (splits == 1) return true;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, part = warp % splits;
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
#pragma unroll
    for (int c = 0; c < 4; ++c) partial[((warp * kTiles + i) * 4 + c) * 32 + lane] = acc[i][c];
  }
  __syncthreads();
  if (part != 0) return false;
  for (int p = 1; p < splits; ++p) {
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][c] += partial[(((warp + p) * kTiles + i) * 4 + c) * 32 + lane];
    }
  }
  return true;
}

}  // namespace llmserve::cuda

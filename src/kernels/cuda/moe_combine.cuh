// The MoE combine's per-column sums, shared by moe_combine_kernel (moe.cu) and the norm kernel that folds the
// combine into the next residual add + RMSNorm (norm.cu): one expression, so both give the same bits.
#pragma once

#include "kernels/cuda/cuda_common.cuh"

namespace llmserve::cuda {

// Columns [h, h + V) of token t's combined row: sum_j w[j] * expert_out[rows[j]] (j ascending, f32), then
// + shared_scale * shared_row when shared_row is given. V: 8 (16-byte loads; rows 16-byte aligned) or 1.
template <int V, typename T, typename Row>
__device__ __forceinline__ void moe_combine_cols(float (&acc)[V], const T* expert_out, int64_t expert_stride,
                                                 const float* w, const Row* rows, int k, const T* shared_row,
                                                 float shared_scale, int64_t h) {
  float v[V];
#pragma unroll
  for (int e = 0; e < V; ++e) acc[e] = 0.f;
  for (int j = 0; j < k; ++j) {
    const T* src = expert_out + static_cast<int64_t>(rows[j]) * expert_stride + h;
    if constexpr (V == 8) {
      load8(src, v);
    } else {
      v[0] = load_f(src);
    }
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] += w[j] * v[e];
  }
  if (shared_row != nullptr) {
    if constexpr (V == 8) {
      load8(shared_row + h, v);
    } else {
      v[0] = load_f(shared_row + h);
    }
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] += shared_scale * v[e];
  }
}

// The scale of Qwen2-MoE's gated shared expert: sigmoid(gate) (gate nullptr: 1).
template <typename T>
__device__ __forceinline__ float moe_shared_scale(const T* gate) {
  return gate != nullptr ? 1.f / (1.f + expf(-load_f(gate))) : 1.f;
}

}  // namespace llmserve::cuda

// ops::scaled_mm's last resort on CUDA (scaled_mm.cc): a plain shared-memory tiled GEMM that dequantizes like the CPU
// reference (value * its scale, in f32) and accumulates in f32, for shapes and alignments cuBLASLt has no algorithm
// for (k not a multiple of 16, unaligned operands). Every scale mode, fp8 and int8; correct, not fast.
#include <cuda_fp8.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace llmserve::cuda {
namespace {

constexpr int kTile = 16;

// A scale tensor as the kernel reads it: [1] (stride 0), per row, per row and 128-column group, or per 128 x 128
// block of (row, column).
struct ScaleView {
  const float* s;
  int kind;        // 0: per tensor, 1: per row, 2: per row and 128-column group, 3: per 128 x 128 block
  int64_t groups;  // columns of a 2-D scale tensor
  __device__ float at(int64_t row, int64_t col) const {
    switch (kind) {
      case 0:
        return s[0];
      case 1:
        return s[row];
      case 2:
        return s[row * groups + col / 128];
      default:
        return s[(row / 128) * groups + col / 128];
    }
  }
};

__device__ __forceinline__ float dequant(const uint8_t* p, int64_t i, bool int8) {
  if (int8) return static_cast<float>(static_cast<int8_t>(p[i]));
  __nv_fp8_e4m3 v;
  v.__x = p[i];
  return static_cast<float>(v);
}

template <typename T, typename B>
__global__ void scaled_mm_tiled_kernel(T* out, const uint8_t* a, ScaleView sa, const uint8_t* b, ScaleView sb,
                                       const B* bias, int64_t m, int64_t n, int64_t k, bool int8) {
  __shared__ float as[kTile][kTile + 1], bs[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kTile + ty, j = static_cast<int64_t>(blockIdx.x) * kTile + tx;
  const int64_t bj = static_cast<int64_t>(blockIdx.x) * kTile + ty;  // the weight row this thread loads
  float acc = 0.0f;
  for (int64_t c0 = 0; c0 < k; c0 += kTile) {
    const int64_t c = c0 + tx;
    as[ty][tx] = (i < m && c < k) ? dequant(a, i * k + c, int8) * sa.at(i, c) : 0.0f;
    bs[ty][tx] = (bj < n && c < k) ? dequant(b, bj * k + c, int8) * sb.at(bj, c) : 0.0f;
    __syncthreads();
#pragma unroll
    for (int t = 0; t < kTile; ++t) acc += as[ty][t] * bs[tx][t];
    __syncthreads();
  }
  if (i >= m || j >= n) return;
  if (bias != nullptr) acc += load_f(bias + j);
  store_f(out + i * n + j, acc);
}

ScaleView view_of(const Tensor& scales, bool block, bool weight) {
  if (scales.numel() == 1 && scales.dim() <= 1) return {scales.data<float>(), 0, 1};
  if (!block) return {scales.data<float>(), 1, 1};
  return {scales.data<float>(), weight ? 3 : 2, scales.size(1)};
}

}  // namespace

void scaled_mm_tiled(Tensor& out, const Tensor& a, const Tensor& a_scales, const Tensor& b, const Tensor& b_scales,
                     const Tensor* bias) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  const bool block = b_scales.dim() == 2, int8 = a.dtype() == DType::kI8;
  const ScaleView sa = view_of(a_scales, block, false), sb = view_of(b_scales, block, true);
  const auto* ap = static_cast<const uint8_t*>(a.raw_data());
  const auto* bp = static_cast<const uint8_t*>(b.raw_data());
  const dim3 grid(ceil_div(n, kTile), ceil_div(m, kTile)), threads(kTile, kTile);
  dispatch_float(out.dtype(), "scaled_mm", [&](auto t) {
    using T = decltype(t);
    if (bias == nullptr) {
      scaled_mm_tiled_kernel<T, float>
          <<<grid, threads, 0, stream()>>>(out.data<T>(), ap, sa, bp, sb, nullptr, m, n, k, int8);
    } else {
      dispatch_float(bias->dtype(), "scaled_mm bias", [&](auto bt) {
        using B = decltype(bt);
        scaled_mm_tiled_kernel<T, B>
            <<<grid, threads, 0, stream()>>>(out.data<T>(), ap, sa, bp, sb, bias->data<B>(), m, n, k, int8);
      });
    }
    check_launch("scaled_mm_tiled_kernel");
  });
}

}  // namespace llmserve::cuda

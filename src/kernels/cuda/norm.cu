// RMSNorm and fused residual-add + RMSNorm on CUDA: one block per row, f32 accumulation, activations f32, f16 or
// bf16 with a weight of any of those dtypes, launched on the current stream. Matches the CPU ops up to the rounding
// of 16-bit stores.
#include <algorithm>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace llmserve::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T, typename W>
__global__ void rms_norm_kernel(T* out, int64_t out_stride, const T* x, int64_t x_stride, const W* weight, int d,
                                float eps) {
  const T* xr = x + blockIdx.x * x_stride;
  T* o = out + blockIdx.x * out_stride;
  float ss = 0.f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = load_f(xr + i);
    ss += v * v;
  }
  const float r = rsqrtf(block_sum(ss) / static_cast<float>(d) + eps);
  for (int i = threadIdx.x; i < d; i += blockDim.x) store_f(o + i, load_f(xr + i) * r * load_f(weight + i));
}

template <typename T, typename W>
__global__ void fused_add_rms_norm_kernel(T* x, int64_t x_stride, T* residual, int64_t res_stride, const W* weight,
                                          int d, float eps) {
  T* xr = x + blockIdx.x * x_stride;
  T* rr = residual + blockIdx.x * res_stride;
  float ss = 0.f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    store_f(rr + i, load_f(rr + i) + load_f(xr + i));
    const float v = load_f(rr + i);  // the stored (rounded) sum is what later layers see
    ss += v * v;
  }
  const float r = rsqrtf(block_sum(ss) / static_cast<float>(d) + eps);
  for (int i = threadIdx.x; i < d; i += blockDim.x) store_f(xr + i, load_f(rr + i) * r * load_f(weight + i));
}

template <typename T, typename W>
void launch_rms_norm(Tensor& out, const Tensor& x, const Tensor& weight, float eps) {
  const int64_t n = x.size(0);
  if (n == 0) return;
  rms_norm_kernel<T, W><<<static_cast<unsigned>(n), kThreads, 0, stream()>>>(
      out.data<T>(), out.stride(0), x.data<T>(), x.stride(0), weight.data<W>(), static_cast<int>(x.size(1)), eps);
  check_launch("rms_norm_kernel");
}

template <typename T, typename W>
void launch_fused(Tensor& x, Tensor& residual, const Tensor& weight, float eps) {
  const int64_t n = x.size(0);
  if (n == 0) return;
  fused_add_rms_norm_kernel<T, W><<<static_cast<unsigned>(n), kThreads, 0, stream()>>>(
      x.data<T>(), x.stride(0), residual.data<T>(), residual.stride(0), weight.data<W>(), static_cast<int>(x.size(1)),
      eps);
  check_launch("fused_add_rms_norm_kernel");
}

}  // namespace

void rms_norm(Tensor& out, const Tensor& x, const Tensor& weight, float eps) {
  dispatch_float(x.dtype(), "rms_norm", [&](auto t) {
    dispatch_float(weight.dtype(), "rms_norm",
                   [&](auto w) { launch_rms_norm<decltype(t), decltype(w)>(out, x, weight, eps); });
  });
}

void fused_add_rms_norm(Tensor& x, Tensor& residual, const Tensor& weight, float eps) {
  dispatch_float(x.dtype(), "fused_add_rms_norm", [&](auto t) {
    dispatch_float(weight.dtype(), "fused_add_rms_norm",
                   [&](auto w) { launch_fused<decltype(t), decltype(w)>(x, residual, weight, eps); });
  });
}

}  // namespace llmserve::cuda

// RMSNorm and fused residual-add + RMSNorm on CUDA: one block per row (rows of up to 256 elements: several rows per
// block), f32 accumulation, activations f32, f16 or bf16 with a weight of any of those dtypes, on the current
// stream. Matches the CPU ops up to the rounding of 16-bit stores. Rows of up to 8192 elements in 16-byte-aligned
// 8-element chunks take the vectorised kernels (the row stays in registers: one read, one write; programmatic
// dependent launch); anything else the scalar ones.
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

// Vectorised: thread t owns chunks t, t + blockDim, ... (N of them at most) of 8 elements, kept in registers
// between the sum of squares and the scaling. A single decode token is one block: every round trip counts.
constexpr int kVecMaxChunks = 4;
constexpr int kVecMaxThreads = 256;

template <typename T, typename W, int N, bool kResidual>
__global__ void __launch_bounds__(kVecMaxThreads)
    rms_norm_vec_kernel(T* out, int64_t out_stride, T* x, int64_t x_stride, T* residual, int64_t res_stride,
                        const W* weight, int d, float eps) {
  pdl_wait();  // x and the residual come from the previous kernel
  const int chunks = d / 8;
  T* xr = x + blockIdx.x * x_stride;
  T* rr = kResidual ? residual + blockIdx.x * res_stride : nullptr;
  float v[N][8];
  float ss = 0.f;
#pragma unroll
  for (int c = 0; c < N; ++c) {
    const int chunk = threadIdx.x + c * blockDim.x;
    if (chunk >= chunks) break;
    load8(xr + chunk * 8, v[c]);
    if constexpr (kResidual) {
      float r[8];
      load8(rr + chunk * 8, r);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[c][e] = round_to<T>(v[c][e] + r[e]);  // later layers see the rounded sum
      store8(rr + chunk * 8, v[c]);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) ss = fmaf(v[c][e], v[c][e], ss);
  }
  pdl_trigger();
  const float scale = rsqrtf(block_sum(ss) / static_cast<float>(d) + eps);
  T* o = out + blockIdx.x * out_stride;
#pragma unroll
  for (int c = 0; c < N; ++c) {
    const int chunk = threadIdx.x + c * blockDim.x;
    if (chunk >= chunks) break;
    float w[8];
    load8(weight + chunk * 8, w);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[c][e] = v[c][e] * scale * w[e];
    store8(o + chunk * 8, v[c]);
  }
}

// Short rows (per-head q/k norms: d = 64..256, tens of thousands of rows in a prefill): one block per row leaves a
// block mostly idle and the block launch rate bounds the kernel (measured on an H200: 45 us per call for 65,536
// rows of 128 at a 2048-token Qwen3 prefill, ~0.7 TB/s). Here a group of G = 2..32 lanes (one 8-element chunk
// each) owns a row and kThreads / G rows share a block; the group reduces with shuffles.
template <typename T, typename W, int G, bool kResidual>
__global__ void __launch_bounds__(kThreads)
    rms_norm_rows_kernel(T* out, int64_t out_stride, T* x, int64_t x_stride, T* residual, int64_t res_stride,
                         const W* weight, int64_t n, int d, float eps) {
  pdl_wait();  // x and the residual come from the previous kernel
  const int lane = threadIdx.x % G;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kThreads / G) + threadIdx.x / G;
  const bool active = row < n && lane < d / 8;  // whole groups share a row: the shuffles below stay in the group
  float v[8];
  float ss = 0.f;
  if (active) {
    load8(x + row * x_stride + lane * 8, v);
    if constexpr (kResidual) {
      T* rr = residual + row * res_stride + lane * 8;
      float r[8];
      load8(rr, r);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = round_to<T>(v[e] + r[e]);  // later layers see the rounded sum
      store8(rr, v);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) ss = fmaf(v[e], v[e], ss);
  }
  pdl_trigger();
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o, G);
  if (!active) return;
  const float scale = rsqrtf(ss / static_cast<float>(d) + eps);
  float w[8];
  load8(weight + lane * 8, w);
#pragma unroll
  for (int e = 0; e < 8; ++e) v[e] = v[e] * scale * w[e];
  store8(out + row * out_stride + lane * 8, v);
}

template <typename T, typename W, int G, bool kResidual>
void launch_rows(int64_t n, int64_t d, T* out, int64_t out_stride, T* x, int64_t x_stride, T* residual,
                 int64_t res_stride, const W* weight, float eps) {
  constexpr int64_t kRows = kThreads / G;
  launch_pdl("rms_norm_rows_kernel", rms_norm_rows_kernel<T, W, G, kResidual>,
             static_cast<unsigned>((n + kRows - 1) / kRows), kThreads, out, out_stride, x, x_stride, residual,
             res_stride, weight, n, static_cast<int>(d), eps);
}

// Launches the vectorised kernel when the row fits and every row start is 16-byte aligned; false otherwise.
template <typename T, typename W, bool kResidual>
bool launch_vec(int64_t n, int64_t d, T* out, int64_t out_stride, T* x, int64_t x_stride, T* residual,
                int64_t res_stride, const W* weight, float eps) {
  const int64_t chunks = d / 8;
  const bool fits = d % 8 == 0 && chunks <= kVecMaxThreads * kVecMaxChunks && out_stride % 8 == 0 &&
                    x_stride % 8 == 0 && (!kResidual || res_stride % 8 == 0) && aligned16(out) && aligned16(x) &&
                    (!kResidual || aligned16(residual)) && aligned16(weight);
  if (!fits) return false;
  if (chunks <= 32) {  // short rows: several per block (rms_norm_rows_kernel)
    if (chunks <= 2) {
      launch_rows<T, W, 2, kResidual>(n, d, out, out_stride, x, x_stride, residual, res_stride, weight, eps);
    } else if (chunks <= 4) {
      launch_rows<T, W, 4, kResidual>(n, d, out, out_stride, x, x_stride, residual, res_stride, weight, eps);
    } else if (chunks <= 8) {
      launch_rows<T, W, 8, kResidual>(n, d, out, out_stride, x, x_stride, residual, res_stride, weight, eps);
    } else if (chunks <= 16) {
      launch_rows<T, W, 16, kResidual>(n, d, out, out_stride, x, x_stride, residual, res_stride, weight, eps);
    } else {
      launch_rows<T, W, 32, kResidual>(n, d, out, out_stride, x, x_stride, residual, res_stride, weight, eps);
    }
    return true;
  }
  const int per_thread = static_cast<int>((chunks + kVecMaxThreads - 1) / kVecMaxThreads);
  const int threads = static_cast<int>(std::max<int64_t>(32, (chunks + per_thread - 1) / per_thread + 31) / 32 * 32);
  const unsigned grid = static_cast<unsigned>(n);
  const int di = static_cast<int>(d);
  switch (per_thread) {
    case 1:
      launch_pdl("rms_norm_vec_kernel", rms_norm_vec_kernel<T, W, 1, kResidual>, grid, threads, out, out_stride, x,
                 x_stride, residual, res_stride, weight, di, eps);
      break;
    case 2:
      launch_pdl("rms_norm_vec_kernel", rms_norm_vec_kernel<T, W, 2, kResidual>, grid, threads, out, out_stride, x,
                 x_stride, residual, res_stride, weight, di, eps);
      break;
    default:
      launch_pdl("rms_norm_vec_kernel", rms_norm_vec_kernel<T, W, kVecMaxChunks, kResidual>, grid, threads, out,
                 out_stride, x, x_stride, residual, res_stride, weight, di, eps);
      break;
  }
  return true;
}

template <typename T, typename W>
void launch_rms_norm(Tensor& out, const Tensor& x, const Tensor& weight, float eps) {
  const int64_t n = x.size(0);
  if (n == 0) return;
  if (launch_vec<T, W, false>(n, x.size(1), out.data<T>(), out.stride(0), x.data<T>(), x.stride(0), nullptr, 0,
                              weight.data<W>(), eps))
    return;
  rms_norm_kernel<T, W><<<static_cast<unsigned>(n), kThreads, 0, stream()>>>(
      out.data<T>(), out.stride(0), x.data<T>(), x.stride(0), weight.data<W>(), static_cast<int>(x.size(1)), eps);
  check_launch("rms_norm_kernel");
}

template <typename T, typename W>
void launch_fused(Tensor& x, Tensor& residual, const Tensor& weight, float eps) {
  const int64_t n = x.size(0);
  if (n == 0) return;
  if (launch_vec<T, W, true>(n, x.size(1), x.data<T>(), x.stride(0), x.data<T>(), x.stride(0), residual.data<T>(),
                             residual.stride(0), weight.data<W>(), eps))
    return;
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

void register_norm_kernels() {
  ops::rms_norm.register_kernel(DeviceType::kCUDA, rms_norm);
  ops::fused_add_rms_norm.register_kernel(DeviceType::kCUDA, fused_add_rms_norm);
}

}  // namespace llmserve::cuda

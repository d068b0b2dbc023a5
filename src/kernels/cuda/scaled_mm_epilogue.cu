// Element kernels of ops::scaled_mm on CUDA (scaled_mm.cc): the int8 epilogue (i32 accumulator -> scaled out), the
// transpose of per-token-group activation scales into the token-major layout cuBLASLt's VEC128 mode reads, and a
// per-tensor scale broadcast into a vector (cuBLASLt takes outer-vector scales on both operands or on neither).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace llmserve::cuda {
namespace {

// out[i, j] = acc[i, j] * sa(i) * sb(j) (+ bias[j]); sa per tensor (stride 0) or per token, sb per tensor or channel.
template <typename T, typename B>
__global__ void int8_epilogue_kernel(T* out, const int32_t* acc, const float* sa, int64_t sa_stride, const float* sb,
                                     int64_t sb_stride, const B* bias, int64_t n) {
  const int64_t i = blockIdx.x;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  float v = static_cast<float>(acc[i * n + j]) * sa[i * sa_stride] * sb[j * sb_stride];
  if (bias != nullptr) v += load_f(bias + j);
  store_f(out + i * n + j, v);
}

__global__ void transpose_scales_kernel(float* out, const float* in, int64_t m, int64_t groups) {
  const int64_t i = blockIdx.x;
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) out[g * m + i] = in[i * groups + g];
}

__global__ void broadcast_scale_kernel(float* out, const float* scale, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = *scale;
}

}  // namespace

void broadcast_scale(Tensor& out, const Tensor& scale) {
  const int64_t n = out.numel();
  broadcast_scale_kernel<<<ceil_div(n, 256), 256, 0, stream()>>>(out.data<float>(), scale.data<float>(), n);
  check_launch("broadcast_scale_kernel");
}

void scaled_mm_int8_epilogue(Tensor& out, const Tensor& acc, const Tensor& a_scales, const Tensor& b_scales,
                             const Tensor* bias) {
  const int64_t m = acc.size(0), n = acc.size(1);
  const int64_t sa_stride = a_scales.numel() == 1 ? 0 : 1, sb_stride = b_scales.numel() == 1 ? 0 : 1;
  dispatch_float(out.dtype(), "scaled_mm", [&](auto t) {
    using T = decltype(t);
    dim3 grid(static_cast<unsigned>(m), ceil_div(n, 256));
    if (bias == nullptr) {
      int8_epilogue_kernel<T, float><<<grid, 256, 0, stream()>>>(out.data<T>(), acc.data<int32_t>(),
                                                                 a_scales.data<float>(), sa_stride,
                                                                 b_scales.data<float>(), sb_stride, nullptr, n);
    } else {
      dispatch_float(bias->dtype(), "scaled_mm bias", [&](auto b) {
        using B = decltype(b);
        int8_epilogue_kernel<T, B><<<grid, 256, 0, stream()>>>(out.data<T>(), acc.data<int32_t>(),
                                                               a_scales.data<float>(), sa_stride,
                                                               b_scales.data<float>(), sb_stride, bias->data<B>(), n);
      });
    }
    check_launch("int8_epilogue_kernel");
  });
}

void transpose_scales(Tensor& out, const Tensor& in) {
  const int64_t m = in.size(0), groups = in.size(1);
  transpose_scales_kernel<<<static_cast<unsigned>(m), 64, 0, stream()>>>(out.data<float>(), in.data<float>(), m,
                                                                         groups);
  check_launch("transpose_scales_kernel");
}

}  // namespace llmserve::cuda

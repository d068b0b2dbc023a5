// Element kernels of ops::scaled_mm on CUDA (scaled_mm.cc): the scale epilogue of an unscaled accumulator (int8's i32,
// or the f32 of an fp8 GEMM run with unit scales where cuBLASLt has no outer-vector algorithm), the
// per-128-column-block accumulation of the block-scale fallback, the transpose of block scales into the M/N-major
// layouts cuBLASLt's VEC128 mode and CUTLASS's blockwise kernel read, a per-tensor scale broadcast into a vector
// (cuBLASLt takes outer-vector scales on both operands or on neither), and a bias widened to the f32 CUTLASS reads.
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace llmserve::cuda {
namespace {

// out[i, j] = acc[i, j] * sa(i) * sb(j) (+ bias[j]); sa per tensor (stride 0) or per token, sb per tensor or channel.
template <typename T, typename Acc, typename B>
__global__ void scale_epilogue_kernel(T* out, const Acc* acc, const float* sa, int64_t sa_stride, const float* sb,
                                      int64_t sb_stride, const B* bias, int64_t n) {
  const int64_t i = blockIdx.x;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  float v = static_cast<float>(acc[i * n + j]) * sa[i * sa_stride] * sb[j * sb_stride];
  if (bias != nullptr) v += load_f(bias + j);
  store_f(out + i * n + j, v);
}

// Block kb of the 128-column-block fallback: v = partial[i, j] * sa[i, kb] * sb[j / 128, kb] added to total (kb > 0);
// the last block writes out (+ bias) instead of total.
template <typename T, typename B>
__global__ void block_accumulate_kernel(T* out, float* total, const float* partial, const float* sa, int64_t a_groups,
                                        const float* sb, int64_t b_groups, int64_t kb, const B* bias, int64_t n,
                                        bool first, bool last) {
  const int64_t i = blockIdx.x;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  float v = partial[i * n + j] * sa[i * a_groups + kb] * sb[(j / 128) * b_groups + kb];
  if (!first) v += total[i * n + j];
  if (!last) {
    total[i * n + j] = v;
    return;
  }
  if (bias != nullptr) v += load_f(bias + j);
  store_f(out + i * n + j, v);
}

// out [groups, ld] = in [rows, groups] transposed; columns rows..ld of out (the padding TMA's alignment asks for)
// get 0.
__global__ void transpose_scales_kernel(float* out, int64_t ld, const float* in, int64_t rows, int64_t groups) {
  const int64_t i = blockIdx.x;
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) out[g * ld + i] = i < rows ? in[i * groups + g] : 0.f;
}

template <typename T>
__global__ void widen_kernel(float* out, const T* in, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = load_f(in + i);
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

void scaled_mm_scale_epilogue(Tensor& out, const Tensor& acc, const Tensor& a_scales, const Tensor& b_scales,
                              const Tensor* bias) {
  const int64_t m = acc.size(0), n = acc.size(1);
  const int64_t sa_stride = a_scales.numel() == 1 ? 0 : 1, sb_stride = b_scales.numel() == 1 ? 0 : 1;
  dispatch_float(out.dtype(), "scaled_mm", [&](auto t) {
    using T = decltype(t);
    auto launch = [&](auto acc_type) {
      using Acc = decltype(acc_type);
      dim3 grid(static_cast<unsigned>(m), ceil_div(n, 256));
      if (bias == nullptr) {
        scale_epilogue_kernel<T, Acc, float><<<grid, 256, 0, stream()>>>(out.data<T>(), acc.data<Acc>(),
                                                                         a_scales.data<float>(), sa_stride,
                                                                         b_scales.data<float>(), sb_stride, nullptr, n);
      } else {
        dispatch_float(bias->dtype(), "scaled_mm bias", [&](auto b) {
          using B = decltype(b);
          scale_epilogue_kernel<T, Acc, B>
              <<<grid, 256, 0, stream()>>>(out.data<T>(), acc.data<Acc>(), a_scales.data<float>(), sa_stride,
                                           b_scales.data<float>(), sb_stride, bias->data<B>(), n);
        });
      }
      check_launch("scale_epilogue_kernel");
    };
    if (acc.dtype() == DType::kI32) {
      launch(int32_t{});
    } else {
      launch(float{});
    }
  });
}

void scaled_mm_block_accumulate(Tensor& out, Tensor& total, const Tensor& partial, const Tensor& a_scales,
                                const Tensor& b_scales, int64_t kb, const Tensor* bias) {
  const int64_t m = partial.size(0), n = partial.size(1), blocks = a_scales.size(1);
  const bool first = kb == 0, last = kb == blocks - 1;
  dispatch_float(out.dtype(), "scaled_mm", [&](auto t) {
    using T = decltype(t);
    dim3 grid(static_cast<unsigned>(m), ceil_div(n, 256));
    auto launch = [&](auto* bias_ptr) {
      using B = std::remove_cv_t<std::remove_pointer_t<decltype(bias_ptr)>>;
      block_accumulate_kernel<T, B><<<grid, 256, 0, stream()>>>(
          out.data<T>(), total.data<float>(), partial.data<float>(), a_scales.data<float>(), blocks,
          b_scales.data<float>(), b_scales.size(1), kb, bias_ptr, n, first, last);
    };
    if (bias == nullptr) {
      launch(static_cast<const float*>(nullptr));
    } else {
      dispatch_float(bias->dtype(), "scaled_mm bias", [&](auto b) {
        using B = decltype(b);
        launch(bias->data<B>());
      });
    }
    check_launch("block_accumulate_kernel");
  });
}

void transpose_scales(Tensor& out, const Tensor& in) {
  const int64_t rows = in.size(0), groups = in.size(1), ld = out.size(1);
  transpose_scales_kernel<<<static_cast<unsigned>(ld), 64, 0, stream()>>>(out.data<float>(), ld, in.data<float>(), rows,
                                                                          groups);
  check_launch("transpose_scales_kernel");
}

void widen_to_f32(Tensor& out, const Tensor& in) {
  const int64_t n = in.numel();
  dispatch_float(in.dtype(), "scaled_mm bias", [&](auto t) {
    using T = decltype(t);
    widen_kernel<T><<<ceil_div(n, 256), 256, 0, stream()>>>(out.data<float>(), in.data<T>(), n);
  });
  check_launch("widen_kernel");
}

}  // namespace llmserve::cuda

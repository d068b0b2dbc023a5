// silu_and_mul on CUDA: a 2-D grid (rows x chunks of the output row), one element per thread, f32 math.
// Matches the CPU op up to the rounding of bf16 stores.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace llmserve::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void silu_and_mul_kernel(T* out, int64_t out_stride, const T* x, int64_t x_stride, int d) {
  const int j = blockIdx.y * blockDim.x + threadIdx.x;
  if (j >= d) return;
  const T* xr = x + blockIdx.x * x_stride;
  const float g = load_f(xr + j), u = load_f(xr + d + j);
  store_f(out + blockIdx.x * out_stride + j, g / (1.0f + expf(-g)) * u);
}

template <typename T>
void launch(Tensor& out, const Tensor& x) {
  const int64_t n = out.size(0), d = out.size(1);
  if (n == 0 || d == 0) return;
  dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>((d + kThreads - 1) / kThreads));
  silu_and_mul_kernel<T>
      <<<grid, kThreads>>>(out.data<T>(), out.stride(0), x.data<T>(), x.stride(0), static_cast<int>(d));
  check_launch("silu_and_mul_kernel");
}

}  // namespace

void silu_and_mul(Tensor& out, const Tensor& x) {
  if (x.dtype() == DType::kBF16) return launch<__nv_bfloat16>(out, x);
  launch<float>(out, x);
}

}  // namespace llmserve::cuda

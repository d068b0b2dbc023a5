// Elementwise ops on CPU: SiLU-and-multiply (the gated MLP) and in-place add. f32 only.
#include <cmath>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vec.h"

namespace llmserve::cpu {

void silu_and_mul(Tensor& out, const Tensor& x) {
  const int64_t n = out.size(0), d = out.size(1);
  parallel_for(n, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, d)), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* gate = row_ptr<float>(x, i);
      const float* up = gate + d;
      float* o = row_ptr<float>(out, i);
      for (int64_t j = 0; j < d; ++j) o[j] = gate[j] / (1.0f + std::exp(-gate[j])) * up[j];
    }
  });
}

void add(Tensor& a, const Tensor& b) {
  const int64_t n = a.size(0), d = row_numel(a);
  parallel_for(n, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, d)), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) axpy_f32(1.0f, row_ptr<float>(b, i), row_ptr<float>(a, i), d);
  });
}

void register_activation_kernels() {
  ops::silu_and_mul.register_kernel(DeviceType::kCPU, silu_and_mul);
  ops::add.register_kernel(DeviceType::kCPU, add);
}

}  // namespace llmserve::cpu

// Elementwise ops on CPU: SiLU-and-multiply (the gated MLP; also with the dynamic per-token quantization of its
// output fused in) and in-place add. f32 only.
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vec.h"

namespace llmserve::cpu {

namespace {

// o[j] = silu(gate[j]) * up[j], j < d (up = gate + d).
void silu_and_mul_row(const float* gate, float* o, int64_t d) {
  const float* up = gate + d;
  for (int64_t j = 0; j < d; ++j) o[j] = gate[j] / (1.0f + std::exp(-gate[j])) * up[j];
}

int64_t rows_per_chunk(int64_t d) { return std::max<int64_t>(1, 8192 / std::max<int64_t>(1, d)); }

}  // namespace

void silu_and_mul(Tensor& out, const Tensor& x) {
  const int64_t n = out.size(0), d = out.size(1);
  parallel_for(n, rows_per_chunk(d), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) silu_and_mul_row(row_ptr<float>(x, i), row_ptr<float>(out, i), d);
  });
}

// silu_and_mul's row in an f32 scratch, then quantize_row_dynamic: the unfused pair's arithmetic exactly.
void silu_and_mul_quant(Tensor& out, Tensor& scales, const Tensor& x) {
  const int64_t n = out.size(0), d = out.size(1);
  parallel_for(n, rows_per_chunk(d), [&](int64_t begin, int64_t end) {
    std::vector<float> y(static_cast<size_t>(d));
    for (int64_t i = begin; i < end; ++i) {
      silu_and_mul_row(row_ptr<float>(x, i), y.data(), d);
      quantize_row_groups(y.data(), i, out, scales);
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
  ops::silu_and_mul_quant.register_kernel(DeviceType::kCPU, silu_and_mul_quant);
  ops::add.register_kernel(DeviceType::kCPU, add);
}

}  // namespace llmserve::cpu

// RMSNorm and vLLM's fused residual-add + RMSNorm on CPU (f32 activations; f32 or bf16 weight), and both with the
// dynamic per-token quantization of the normed row fused in.
// Each row is independent: rows are split across the thread pool; sums are accumulated in f32 lanes.
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vec.h"

namespace llmserve::cpu {
namespace {

// out = row * rsqrt(mean(row^2) + eps) * weight; out may alias row.
void normalize_row(const float* row, const Tensor& weight, float eps, float* out, int64_t d) {
  const float ms = sum_squares_f32(row, d) / static_cast<float>(d);
  const float r = 1.0f / std::sqrt(ms + eps);
  if (weight.dtype() == DType::kBF16) {
    scale_mul_bf16(row, r, weight.data<bf16_t>(), out, d);
  } else {
    scale_mul_f32(row, r, weight.data<float>(), out, d);
  }
}

int64_t rows_per_chunk(int64_t d) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, d)); }

}  // namespace

void rms_norm(Tensor& out, const Tensor& x, const Tensor& weight, float eps) {
  // [n, d], or [n, h, d] with each n's h rows adjacent (row r = (i, j) at i * stride(0) + j * d).
  const int64_t heads = x.dim() == 3 ? x.size(1) : 1, d = x.size(x.dim() - 1), n = x.size(0) * heads;
  const float* xp = x.data<float>();
  float* op = out.data<float>();
  auto at = [&](int64_t stride, int64_t r) { return (r / heads) * stride + (r % heads) * d; };
  parallel_for(n, rows_per_chunk(d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      normalize_row(xp + at(x.stride(0), r), weight, eps, op + at(out.stride(0), r), d);
    }
  });
}

void fused_add_rms_norm(Tensor& x, Tensor& residual, const Tensor& weight, float eps) {
  const int64_t n = x.size(0), d = x.size(1);
  parallel_for(n, rows_per_chunk(d), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float* xr = row_ptr<float>(x, i);
      float* rr = row_ptr<float>(residual, i);
      axpy_f32(1.0f, xr, rr, d);
      normalize_row(rr, weight, eps, xr, d);
    }
  });
}

// The fused per-token quantizing forms: the normed row in an f32 scratch (normalize_row, as rms_norm writes it),
// then quantize_row_dynamic (as dynamic_scaled_quantize reads it): the unfused pair's arithmetic exactly.
void rms_norm_quant(Tensor& out, Tensor& scales, const Tensor& x, const Tensor& weight, float eps) {
  const int64_t n = x.size(0), d = x.size(1);
  parallel_for(n, rows_per_chunk(d), [&](int64_t begin, int64_t end) {
    std::vector<float> y(static_cast<size_t>(d));
    for (int64_t i = begin; i < end; ++i) {
      normalize_row(row_ptr<float>(x, i), weight, eps, y.data(), d);
      quantize_row_groups(y.data(), i, out, scales);
    }
  });
}

void fused_add_rms_norm_quant(Tensor& out, Tensor& scales, const Tensor& x, Tensor& residual, const Tensor& weight,
                              float eps) {
  const int64_t n = x.size(0), d = x.size(1);
  parallel_for(n, rows_per_chunk(d), [&](int64_t begin, int64_t end) {
    std::vector<float> y(static_cast<size_t>(d));
    for (int64_t i = begin; i < end; ++i) {
      float* rr = row_ptr<float>(residual, i);
      axpy_f32(1.0f, row_ptr<float>(x, i), rr, d);
      normalize_row(rr, weight, eps, y.data(), d);
      quantize_row_groups(y.data(), i, out, scales);
    }
  });
}

void register_norm_kernels() {
  ops::rms_norm.register_kernel(DeviceType::kCPU, rms_norm);
  ops::fused_add_rms_norm.register_kernel(DeviceType::kCPU, fused_add_rms_norm);
  ops::rms_norm_quant.register_kernel(DeviceType::kCPU, rms_norm_quant);
  ops::fused_add_rms_norm_quant.register_kernel(DeviceType::kCPU, fused_add_rms_norm_quant);
}

}  // namespace llmserve::cpu

// Quantized-GEMM ops on CPU, the references the CUDA kernels are tested against: activation quantization
// (dynamic per token / per token-group, static per tensor) and dequantize-then-GEMM for scaled_mm (fp8 / int8) and
// w4a16_linear. Weights are dequantized in row chunks into f32 scratch, so a call holds at most a chunk, never the
// whole weight, in f32.
#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_ops.h"

namespace llmserve::cpu {
namespace {

constexpr int64_t kRowsPerChunk = 256;  // weight rows dequantized per GEMM

float quant_max(DType dtype) { return dtype == DType::kFP8E4M3 ? 448.0f : 127.0f; }

// One quantized value of x / scale (an IEEE division, as the CUDA kernels do).
inline void store_quantized(void* out, DType dtype, int64_t i, float v) {
  if (dtype == DType::kFP8E4M3) {
    static_cast<fp8_e4m3_t*>(out)[i] = f32_to_fp8_e4m3(v);  // saturating, round to nearest even
  } else {
    const float r = std::nearbyint(std::clamp(v, -128.0f, 127.0f));
    static_cast<int8_t*>(out)[i] = static_cast<int8_t>(r);
  }
}

inline float load_quantized(const void* data, DType dtype, int64_t i) {
  return dtype == DType::kFP8E4M3 ? fp8_e4m3_to_f32(static_cast<const fp8_e4m3_t*>(data)[i])
                                  : static_cast<float>(static_cast<const int8_t*>(data)[i]);
}

void dynamic_scaled_quantize(Tensor& out, Tensor& scales, const Tensor& x) {
  const int64_t m = x.size(0), k = x.size(1), groups = scales.size(1), g = k / groups;
  const float qmax = quant_max(out.dtype()), min_scale = 1.0f / (qmax * 512.0f);
  parallel_for(m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* row = x.data<float>() + i * k;
      for (int64_t j = 0; j < groups; ++j) {
        float amax = 0.0f;
        for (int64_t c = j * g; c < (j + 1) * g; ++c) amax = std::max(amax, std::fabs(row[c]));
        const float scale = std::max(amax / qmax, min_scale);
        scales.data<float>()[i * groups + j] = scale;
        for (int64_t c = j * g; c < (j + 1) * g; ++c)
          store_quantized(out.raw_data(), out.dtype(), i * k + c, row[c] / scale);
      }
    }
  });
}

void static_scaled_quantize(Tensor& out, const Tensor& x, const Tensor& scale) {
  const float s = scale.data<float>()[0];
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) store_quantized(out.raw_data(), out.dtype(), i, x.data<float>()[i] / s);
}

// The scale of element (row, col) of an operand whose scales are per tensor ([1]), per row ([rows] or [rows, 1]),
// per row and 128-column group ([rows, cols / 128]) or per 128 x 128 block (block = true).
float scale_at(const Tensor& scales, bool block, int64_t row, int64_t col) {
  const float* s = scales.data<float>();
  if (scales.numel() == 1) return s[0];
  if (block) return s[(row / 128) * scales.size(1) + col / 128];
  if (scales.dim() == 1 || scales.size(1) == 1) return s[row];
  return s[row * scales.size(1) + col / 128];
}

void scaled_mm(Tensor& out, const Tensor& a, const Tensor& a_scales, const Tensor& b, const Tensor& b_scales,
               const Tensor* bias) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  if (m == 0 || n == 0) return;
  const bool b_block = b_scales.dim() == 2;
  Tensor a_f32 = Tensor::empty({m, k}, DType::kF32);
  parallel_for(m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t c = 0; c < k; ++c) {
        a_f32.data<float>()[i * k + c] =
            load_quantized(a.raw_data(), a.dtype(), i * k + c) * scale_at(a_scales, false, i, c);
      }
    }
  });
  for (int64_t r0 = 0; r0 < n; r0 += kRowsPerChunk) {
    const int64_t rows = std::min(kRowsPerChunk, n - r0);
    Tensor w = Tensor::empty({rows, k}, DType::kF32);
    parallel_for(rows, 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        for (int64_t c = 0; c < k; ++c) {
          w.data<float>()[r * k + c] =
              load_quantized(b.raw_data(), b.dtype(), (r0 + r) * k + c) * scale_at(b_scales, b_block, r0 + r, c);
        }
      }
    });
    Tensor out_cols = out.slice(1, r0, r0 + rows);
    if (bias == nullptr) {
      ops::linear(out_cols, a_f32, w, nullptr);
    } else {
      const Tensor bias_rows = bias->slice(0, r0, r0 + rows);
      ops::linear(out_cols, a_f32, w, &bias_rows);
    }
  }
}

void w4a16_linear(Tensor& out, const Tensor& x, const Tensor& qweight, const Tensor& scales, const Tensor& zeros,
                  const Tensor* perm, const Tensor* bias) {
  const int64_t m = x.size(0), k = x.size(1), n = qweight.size(0), groups = scales.size(1), g = k / groups;
  if (m == 0 || n == 0) return;
  // Act-order: W's column c multiplies x[:, perm[c]]; gather x once into W's column order.
  Tensor xp = x;
  if (perm != nullptr) {
    xp = Tensor::empty({m, k}, DType::kF32);
    const int32_t* p = perm->data<int32_t>();
    for (int64_t c = 0; c < k; ++c) CHECK(p[c] >= 0 && p[c] < k) << "w4a16_linear: perm[" << c << "] = " << p[c];
    for (int64_t i = 0; i < m; ++i) {
      const float* src = row_ptr<float>(x, i);
      for (int64_t c = 0; c < k; ++c) xp.data<float>()[i * k + c] = src[p[c]];
    }
  }
  for (int64_t r0 = 0; r0 < n; r0 += kRowsPerChunk) {
    const int64_t rows = std::min(kRowsPerChunk, n - r0);
    Tensor w = Tensor::empty({rows, k}, DType::kF32);
    parallel_for(rows, 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const uint8_t* q = qweight.data<uint8_t>() + (r0 + r) * (k / 2);
        const float* s = scales.data<float>() + (r0 + r) * groups;
        const uint8_t* z = zeros.data<uint8_t>() + (r0 + r) * groups;
        float* dst = w.data<float>() + r * k;
        for (int64_t c = 0; c < k; ++c) {
          const int nibble = (q[c / 2] >> (4 * (c & 1))) & 0xf;
          dst[c] = static_cast<float>(nibble - z[c / g]) * s[c / g];
        }
      }
    });
    Tensor out_cols = out.slice(1, r0, r0 + rows);
    if (bias == nullptr) {
      ops::linear(out_cols, xp, w, nullptr);
    } else {
      const Tensor bias_rows = bias->slice(0, r0, r0 + rows);
      ops::linear(out_cols, xp, w, &bias_rows);
    }
  }
}

}  // namespace

void register_quant_kernels() {
  ops::dynamic_scaled_quantize.register_kernel(DeviceType::kCPU, dynamic_scaled_quantize);
  ops::static_scaled_quantize.register_kernel(DeviceType::kCPU, static_scaled_quantize);
  ops::scaled_mm.register_kernel(DeviceType::kCPU, scaled_mm);
  ops::w4a16_linear.register_kernel(DeviceType::kCPU, w4a16_linear);
}

}  // namespace llmserve::cpu

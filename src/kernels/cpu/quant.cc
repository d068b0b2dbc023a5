// Quantized-GEMM ops on CPU, the references the CUDA kernels are tested against: activation quantization
// (dynamic per token / per token-group, static per tensor) and dequantize-then-GEMM for scaled_mm (fp8 / int8) and
// w4a16_linear / w4a16_gemm (and w4a16_gemm_pack's layout, spelled out). Weights are dequantized in row chunks into f32
// scratch, so a call holds at most a chunk, never the whole weight, in f32.
#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/w4a16_gemm_layout.h"

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

}  // namespace

float quantize_row_dynamic(const float* row, int64_t k, void* out, DType dtype) {
  const float qmax = quant_max(dtype), min_scale = 1.0f / (qmax * 512.0f);
  float amax = 0.0f;
  for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(row[c]));
  const float scale = std::max(amax / qmax, min_scale);
  for (int64_t c = 0; c < k; ++c) store_quantized(out, dtype, c, row[c] / scale);
  return scale;
}

void quantize_row_groups(const float* y, int64_t i, Tensor& out, Tensor& scales) {
  const int64_t d = out.size(1), groups = scales.size(1), g = d / groups;
  for (int64_t j = 0; j < groups; ++j) {  // fp8 and i8 are one byte each: element (i, j g) is byte i d + j g
    scales.data<float>()[i * groups + j] =
        quantize_row_dynamic(y + j * g, g, static_cast<uint8_t*>(out.raw_data()) + i * d + j * g, out.dtype());
  }
}

namespace {

void dynamic_scaled_quantize(Tensor& out, Tensor& scales, const Tensor& x) {
  const int64_t m = x.size(0), k = x.size(1), groups = scales.size(1), g = k / groups;
  parallel_for(m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* row = x.data<float>() + i * k;
      for (int64_t j = 0; j < groups; ++j) {
        // fp8 and i8 are one byte each: element (i, j g) is byte i k + j g.
        scales.data<float>()[i * groups + j] =
            quantize_row_dynamic(row + j * g, g, static_cast<uint8_t*>(out.raw_data()) + i * k + j * g, out.dtype());
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

// x's columns in W's column order (act-order: W's column c multiplies x[:, perm[c]]), or x itself without perm.
Tensor gather_columns(const Tensor& x, const Tensor* perm, const char* op) {
  if (perm == nullptr) return x;
  const int64_t m = x.size(0), k = x.size(1);
  Tensor xp = Tensor::empty({m, k}, DType::kF32);
  const int32_t* p = perm->data<int32_t>();
  for (int64_t c = 0; c < k; ++c) CHECK(p[c] >= 0 && p[c] < k) << op << ": perm[" << c << "] = " << p[c];
  for (int64_t i = 0; i < m; ++i) {
    const float* src = row_ptr<float>(x, i);
    for (int64_t c = 0; c < k; ++c) xp.data<float>()[i * k + c] = src[p[c]];
  }
  return xp;
}

// out [m, n] = xp [m, k] @ W^T (+ bias) with W's rows made in f32 by dequantize_row(r, dst [k]), kRowsPerChunk
// rows at a time.
template <typename DequantizeRow>
void chunked_dequantized_gemm(Tensor& out, const Tensor& xp, int64_t n, const Tensor* bias,
                              DequantizeRow&& dequantize_row) {
  const int64_t k = xp.size(1);
  for (int64_t r0 = 0; r0 < n; r0 += kRowsPerChunk) {
    const int64_t rows = std::min(kRowsPerChunk, n - r0);
    Tensor w = Tensor::empty({rows, k}, DType::kF32);
    parallel_for(rows, 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) dequantize_row(r0 + r, w.data<float>() + r * k);
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

void w4a16_linear(Tensor& out, const Tensor& x, const Tensor& qweight, const Tensor& scales, const Tensor& zeros,
                  const Tensor* perm, const Tensor* bias) {
  const int64_t m = x.size(0), k = x.size(1), n = qweight.size(0), groups = scales.size(1), g = k / groups;
  if (m == 0 || n == 0) return;
  const Tensor xp = gather_columns(x, perm, "w4a16_linear");
  chunked_dequantized_gemm(out, xp, n, bias, [&](int64_t r, float* dst) {
    const uint8_t* q = qweight.data<uint8_t>() + r * (k / 2);
    const float* s = scales.data<float>() + r * groups;
    const uint8_t* z = zeros.data<uint8_t>() + r * groups;
    for (int64_t c = 0; c < k; ++c) {
      const int nibble = (q[c / 2] >> (4 * (c & 1))) & 0xf;
      dst[c] = static_cast<float>(nibble - z[c / g]) * s[c / g];
    }
  });
}

// ---- w4a16_gemm's packed layout (ops.h), spelled out ----

float load16(const Tensor& t, int64_t i, int64_t j) {
  const int64_t at = i * t.stride(0) + j;
  return t.dtype() == DType::kBF16 ? bf16_to_f32(t.data<bf16_t>()[at]) : f16_to_f32(t.data<f16_t>()[at]);
}
void store16(Tensor& t, int64_t i, int64_t j, float v) {
  const int64_t at = i * t.stride(0) + j;
  if (t.dtype() == DType::kBF16) {
    t.data<bf16_t>()[at] = f32_to_bf16(v);
  } else {
    t.data<f16_t>()[at] = f32_to_f16(v);
  }
}

void w4a16_gemm_pack(Tensor& packed, Tensor& gemm_scales, Tensor& gemm_zeros, const Tensor& qweight,
                     const Tensor& scales, const Tensor& zeros) {
  const int64_t n = qweight.size(0), k = qweight.size(1) * 2, groups = scales.size(1), pitch = packed.stride(0);
  uint8_t* dst = packed.data<uint8_t>();
  parallel_for(n / 16, 1, [&](int64_t begin, int64_t end) {  // 16-row bands: whole bytes, no two threads share one
    for (int64_t band = begin; band < end; ++band) {
      for (int64_t r = 16 * band; r < 16 * band + 16; ++r) {
        const uint8_t* q = qweight.data<uint8_t>() + r * (k / 2);
        for (int64_t c = 0; c < k; ++c) {
          const int nibble = ((q[c / 2] >> (4 * (c & 1))) & 0xf) ^ 8;
          const W4NibbleAt at = w4a16_packed_nibble(r, c, pitch);
          uint8_t& byte = dst[at.byte];
          byte = static_cast<uint8_t>((byte & (0xf0 >> at.shift)) | (nibble << at.shift));
        }
      }
    }
  });
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < groups; ++j) {
      const float s = scales.data<float>()[r * groups + j];
      store16(gemm_scales, j, r, s);
      store16(gemm_zeros, j, r, static_cast<float>(8 - zeros.data<uint8_t>()[r * groups + j]) * s);
    }
  }
}

void w4a16_gemm(Tensor& out, const Tensor& x, const Tensor& packed, const Tensor& gemm_scales, const Tensor* gemm_zeros,
                const Tensor* perm, const Tensor* bias) {
  const int64_t m = x.size(0), k = x.size(1), n = out.size(1), groups = gemm_scales.size(0), g = k / groups;
  if (m == 0 || n == 0) return;
  const Tensor xp = gather_columns(x, perm, "w4a16_gemm");
  const uint8_t* src = packed.data<uint8_t>();
  chunked_dequantized_gemm(out, xp, n, bias, [&](int64_t r, float* dst) {
    for (int64_t c = 0; c < k; ++c) {
      const W4NibbleAt at = w4a16_packed_nibble(r, c, packed.stride(0));
      const int nibble = (src[at.byte] >> at.shift) & 0xf;
      const float s = load16(gemm_scales, c / g, r), zt = gemm_zeros != nullptr ? load16(*gemm_zeros, c / g, r) : 0.f;
      dst[c] = static_cast<float>((nibble ^ 8) - 8) * s + zt;
    }
  });
}

}  // namespace

void register_quant_kernels() {
  ops::dynamic_scaled_quantize.register_kernel(DeviceType::kCPU, dynamic_scaled_quantize);
  ops::static_scaled_quantize.register_kernel(DeviceType::kCPU, static_scaled_quantize);
  ops::scaled_mm.register_kernel(DeviceType::kCPU, scaled_mm);
  ops::w4a16_linear.register_kernel(DeviceType::kCPU, w4a16_linear);
  ops::w4a16_gemm_pack.register_kernel(DeviceType::kCPU, w4a16_gemm_pack);
  ops::w4a16_gemm.register_kernel(DeviceType::kCPU, w4a16_gemm);
}

}  // namespace llmserve::cpu

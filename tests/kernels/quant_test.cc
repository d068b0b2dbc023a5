// The quantized-GEMM ops on CPU (kernels/cpu/quant.cc) against double-precision references written as plain loops:
// dynamic / static activation quantization (fp8 e4m3, int8; per token and per 128-group), scaled_mm in every scale
// mode (fp8 and int8), and w4a16_linear with groups, zero points and an act-order permutation; w4a16_gemm on
// w4a16_gemm_pack's layout (ops.h) against the same loops on the 16-bit scales and zero terms it stores, with and
// without zero terms, act-order and row slices. Random shapes include odd m and n that 128 does not divide.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "kernels/ops.h"
#include "test_util.h"

namespace llmserve {
namespace {

using testing::expect_close;
using testing::random_tensor;

float dequant(const Tensor& q, int64_t i) {
  return q.dtype() == DType::kFP8E4M3 ? fp8_e4m3_to_f32(q.data<fp8_e4m3_t>()[i])
                                      : static_cast<float>(q.data<int8_t>()[i]);
}

class QuantizeTest : public ::testing::TestWithParam<DType> {};

TEST_P(QuantizeTest, DynamicPerTokenAndPerGroup) {
  const DType qtype = GetParam();
  const float qmax = qtype == DType::kFP8E4M3 ? 448.f : 127.f;
  uint32_t seed = 1;
  for (int64_t m : {1, 3, 17}) {
    for (int64_t k : {128, 384}) {
      for (int64_t groups : {int64_t{1}, k / 128}) {
        Tensor x = random_tensor({m, k}, seed++, DType::kF32, -5.f, 5.f);
        if (m > 2) std::fill(x.data<float>() + k, x.data<float>() + 2 * k, 0.f);  // an all-zero row
        Tensor q = Tensor::empty({m, k}, qtype), s = Tensor::empty({m, groups}, DType::kF32);
        ops::dynamic_scaled_quantize(q, s, x);
        const int64_t g = k / groups;
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < groups; ++j) {
            double amax = 0;
            for (int64_t c = j * g; c < (j + 1) * g; ++c)
              amax = std::max(amax, std::fabs(double(x.data<float>()[i * k + c])));
            const double scale = std::max(amax / qmax, 1.0 / (qmax * 512.0));
            ASSERT_NEAR(s.data<float>()[i * groups + j], scale, scale * 1e-6) << i << "," << j;
            for (int64_t c = j * g; c < (j + 1) * g; ++c) {
              const double v = x.data<float>()[i * k + c];
              // Within half a quantisation step of the value (fp8: 2^-4 relative above the subnormals).
              const double got = dequant(q, i * k + c) * s.data<float>()[i * groups + j];
              const double step = qtype == DType::kFP8E4M3 ? std::max(std::fabs(v) / 8, scale / 64) : scale;
              ASSERT_LE(std::fabs(got - v), step / 2 + 1e-6) << "x " << v << " got " << got;
            }
          }
        }
      }
    }
  }
}

TEST_P(QuantizeTest, StaticSaturates) {
  const DType qtype = GetParam();
  Tensor x = Tensor::from_f32({0.5f, -1000.f, 1000.f, 0.f, 3.25f, -0.01f}, {2, 3});
  Tensor scale = Tensor::from_f32({0.5f}, {1});
  Tensor q = Tensor::empty({2, 3}, qtype);
  ops::static_scaled_quantize(q, x, scale);
  const float qmax = qtype == DType::kFP8E4M3 ? 448.f : 127.f;
  EXPECT_EQ(dequant(q, 0), 1.f);
  EXPECT_EQ(dequant(q, 1), qtype == DType::kFP8E4M3 ? -qmax : -128.f);
  EXPECT_EQ(dequant(q, 2), qmax);
  EXPECT_EQ(dequant(q, 3), 0.f);
  EXPECT_EQ(dequant(q, 4), qtype == DType::kFP8E4M3 ? 6.5f : 6.f);  // 6.5: exact in e4m3; int8 rounds to even
}

INSTANTIATE_TEST_SUITE_P(Types, QuantizeTest, ::testing::Values(DType::kFP8E4M3, DType::kI8),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Random quantized values: fp8 from a spread of magnitudes, int8 over its range.
Tensor random_quantized(Shape shape, DType dtype, uint32_t seed) {
  Tensor f = random_tensor(shape, seed, DType::kF32, -1.f, 1.f);
  Tensor q = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < f.numel(); ++i) {
    const float v = f.data<float>()[i];
    if (dtype == DType::kFP8E4M3) {
      q.data<fp8_e4m3_t>()[i] = f32_to_fp8_e4m3(v * 300.f);
    } else {
      q.data<int8_t>()[i] = static_cast<int8_t>(std::lround(v * 127.f));
    }
  }
  return q;
}

enum class Mode { kTensor, kTokenChannel, kGroupBlock };

TEST(ScaledMMTest, EveryScaleModeMatchesTheReference) {
  uint32_t seed = 100;
  for (DType dtype : {DType::kFP8E4M3, DType::kI8}) {
    for (Mode mode : {Mode::kTensor, Mode::kTokenChannel, Mode::kGroupBlock}) {
      if (dtype == DType::kI8 && mode == Mode::kGroupBlock) continue;
      for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 64, 128}, {7, 200, 256}, {33, 136, 384}}) {
        Tensor a = random_quantized({m, k}, dtype, seed++), b = random_quantized({n, k}, dtype, seed++);
        Tensor sa, sb;
        if (mode == Mode::kTensor) {
          sa = random_tensor({1}, seed++, DType::kF32, 0.001f, 0.01f);
          sb = random_tensor({1}, seed++, DType::kF32, 0.001f, 0.01f);
        } else if (mode == Mode::kTokenChannel) {
          sa = random_tensor({m, 1}, seed++, DType::kF32, 0.001f, 0.01f);
          sb = random_tensor({n}, seed++, DType::kF32, 0.001f, 0.01f);
        } else {
          sa = random_tensor({m, k / 128}, seed++, DType::kF32, 0.001f, 0.01f);
          sb = random_tensor({(n + 127) / 128, k / 128}, seed++, DType::kF32, 0.001f, 0.01f);
        }
        Tensor bias = random_tensor({n}, seed++);
        Tensor out = Tensor::from_f32(std::vector<float>(m * n, NAN), {m, n});
        ops::scaled_mm(out, a, sa, b, sb, &bias);
        std::vector<double> want(m * n);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double acc = bias.data<float>()[j];
            for (int64_t c = 0; c < k; ++c) {
              double s_a, s_b;
              if (mode == Mode::kTensor) {
                s_a = sa.data<float>()[0], s_b = sb.data<float>()[0];
              } else if (mode == Mode::kTokenChannel) {
                s_a = sa.data<float>()[i], s_b = sb.data<float>()[j];
              } else {
                s_a = sa.data<float>()[i * (k / 128) + c / 128];
                s_b = sb.data<float>()[(j / 128) * (k / 128) + c / 128];
              }
              acc += double(dequant(a, i * k + c)) * s_a * double(dequant(b, j * k + c)) * s_b;
            }
            want[i * n + j] = acc;
          }
        }
        expect_close(out, want, 1e-4, 1e-4,
                     std::string(dtype_name(dtype)) + " mode " + std::to_string(int(mode)) + " m " + std::to_string(m));
      }
    }
  }
}

TEST(W4A16Test, GroupsZerosAndPermutationMatchTheReference) {
  uint32_t seed = 500;
  std::mt19937 rng(7);
  for (auto [m, n, k, groups] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 48, 256, 2}, {5, 72, 128, 1}, {19, 40, 384, 3}}) {
    for (bool permuted : {false, true}) {
      Tensor x = random_tensor({m, k}, seed++);
      Tensor qweight = Tensor::empty({n, k / 2}, DType::kU8);
      for (int64_t i = 0; i < qweight.numel(); ++i) qweight.data<uint8_t>()[i] = static_cast<uint8_t>(rng() & 0xff);
      Tensor scales = random_tensor({n, groups}, seed++, DType::kF32, 0.01f, 0.1f);
      Tensor zeros = Tensor::empty({n, groups}, DType::kU8);
      for (int64_t i = 0; i < zeros.numel(); ++i) zeros.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 17);
      std::vector<int32_t> p(k);
      std::iota(p.begin(), p.end(), 0);
      if (permuted) std::shuffle(p.begin(), p.end(), rng);
      Tensor perm = Tensor::from_i32(p, {k});
      Tensor out = Tensor::from_f32(std::vector<float>(m * n, NAN), {m, n});
      ops::w4a16_linear(out, x, qweight, scales, zeros, permuted ? &perm : nullptr, nullptr);
      const int64_t g = k / groups;
      std::vector<double> want(m * n, 0.0);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t r = 0; r < n; ++r) {
          double acc = 0;
          for (int64_t c = 0; c < k; ++c) {
            const uint8_t byte = qweight.data<uint8_t>()[r * (k / 2) + c / 2];
            const int q = c % 2 == 0 ? byte & 0xf : byte >> 4;
            const double w =
                (q - double(zeros.data<uint8_t>()[r * groups + c / g])) * scales.data<float>()[r * groups + c / g];
            acc += w * x.data<float>()[i * k + p[c]];
          }
          want[i * n + r] = acc;
        }
      }
      expect_close(out, want, 1e-4, 1e-4, "m " + std::to_string(m) + (permuted ? " permuted" : ""));
    }
  }
}

// w4a16_gemm_pack + w4a16_gemm (ops.h's GEMM layout) against a double loop over W = (q - 8) s' + zt' where s', zt' are
// the bf16 scales and zero terms the pack stored (so the bound is tight), and against ops.h's byte map directly: each
// stored nibble is q ^ 8 at the position the formula names. Zero terms absent when every zero is 8 (GPTQ symmetric);
// act-order; a row slice [16, n) of the packed tensors equals those rows of the whole product.
TEST(W4A16Test, GemmLayoutMatchesTheReference) {
  uint32_t seed = 900;
  std::mt19937 rng(11);
  for (auto [m, n, k, groups] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t>{3, 48, 256, 2}, {33, 64, 128, 1}, {7, 32, 384, 3}}) {
    for (int variant = 0; variant < 3; ++variant) {  // 0: zeros 0..16, 1: symmetric (all 8, no zero terms), 2: perm
      Tensor x = random_tensor({m, k}, seed++);
      Tensor qweight = Tensor::empty({n, k / 2}, DType::kU8);
      for (int64_t i = 0; i < qweight.numel(); ++i) qweight.data<uint8_t>()[i] = static_cast<uint8_t>(rng() & 0xff);
      Tensor scales = random_tensor({n, groups}, seed++, DType::kF32, 0.01f, 0.1f);
      Tensor zeros = Tensor::empty({n, groups}, DType::kU8);
      for (int64_t i = 0; i < zeros.numel(); ++i) {
        zeros.data<uint8_t>()[i] = variant == 1 ? 8 : static_cast<uint8_t>(rng() % 17);
      }
      std::vector<int32_t> p(k);
      std::iota(p.begin(), p.end(), 0);
      if (variant == 2) std::shuffle(p.begin(), p.end(), rng);
      Tensor perm = Tensor::from_i32(p, {k});
      Tensor packed = Tensor::empty({k / 16, 8 * n}, DType::kU8);
      Tensor gs = Tensor::empty({groups, n}, DType::kBF16), gz = Tensor::empty({groups, n}, DType::kBF16);
      ops::w4a16_gemm_pack(packed, gs, gz, qweight, scales, zeros);
      const int64_t g = k / groups;
      std::vector<double> want(m * n, 0.0);
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t c = 0; c < k; ++c) {
          const uint8_t byte = qweight.data<uint8_t>()[r * (k / 2) + c / 2];
          const int q = c % 2 == 0 ? byte & 0xf : byte >> 4;
          const int64_t rb = r % 16, cb = c % 16;
          const int64_t nib =
              256 * (r / 16) + 32 * (rb % 8) + rb / 8 + 4 * (cb % 2) + 8 * ((cb / 2) % 4) + 2 * (cb / 8);
          const int stored = (packed.data<uint8_t>()[(c / 16) * 8 * n + nib / 2] >> (4 * (nib % 2))) & 0xf;
          ASSERT_EQ(stored, q ^ 8) << "row " << r << " column " << c;
          const double s = bf16_to_f32(gs.data<bf16_t>()[(c / g) * n + r]);
          const double zt = bf16_to_f32(gz.data<bf16_t>()[(c / g) * n + r]);
          const double s32 = scales.data<float>()[r * groups + c / g];
          const double zt32 = (8.0 - zeros.data<uint8_t>()[r * groups + c / g]) * s32;
          ASSERT_NEAR(s, s32, 4e-3 * s32);  // bf16: rounded once, from f32
          ASSERT_NEAR(zt, zt32, 4e-3 * std::abs(zt32));
          const double w = (q - 8) * s + (variant == 1 ? 0.0 : zt);
          for (int64_t i = 0; i < m; ++i) want[i * n + r] += w * x.data<float>()[i * k + p[c]];
        }
      }
      const std::string what =
          "m " + std::to_string(m) + " n " + std::to_string(n) + " variant " + std::to_string(variant);
      Tensor out = Tensor::from_f32(std::vector<float>(m * n, NAN), {m, n});
      ops::w4a16_gemm(out, x, packed, gs, variant == 1 ? nullptr : &gz, variant == 2 ? &perm : nullptr, nullptr);
      expect_close(out, want, 1e-4, 1e-4, what);
      // Rows [16, n): the packed tensors' column slices (ops.h).
      const int64_t tail = n - 16;
      Tensor rows_out = Tensor::from_f32(std::vector<float>(m * tail, NAN), {m, tail});
      const Tensor packed_rows = packed.slice(1, 8 * 16, 8 * n), gs_rows = gs.slice(1, 16, n),
                   gz_rows = gz.slice(1, 16, n);
      ops::w4a16_gemm(rows_out, x, packed_rows, gs_rows, variant == 1 ? nullptr : &gz_rows,
                      variant == 2 ? &perm : nullptr, nullptr);
      std::vector<double> want_rows(m * tail);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t r = 0; r < tail; ++r) want_rows[i * tail + r] = want[i * n + 16 + r];
      }
      expect_close(rows_out, want_rows, 1e-4, 1e-4, what + " rows 16..n");
    }
  }
}

}  // namespace
}  // namespace llmserve

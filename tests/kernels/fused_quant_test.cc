// The CPU ops with dynamic per-token quantization fused in (rms_norm_quant, fused_add_rms_norm_quant,
// silu_and_mul_quant) against their unfused sequences (the op, then dynamic_scaled_quantize with one group per row):
// bit-identical quantized values and scales, since both share the row arithmetic (ops.h). Random inputs, poisoned
// outputs, odd widths, per token and per group of 128, row-strided inputs, zero rows, all-zero rows; shape errors
// abort naming the op.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/ops.h"
#include "test_util.h"

namespace llmserve {
namespace {

using testing::random_tensor;

// Quantized output and scales filled with garbage, so an unwritten element shows.
struct Quantized {
  Tensor q, scales;
};
Quantized poisoned(int64_t n, int64_t d, DType qtype, int64_t groups = 1) {
  Quantized r{Tensor::empty({n, d}, qtype), Tensor::empty({n, groups}, DType::kF32)};
  if (n * d > 0) std::memset(r.q.raw_data(), 0x5a, static_cast<size_t>(n * d));
  for (int64_t i = 0; i < n * groups; ++i) r.scales.data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
  return r;
}

// Per token (1) and, where 128 divides d, DeepSeek's groups of 128 columns.
std::vector<int64_t> group_counts(int64_t d) {
  if (d % 128 == 0 && d > 128) return {1, d / 128};
  return {1};
}

void expect_same(const Quantized& got, const Quantized& want) {
  ASSERT_EQ(got.q.shape(), want.q.shape());
  ASSERT_EQ(got.scales.shape(), want.scales.shape());
  const int64_t n = got.q.size(0), d = got.q.size(1);
  for (int64_t i = 0; i < got.scales.numel(); ++i) {
    ASSERT_EQ(got.scales.data<float>()[i], want.scales.data<float>()[i]) << "scale " << i;
  }
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::memcmp(static_cast<const uint8_t*>(got.q.raw_data()) + i * d,
                          static_cast<const uint8_t*>(want.q.raw_data()) + i * d, static_cast<size_t>(d)),
              0)
        << "quantized row " << i;
  }
}

// The unfused reference's second half: dynamic_scaled_quantize of y (groups per row).
Quantized quantize(const Tensor& y, DType qtype, int64_t groups = 1) {
  Quantized r = poisoned(y.size(0), y.size(1), qtype, groups);
  ops::dynamic_scaled_quantize(r.q, r.scales, y.is_contiguous() ? y : y.contiguous());
  return r;
}

class FusedQuantTest : public ::testing::TestWithParam<DType> {};

TEST_P(FusedQuantTest, RmsNormQuantIsRmsNormThenQuantize) {
  const DType qtype = GetParam();
  uint32_t seed = 10;
  for (int64_t n : {0, 1, 3, 17}) {
    for (int64_t d : {1, 7, 100, 4096}) {
      for (DType wtype : {DType::kF32, DType::kBF16}) {
        Tensor x = random_tensor({n, d}, seed++, DType::kF32, -4.f, 4.f);
        if (n > 2) std::fill(x.data<float>() + d, x.data<float>() + 2 * d, 0.f);  // an all-zero row
        Tensor w = random_tensor({d}, seed++, wtype, -2.f, 2.f);
        Tensor y = Tensor::empty({n, d}, DType::kF32);
        ops::rms_norm(y, x, w, 1e-5f);
        for (int64_t groups : group_counts(d)) {
          Quantized got = poisoned(n, d, qtype, groups);
          ops::rms_norm_quant(got.q, got.scales, x, w, 1e-5f);
          expect_same(got, quantize(y, qtype, groups));
        }
      }
    }
  }
}

TEST_P(FusedQuantTest, FusedAddRmsNormQuantIsFusedAddRmsNormThenQuantize) {
  const DType qtype = GetParam();
  uint32_t seed = 100;
  for (int64_t n : {0, 1, 5}) {
    for (int64_t d : {3, 64, 1000, 384}) {
      const int64_t groups = group_counts(d).back();
      Tensor x = random_tensor({n, d}, seed++, DType::kF32, -3.f, 3.f);
      Tensor residual = random_tensor({n, d}, seed++, DType::kF32, -3.f, 3.f);
      Tensor w = random_tensor({d}, seed++, DType::kBF16, -2.f, 2.f);
      Tensor x_ref = x.clone(), residual_ref = residual.clone();
      ops::fused_add_rms_norm(x_ref, residual_ref, w, 1e-6f);
      const Tensor x_before = x.clone();
      Quantized got = poisoned(n, d, qtype, groups);
      ops::fused_add_rms_norm_quant(got.q, got.scales, x, residual, w, 1e-6f);
      expect_same(got, quantize(x_ref, qtype, groups));
      ASSERT_EQ(std::memcmp(residual.raw_data(), residual_ref.raw_data(), n * d * 4), 0) << "residual";
      ASSERT_EQ(std::memcmp(x.raw_data(), x_before.raw_data(), n * d * 4), 0) << "x must be left as it was";
    }
  }
}

TEST_P(FusedQuantTest, RowStridedInputs) {
  const DType qtype = GetParam();
  const int64_t n = 6, d = 40;
  // x and the SiLU input as column slices of wider rows (a fused projection's output).
  Tensor wide = random_tensor({n, 3 * d}, 7, DType::kF32, -3.f, 3.f);
  Tensor x = wide.slice(1, d, 2 * d);
  Tensor w = random_tensor({d}, 8, DType::kF32, -1.f, 1.f);
  Tensor y = Tensor::empty({n, d}, DType::kF32);
  ops::rms_norm(y, x, w, 1e-5f);
  Quantized got = poisoned(n, d, qtype);
  ops::rms_norm_quant(got.q, got.scales, x, w, 1e-5f);
  expect_same(got, quantize(y, qtype));
  Tensor gate_up = wide.slice(1, 0, 2 * d);
  ops::silu_and_mul(y, gate_up);
  got = poisoned(n, d, qtype);
  ops::silu_and_mul_quant(got.q, got.scales, gate_up);
  expect_same(got, quantize(y, qtype));
}

TEST_P(FusedQuantTest, SiluAndMulQuantIsSiluAndMulThenQuantize) {
  const DType qtype = GetParam();
  uint32_t seed = 200;
  for (int64_t n : {0, 1, 2, 33}) {
    for (int64_t d : {1, 9, 128, 384, 14336}) {
      if (n * d > 33 * 2048 && n > 2) continue;  // keeps the test fast; the wide row runs at n <= 2
      Tensor x = random_tensor({n, 2 * d}, seed++, DType::kF32, -6.f, 6.f);
      if (n > 1) std::fill(x.data<float>() + 2 * d, x.data<float>() + 3 * d, 0.f);  // row 1: silu(0) * up = 0
      Tensor y = Tensor::empty({n, d}, DType::kF32);
      ops::silu_and_mul(y, x);
      for (int64_t groups : group_counts(d)) {
        Quantized got = poisoned(n, d, qtype, groups);
        ops::silu_and_mul_quant(got.q, got.scales, x);
        expect_same(got, quantize(y, qtype, groups));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, FusedQuantTest, ::testing::Values(DType::kFP8E4M3, DType::kI8),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(FusedQuantDeathTest, BadShapesAbortNamingTheOp) {
  Tensor x = random_tensor({2, 8}, 1), w = random_tensor({8}, 2);
  Tensor q = Tensor::empty({2, 8}, DType::kFP8E4M3);
  Tensor bad_scales = Tensor::empty({2, 3}, DType::kF32), scales = Tensor::empty({2, 1}, DType::kF32);
  EXPECT_DEATH(ops::rms_norm_quant(q, bad_scales, x, w, 1e-5f), "rms_norm_quant: scales");
  Tensor q_bf16 = Tensor::empty({2, 8}, DType::kBF16);
  EXPECT_DEATH(ops::rms_norm_quant(q_bf16, scales, x, w, 1e-5f), "rms_norm_quant: out .* must be fp8_e4m3 or i8");
  EXPECT_DEATH(ops::fused_add_rms_norm_quant(q, scales, x, x, w, 1e-5f), "fused_add_rms_norm_quant: residual");
  Tensor wide_q = Tensor::empty({2, 8}, DType::kI8);
  EXPECT_DEATH(ops::silu_and_mul_quant(wide_q, scales, x), "silu_and_mul_quant: out");
}

}  // namespace
}  // namespace llmserve

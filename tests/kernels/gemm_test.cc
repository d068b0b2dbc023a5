// linear against a double-precision reference: f32 and bf16 weights, with and without (f32 / bf16) bias,
// m = 1 and m > 1, row-strided x and out, through both GEMM backends (oneDNN, and the OpenBLAS fallback).
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"
#include "test_util.h"

namespace llmserve {
namespace {

using testing::random_tensor;
using testing::to_doubles;

struct GemmCase {
  int64_t m, n, k;
};

// Checks out against x @ w^T + bias in double with a tolerance proportional to sum_k |x w| (the scale of the
// rounding error): rel_tol 1e-5 for f32 math; 2^-8 when oneDNN rounds the activations to bf16.
void check_linear(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor* bias, double rel_tol,
                  const std::string& what) {
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  std::vector<double> xs = to_doubles(x), ws = to_doubles(w), got = to_doubles(out), bs;
  if (bias != nullptr) bs = to_doubles(*bias);
  int64_t bad = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = bias != nullptr ? bs[j] : 0.0, abs_sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        sum += xs[i * k + p] * ws[j * k + p];
        abs_sum += std::abs(xs[i * k + p] * ws[j * k + p]);
      }
      const double err = std::abs(got[i * n + j] - sum);
      if (!(err <= 1e-6 + rel_tol * abs_sum)) {
        if (bad++ < 3)
          ADD_FAILURE() << what << ": out[" << i << ", " << j << "] = " << got[i * n + j] << ", want " << sum;
      }
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

class LinearTest : public ::testing::TestWithParam<cpu::GemmBackend> {
 protected:
  void SetUp() override { cpu::set_gemm_backend(GetParam()); }
  void TearDown() override { cpu::set_gemm_backend(cpu::GemmBackend::kOnednn); }
};

TEST_P(LinearTest, MatchesReference) {
  const GemmCase cases[] = {{1, 64, 48}, {1, 300, 768}, {3, 33, 100}, {5, 96, 64}, {70, 130, 257}};
  uint32_t seed = 1000;
  for (const GemmCase& c : cases) {
    for (DType wd : {DType::kF32, DType::kBF16}) {
      for (int bias_kind = 0; bias_kind < 3; ++bias_kind) {  // none, f32, bf16
        Tensor x = random_tensor({c.m, c.k}, seed++);
        Tensor w = random_tensor({c.n, c.k}, seed++, wd, -0.2f, 0.2f);
        Tensor bias = random_tensor({c.n}, seed++, bias_kind == 2 ? DType::kBF16 : DType::kF32);
        const Tensor* b = bias_kind == 0 ? nullptr : &bias;
        Tensor out = Tensor::empty({c.m, c.n}, DType::kF32);
        out.fill(NAN);
        ops::linear(out, x, w, b);
        const bool rounds_x = wd == DType::kBF16 && GetParam() != cpu::GemmBackend::kOpenblas;
        check_linear(out, x, w, b, rounds_x ? 1.0 / 256 : 1e-5,
                     "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " " +
                         std::string(dtype_name(wd)) + " bias=" + std::to_string(bias_kind));
      }
    }
  }
}

TEST_P(LinearTest, RowStridedInputAndOutput) {
  for (DType wd : {DType::kF32, DType::kBF16}) {
    Tensor x_wide = random_tensor({9, 80}, 7);
    Tensor x = x_wide.slice(1, 10, 74);  // [9, 64], row stride 80
    Tensor w = random_tensor({40, 64}, 8, wd);
    Tensor out_wide = Tensor::empty({9, 100}, DType::kF32);
    out_wide.fill(12345.f);
    Tensor out = out_wide.slice(1, 50, 90);  // [9, 40], row stride 100
    Tensor bias = random_tensor({40}, 9);
    ops::linear(out, x, w, &bias);
    const bool rounds_x = wd == DType::kBF16 && GetParam() != cpu::GemmBackend::kOpenblas;
    check_linear(out, x, w, &bias, rounds_x ? 1.0 / 256 : 1e-5, "strided");
    std::vector<double> all = to_doubles(out_wide);
    for (int64_t i = 0; i < 9; ++i) {
      for (int64_t j = 0; j < 100; ++j) {
        if (j < 50 || j >= 90) {
          ASSERT_EQ(all[i * 100 + j], 12345.0) << "wrote outside out at " << i << ", " << j;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, LinearTest,
                         ::testing::Values(cpu::GemmBackend::kOnednn, cpu::GemmBackend::kOnednnOmp,
                                           cpu::GemmBackend::kOpenblas),
                         [](const auto& info) {
                           switch (info.param) {
                             case cpu::GemmBackend::kOnednn:
                               return std::string("OneDnnPool");
                             case cpu::GemmBackend::kOnednnOmp:
                               return std::string("OneDnnOpenmp");
                             default:
                               return std::string("OpenBlas");
                           }
                         });

}  // namespace
}  // namespace llmserve

// ops::linear on CUDA (cuBLASLt) against a double-precision product of the same (dtype-rounded) inputs, for
// m = 1..2048 (m = 1: the GEMV), odd n and k, row-strided x and out (column slices), bias in out's dtype or f32, and f32 logits out
// of 16-bit operands. Tolerance per element: |got - want| <= rtol(out dtype) |want| + 2e-6 sum_k |x w| -- the second
// term is f32 accumulation error; TF32 (10-bit mantissa) would exceed it by ~100x, so f32 stays exact f32.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/ops.h"

namespace llmserve {
namespace {

using gpu_testing::poisoned_strided;
using gpu_testing::to_device;
using gpu_testing::to_device_strided;
using gpu_testing::to_host;
using testing::random_tensor;
using testing::to_doubles;

class CudaGemmTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!gpu_testing::have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  }
};

struct GemmCase {
  int64_t m, n, k;
  int64_t x_pad, out_pad;  // row padding of x / out (0: contiguous)
  bool bias;
  bool bias_f32;
  bool out_f32;
};

void run_case(DType dtype, const GemmCase& c, uint32_t seed) {
  const DType out_dtype = c.out_f32 ? DType::kF32 : dtype;
  Tensor x = random_tensor({c.m, c.k}, seed, dtype, -1.f, 1.f);
  Tensor w = random_tensor({c.n, c.k}, seed + 1, dtype, -1.f, 1.f);
  const DType bias_dtype = c.bias_f32 ? DType::kF32 : out_dtype;
  Tensor b = random_tensor({c.n}, seed + 2, bias_dtype, -1.f, 1.f);
  const std::vector<double> xd = to_doubles(x), wd = to_doubles(w), bd = to_doubles(b);
  std::vector<double> want(static_cast<size_t>(c.m * c.n)), scale(want.size()), pre_bias(want.size());
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double sum = c.bias ? bd[j] : 0.0, mag = c.bias ? std::abs(bd[j]) : 0.0;
      for (int64_t l = 0; l < c.k; ++l) {
        const double p = xd[i * c.k + l] * wd[j * c.k + l];
        sum += p;
        mag += std::abs(p);
      }
      want[i * c.n + j] = sum;
      // A 16-bit out may round before the bias is added (when the bias cannot go into cuBLASLt's epilogue).
      const bool two_roundings = c.bias && out_dtype != DType::kF32;
      scale[i * c.n + j] = mag;
      pre_bias[i * c.n + j] = two_roundings ? std::abs(sum - bd[j]) : 0.0;
    }
  }
  Tensor x_dev = c.x_pad > 0 ? to_device_strided(x, c.x_pad) : to_device(x);
  Tensor out_dev = poisoned_strided(c.m, c.n, c.out_pad, out_dtype);
  Tensor w_dev = to_device(w), b_dev = to_device(b);
  ops::linear(out_dev, x_dev, w_dev, c.bias ? &b_dev : nullptr);
  const std::vector<double> got = to_doubles(to_host(out_dev));
  const double rtol = out_dtype == DType::kF32 ? 1e-6 : gpu_testing::rounding_rtol(out_dtype) / 2;
  int64_t bad = 0;
  size_t worst = 0;
  double worst_excess = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double excess =
        std::abs(got[i] - want[i]) - (rtol * (std::abs(want[i]) + pre_bias[i]) + 2e-6 * scale[i] + 1e-30);
    if (!(excess <= 0)) ++bad;
    if (!(excess <= worst_excess)) {
      worst_excess = std::isnan(excess) ? INFINITY : excess;
      worst = i;
    }
  }
  EXPECT_EQ(bad, 0) << "linear " << dtype_name(dtype) << " m=" << c.m << " n=" << c.n << " k=" << c.k
                    << " x_pad=" << c.x_pad << " out_pad=" << c.out_pad << " bias=" << c.bias
                    << " bias_f32=" << c.bias_f32 << " out=" << dtype_name(out_dtype) << ": " << bad
                    << " elements out of tolerance; worst at " << worst << ": got " << got[worst] << ", want "
                    << want[worst];
}

template <size_t N>
void run_cases(DType dtype, const GemmCase (&cases)[N], uint32_t seed) {
  for (const GemmCase& c : cases) {
    run_case(dtype, c, seed);
    seed += 3;
  }
}

TEST_P(CudaGemmTest, MatchesDoubleReference) {
  const DType dtype = GetParam();
  const GemmCase cases[] = {
      {1, 64, 32, 0, 0, false, false, false},
      {1, 4096, 512, 0, 0, true, false, false},
      {3, 100, 77, 0, 0, true, true, false},
      {7, 257, 129, 8, 0, false, false, false},
      {17, 96, 160, 0, 16, true, false, false},
      {33, 130, 64, 64, 64, true, true, false},
      {128, 384, 256, 0, 0, false, false, false},
      {128, 1000, 96, 32, 0, false, false, true},
      {2048, 256, 128, 0, 0, true, false, false},
      {2048, 96, 64, 128, 32, false, false, true},
      {5, 32768, 64, 0, 0, false, false, true},
      {1, 151936, 16, 0, 0, false, false, true},
      {64, 33, 1, 0, 0, true, false, false},
      {9, 1, 300, 0, 0, false, false, false},
      // m = 2..4 on the GEMV test's shapes: cuBLASLt (the GEMV takes m = 1 only).
      {2, 1000, 264, 8, 4, true, true, false},
      {4, 777, 128, 0, 0, true, false, false},
      {4, 3000, 4096, 16, 0, false, false, true},
      {3, 4096, 1024, 0, 8, true, false, false},
  };
  run_cases(dtype, cases, 1000);
}

// m = 1 with 16-bit operands and k % 8 == 0: the GEMV (f32 operands take cuBLASLt on the same shapes). Its own
// test so compute-sanitizer's racecheck can run it alone (cuBLASLt's split-K kernels report hazards of their own).
TEST_P(CudaGemmTest, GemvMatchesDoubleReference) {
  const DType dtype = GetParam();
  const GemmCase cases[] = {
      // strided x and out, both bias dtypes
      {1, 1000, 264, 8, 4, true, true, false},
      {1, 777, 128, 0, 0, true, false, false},
      {1, 3000, 4096, 16, 0, false, false, true},
      {1, 4096, 1024, 0, 8, true, false, false},
      // GEMV columns split over 2, 4 and 8 warps (narrow n, long k; a tail of words, n not a whole block).
      {1, 2048, 8192, 0, 0, false, false, false},
      {1, 999, 4104, 8, 0, true, false, false},
      {1, 100, 16384, 0, 0, true, true, true},
  };
  run_cases(dtype, cases, 3000);
}

TEST_P(CudaGemmTest, RepeatedShapeReusesItsPlan) {
  // The second call of a shape takes the cached plan; both must produce the right result (new inputs each time).
  const DType dtype = GetParam();
  for (uint32_t seed : {2000u, 2010u}) run_case(dtype, {16, 200, 136, 0, 0, true, false, false}, seed);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaGemmTest, ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace llmserve

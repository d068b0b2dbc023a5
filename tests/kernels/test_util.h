// Helpers for the kernel tests: seeded random tensors and comparisons against double-precision references.
// References live in each test file, written as plain loops independent of the kernels' code.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace llmserve::testing {

// Uniform values in [lo, hi), deterministic for a seed.
inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline Tensor random_tensor(Shape shape, uint32_t seed, DType dtype = DType::kF32, float lo = -1.f, float hi = 1.f) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return Tensor::from_f32(random_floats(static_cast<size_t>(n), seed, lo, hi), std::move(shape), dtype);
}

// Element i of a contiguous tensor of any float dtype, as double.
inline double at(const Tensor& t, int64_t i) {
  float f;
  convert_elements(static_cast<const char*>(t.raw_data()) + i * dtype_size(t.dtype()), t.dtype(), &f, DType::kF32, 1);
  return f;
}

// Contents of a (possibly strided) float tensor as doubles, row-major.
inline std::vector<double> to_doubles(const Tensor& t) {
  Tensor c = t.to(DType::kF32);
  std::vector<double> out(static_cast<size_t>(c.numel()));
  for (int64_t i = 0; i < c.numel(); ++i) out[i] = c.data<float>()[i];
  return out;
}

// Expects |got - want| <= atol + rtol * |want| elementwise; reports the worst element.
inline void expect_close(const Tensor& got, const std::vector<double>& want, double atol, double rtol,
                         const std::string& what = "") {
  std::vector<double> g = to_doubles(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  double worst = 0;
  size_t worst_i = 0;
  int64_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::abs(g[i] - want[i]);
    const double excess = err - (atol + rtol * std::abs(want[i]));
    if (!(excess <= 0)) ++bad;  // NaN counts as bad
    if (!(excess <= worst)) {
      worst = std::isnan(excess) ? INFINITY : excess;
      worst_i = i;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << g.size() << " elements out of tolerance; worst at " << worst_i
                    << ": got " << g[worst_i] << ", want " << want[worst_i];
}

}  // namespace llmserve::testing

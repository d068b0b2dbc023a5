// log_softmax, top_k and argmax against double references and hand-made ties (top_k: lower id first among equal
// values; argmax: lowest id), on seeded random logits of several vocab sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/ops.h"
#include "test_util.h"

namespace llmserve {
namespace {

using testing::expect_close;
using testing::random_tensor;
using testing::to_doubles;

TEST(LogSoftmax, MatchesReferenceAndMayAlias) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 5}, {3, 32000}, {9, 1000}};
  uint32_t seed = 1;
  for (auto [n, v] : shapes) {
    Tensor logits = random_tensor({n, v}, seed++, DType::kF32, -20.f, 20.f);
    std::vector<double> x = to_doubles(logits), want(x.size());
    for (int64_t i = 0; i < n; ++i) {
      const double mx = *std::max_element(x.begin() + i * v, x.begin() + (i + 1) * v);
      double sum = 0;
      for (int64_t j = 0; j < v; ++j) sum += std::exp(x[i * v + j] - mx);
      for (int64_t j = 0; j < v; ++j) want[i * v + j] = x[i * v + j] - mx - std::log(sum);
    }
    Tensor out = Tensor::empty({n, v}, DType::kF32);
    out.fill(NAN);
    ops::log_softmax(out, logits);
    expect_close(out, want, 2e-5, 1e-6, "vocab " + std::to_string(v));
    ops::log_softmax(logits, logits);
    expect_close(logits, want, 2e-5, 1e-6, "in place");
  }
}

// Reference top-k: stable sort of ids by value descending (ties keep ascending id).
void check_top_k(const Tensor& x, int64_t k) {
  const int64_t n = x.size(0), v = x.size(1);
  Tensor values = Tensor::empty({n, k}, DType::kF32), ids = Tensor::empty({n, k}, DType::kI32);
  ops::top_k(values, ids, x, k);
  std::vector<double> xs = to_doubles(x);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t> order(static_cast<size_t>(v));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return xs[i * v + a] > xs[i * v + b]; });
    for (int64_t j = 0; j < k; ++j) {
      ASSERT_EQ(ids.data<int32_t>()[i * k + j], order[j]) << "row " << i << " rank " << j << " k " << k;
      ASSERT_EQ(values.data<float>()[i * k + j], xs[i * v + order[j]]) << "row " << i << " rank " << j;
    }
  }
}

TEST(TopK, MatchesStableSortOnRandomLogits) {
  check_top_k(random_tensor({4, 1000}, 10), 1);
  check_top_k(random_tensor({4, 1000}, 11), 20);
  check_top_k(random_tensor({2, 32000}, 12), 5);
  check_top_k(random_tensor({3, 7}, 13), 7);  // k == vocab: a full sort
}

TEST(TopK, TiesKeepLowerIdFirst) {
  // Values quantised to a few levels, so most ranks are ties.
  std::vector<float> v(3 * 50);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7919) % 5);
  Tensor x = Tensor::from_f32(v, {3, 50});
  check_top_k(x, 12);
  Tensor values = Tensor::empty({1, 3}, DType::kF32), ids = Tensor::empty({1, 3}, DType::kI32);
  ops::top_k(values, ids, Tensor::from_f32({1.f, 3.f, 2.f, 3.f, 3.f}, {1, 5}), 3);
  EXPECT_EQ(ids.data<int32_t>()[0], 1);
  EXPECT_EQ(ids.data<int32_t>()[1], 3);
  EXPECT_EQ(ids.data<int32_t>()[2], 4);
}

TEST(Argmax, MatchesReferenceAndPicksLowestIdOnTies) {
  Tensor x = random_tensor({6, 32000}, 20);
  Tensor out = Tensor::empty({6}, DType::kI32);
  ops::argmax(out, x);
  std::vector<double> xs = to_doubles(x);
  for (int64_t i = 0; i < 6; ++i) {
    auto row = xs.begin() + i * 32000;
    EXPECT_EQ(out.data<int32_t>()[i], std::max_element(row, row + 32000) - row) << "row " << i;
  }
  Tensor ties =
      Tensor::from_f32({0.f, 5.f, 1.f, 5.f, 5.f, /**/ 2.f, 2.f, 2.f, 2.f, 2.f, /**/ -1.f, -3.f, 4.f, 9.f, 9.f}, {3, 5});
  Tensor ids = Tensor::empty({3}, DType::kI32);
  ops::argmax(ids, ties);
  EXPECT_EQ(ids.data<int32_t>()[0], 1);
  EXPECT_EQ(ids.data<int32_t>()[1], 0);
  EXPECT_EQ(ids.data<int32_t>()[2], 3);
}

TEST(Argmax, IgnoresNan) {
  Tensor x = Tensor::from_f32({NAN, 1.f, NAN, 2.f, 0.f}, {1, 5});
  Tensor ids = Tensor::empty({1}, DType::kI32);
  ops::argmax(ids, x);
  EXPECT_EQ(ids.data<int32_t>()[0], 3);
}

}  // namespace
}  // namespace llmserve

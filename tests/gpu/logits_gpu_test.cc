// Logit ops on CUDA against the CPU ops: log_softmax (|gpu - cpu| <= 2e-5 + 1e-6 |cpu|: f32 sums in a different
// order), argmax, top_k and gather_token_logprobs (exact: same ids, same values, same ranks), on vocabularies 17 ..
// 151936, row-strided inputs and outputs, with ties, NaN, -inf and all-NaN rows planted.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/ops.h"

namespace llmserve {
namespace {

using gpu_testing::GpuTest;
using gpu_testing::poisoned_device;
using gpu_testing::poisoned_strided;
using gpu_testing::to_device;
using gpu_testing::to_device_strided;
using gpu_testing::to_host;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Random logits [n, vocab]: normal * 3, quantised to 1/64 when `ties` (many equal values), with NaN / -inf / ties
// planted in some rows.
Tensor random_logits(int64_t n, int64_t vocab, uint32_t seed, bool ties, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 3.f);
  std::vector<float> v(static_cast<size_t>(n * vocab));
  for (float& x : v) {
    x = dist(rng);
    if (ties) x = std::round(x * 64.f) / 64.f;
  }
  if (specials) {
    for (int64_t r = 0; r < n; ++r) {
      float* row = v.data() + r * vocab;
      switch (r % 4) {
        case 0:
          row[rng() % vocab] = kNaN;
          row[rng() % vocab] = -kInf;
          break;
        case 1: {  // the maximum twice
          float mx = row[0];
          for (int64_t j = 0; j < vocab; ++j) mx = std::max(mx, row[j]);
          row[rng() % vocab] = mx + 1.f;
          row[rng() % vocab] = mx + 1.f;
          break;
        }
        default:
          break;
      }
    }
  }
  return Tensor::from_f32(v, {n, vocab});
}

const std::pair<int64_t, int64_t> kLogitShapes[] = {{1, 17}, {3, 1000}, {5, 32768}, {2, 151936}, {64, 4099}};

TEST_F(GpuTest, LogSoftmaxMatchesCpu) {
  uint32_t seed = 1;
  for (auto [n, vocab] : kLogitShapes) {
    Tensor x = random_logits(n, vocab, seed++, false, false);
    Tensor ref = Tensor::empty({n, vocab}, DType::kF32);
    ops::log_softmax(ref, x);
    Tensor out = poisoned_strided(n, vocab, 7, DType::kF32);
    ops::log_softmax(out, to_device_strided(x, 5));
    testing::expect_close(to_host(out), testing::to_doubles(ref), 2e-5, 1e-6,
                          "log_softmax [" + std::to_string(n) + ", " + std::to_string(vocab) + "]");
    Tensor in_place = to_device(x);  // out aliasing logits
    ops::log_softmax(in_place, in_place);
    testing::expect_close(to_host(in_place), testing::to_doubles(ref), 2e-5, 1e-6, "log_softmax in place");
  }
}

TEST_F(GpuTest, ArgmaxMatchesCpuWithTiesAndNaN) {
  uint32_t seed = 100;
  for (auto [n, vocab] : kLogitShapes) {
    for (bool ties : {false, true}) {
      Tensor x = random_logits(n + 1, vocab, seed++, ties, true);
      // The last row all NaN: the CPU picks the last id.
      for (int64_t j = 0; j < vocab; ++j) x.data<float>()[n * vocab + j] = kNaN;
      Tensor ref = Tensor::empty({n + 1}, DType::kI32);
      ops::argmax(ref, x);
      Tensor out = poisoned_device({n + 1}, DType::kI32);
      ops::argmax(out, to_device_strided(x, 3));
      Tensor got = to_host(out);
      for (int64_t r = 0; r <= n; ++r) {
        EXPECT_EQ(got.data<int32_t>()[r], ref.data<int32_t>()[r]) << "argmax row " << r << " vocab " << vocab;
      }
    }
  }
}

TEST_F(GpuTest, TopKMatchesCpuWithTiesAndNaN) {
  uint32_t seed = 200;
  for (auto [n, vocab] : kLogitShapes) {
    for (int64_t k : {1, 5, 8, 9, 20, 32, 100, 1024}) {
      if (k > vocab) continue;
      Tensor x = random_logits(n, vocab, seed++, k % 2 == 0, true);
      Tensor values_ref = Tensor::empty({n, k}, DType::kF32), ids_ref = Tensor::empty({n, k}, DType::kI32);
      ops::top_k(values_ref, ids_ref, x, k);
      Tensor values = poisoned_strided(n, k, 3, DType::kF32), ids = poisoned_strided(n, k, 1, DType::kI32);
      ops::top_k(values, ids, to_device_strided(x, 2), k);
      Tensor got_v = to_host(values), got_i = to_host(ids);
      int64_t bad = 0;
      for (int64_t i = 0; i < n * k; ++i) {
        const float a = got_v.data<float>()[i], b = values_ref.data<float>()[i];
        const bool same_value = (std::isnan(a) && std::isnan(b)) || a == b;
        if (!same_value || got_i.data<int32_t>()[i] != ids_ref.data<int32_t>()[i]) ++bad;
      }
      EXPECT_EQ(bad, 0) << "top_k k=" << k << " [" << n << ", " << vocab << "]";
    }
  }
  // A row with fewer numbers than k: the NaNs follow, lower id first.
  Tensor x = Tensor::from_f32({kNaN, 1.f, kNaN, 2.f, kNaN}, {1, 5});
  Tensor values = poisoned_device({1, 5}, DType::kF32), ids = poisoned_device({1, 5}, DType::kI32);
  ops::top_k(values, ids, to_device(x), 5);
  Tensor got_i = to_host(ids);
  const std::vector<int32_t> want = {3, 1, 0, 2, 4};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(got_i.data<int32_t>()[i], want[i]) << i;
}

TEST_F(GpuTest, GatherTokenLogprobsMatchesCpu) {
  uint32_t seed = 300;
  for (auto [n, vocab] : kLogitShapes) {
    Tensor x = random_logits(n, vocab, seed++, true, false);
    Tensor lp = Tensor::empty({n, vocab}, DType::kF32);
    ops::log_softmax(lp, x);
    std::mt19937 rng(seed++);
    std::vector<int32_t> ids;
    for (int64_t r = 0; r < n; ++r) ids.push_back(static_cast<int32_t>(rng() % vocab));
    Tensor ids_t = Tensor::from_i32(ids, {n});
    Tensor lp_ref = Tensor::empty({n}, DType::kF32), rank_ref = Tensor::empty({n}, DType::kI32);
    ops::gather_token_logprobs(lp_ref, rank_ref, lp, ids_t);
    Tensor lp_dev = poisoned_device({n}, DType::kF32), rank_dev = poisoned_device({n}, DType::kI32);
    ops::gather_token_logprobs(lp_dev, rank_dev, to_device_strided(lp, 4), to_device(ids_t));
    Tensor got_lp = to_host(lp_dev), got_rank = to_host(rank_dev);
    for (int64_t r = 0; r < n; ++r) {
      EXPECT_EQ(got_lp.data<float>()[r], lp_ref.data<float>()[r]) << "row " << r << " vocab " << vocab;
      EXPECT_EQ(got_rank.data<int32_t>()[r], rank_ref.data<int32_t>()[r]) << "row " << r << " vocab " << vocab;
    }
  }
}

}  // namespace
}  // namespace llmserve

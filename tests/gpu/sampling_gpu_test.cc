// The sampler's ops on CUDA: penalties, logit bias, masks and temperature equal to the CPU ops bit for bit (the
// same unfused f32 formulas; logit bias on a repeated id within 1 ulp, its two additions may swap); min-p / top-k /
// top-p masks exact on hand-made rows (vs the full-sort reference) and equal to the CPU on random rows of vocab
// 32768 and 151936 except where exp() differs by an ulp at a threshold (<= 1 token in <= 2% of rows); seeded draws
// the same token as the CPU unless u * total lies within 1e-6 of a CDF boundary; chi-square of GPU draws against
// the exact filtered softmax.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../kernels/sampling_test_util.h"
#include "gpu_test_util.h"
#include "kernels/ops.h"
#include "kernels/philox.h"

namespace llmserve {
namespace {

using gpu_testing::GpuTest;
using gpu_testing::poisoned_device;
using gpu_testing::to_device;
using gpu_testing::to_device_strided;
using gpu_testing::to_host;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Tensor f32s(const std::vector<float>& v) { return Tensor::from_f32(v, {static_cast<int64_t>(v.size())}); }
Tensor i32s(const std::vector<int32_t>& v) {
  return v.empty() ? Tensor::zeros({0}, DType::kI32) : Tensor::from_i32(v, {static_cast<int64_t>(v.size())});
}
Tensor i64s(const std::vector<int64_t>& v) { return Tensor::from_i64(v, {static_cast<int64_t>(v.size())}); }

ops::TokenLists lists(const std::vector<std::vector<int32_t>>& per_row) {
  std::vector<int32_t> offsets{0}, ids;
  for (const auto& v : per_row) {
    ids.insert(ids.end(), v.begin(), v.end());
    offsets.push_back(static_cast<int32_t>(ids.size()));
  }
  return {i32s(offsets), i32s(ids)};
}
ops::TokenLists on_device(const ops::TokenLists& l) { return {to_device(l.offsets), to_device(l.token_ids)}; }

Tensor random_logits(int64_t n, int64_t vocab, uint32_t seed, float sigma = 3.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, sigma);
  std::vector<float> v(static_cast<size_t>(n * vocab));
  for (float& x : v) x = dist(rng);
  return Tensor::from_f32(v, {n, vocab});
}

std::vector<float> row_of(const Tensor& t, int64_t r) {
  const float* p = t.data<float>() + r * t.stride(0);
  return std::vector<float>(p, p + t.size(1));
}

// Bitwise equality of two f32 tensors (NaN equal to NaN); returns the number of differing elements.
int64_t count_different(const Tensor& a, const Tensor& b) {
  int64_t bad = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const float x = a.data<float>()[i], y = b.data<float>()[i];
    if (!(x == y || (std::isnan(x) && std::isnan(y)))) ++bad;
  }
  return bad;
}

std::vector<std::vector<int32_t>> random_lists(int64_t n, int64_t vocab, int max_len, std::mt19937& rng) {
  std::vector<std::vector<int32_t>> out(n);
  for (auto& l : out) {
    const int len = static_cast<int>(rng() % (max_len + 1));
    for (int i = 0; i < len; ++i) {
      // Repeats on purpose: half the ids from a small pool.
      l.push_back(static_cast<int32_t>(rng() % 2 ? rng() % 16 : rng() % vocab));
    }
  }
  return out;
}

TEST_F(GpuTest, ScatterSampledIdsMatchesCpu) {
  std::mt19937 rng(11);
  const int64_t num_tokens = 300, num_sampled = 64;
  std::vector<int32_t> ids(num_tokens), sampled(num_sampled), index;
  for (auto& x : ids) x = static_cast<int32_t>(rng() % 1000);
  for (auto& x : sampled) x = static_cast<int32_t>(rng() % 1000);
  for (int64_t i = 0; i < num_sampled; ++i) {  // distinct positions, rows in any order
    index.push_back(static_cast<int32_t>(i * 4 + 1));
    index.push_back(static_cast<int32_t>((i * 7) % num_sampled));
  }
  Tensor ref = Tensor::from_i32(ids, {num_tokens});
  const Tensor s = Tensor::from_i32(sampled, {num_sampled}), idx = Tensor::from_i32(index, {num_sampled, 2});
  Tensor dev = to_device(ref);
  ops::scatter_sampled_ids(ref, s, idx);
  ops::scatter_sampled_ids(dev, to_device(s), to_device(idx));
  const Tensor got = to_host(dev);
  EXPECT_EQ(std::vector<int32_t>(got.data<int32_t>(), got.data<int32_t>() + num_tokens),
            std::vector<int32_t>(ref.data<int32_t>(), ref.data<int32_t>() + num_tokens));
}

TEST_F(GpuTest, PenaltiesMatchCpuBitForBit) {
  for (int64_t vocab : {1000, 32768, 151936}) {
    const int64_t n = 12;
    std::mt19937 rng(static_cast<uint32_t>(vocab));
    ops::TokenLists prompt = lists(random_lists(n, vocab, 300, rng));
    ops::TokenLists output = lists(random_lists(n, vocab, 200, rng));
    std::vector<float> rep, freq, pres;
    for (int64_t r = 0; r < n; ++r) {
      rep.push_back(r % 3 == 0 ? 1.f : 0.5f + r * 0.13f);
      freq.push_back(r % 4 == 1 ? 0.f : 0.1f * r - 0.4f);
      pres.push_back(r % 5 == 2 ? 0.f : 0.3f - 0.05f * r);
    }
    Tensor x = random_logits(n, vocab, 7);
    Tensor ref = x.clone();
    ops::apply_penalties(ref, {prompt, output, f32s(rep), f32s(freq), f32s(pres)});
    Tensor dev = to_device_strided(x, 9);
    ops::apply_penalties(dev, {on_device(prompt), on_device(output), to_device(f32s(rep)), to_device(f32s(freq)),
                               to_device(f32s(pres))});
    EXPECT_EQ(count_different(to_host(dev), ref), 0) << "penalties vocab " << vocab;
  }
  // By formula on a hand-made row: prompt {1}, output {2, 2, 3}; repetition 2, frequency 0.5, presence 0.25.
  Tensor x = Tensor::from_f32({1.f, 2.f, -2.f, 4.f, 8.f}, {1, 5});
  Tensor dev = to_device(x);
  ops::apply_penalties(dev, {on_device(lists({{1}})), on_device(lists({{2, 2, 3}})), to_device(f32s({2.f})),
                             to_device(f32s({0.5f})), to_device(f32s({0.25f}))});
  const std::vector<float> got = row_of(to_host(dev), 0);
  const std::vector<float> want = {1.f, 2.f / 2, -2.f * 2 - 0.5f * 2 - 0.25f, 4.f / 2 - 0.5f - 0.25f, 8.f};
  for (int j = 0; j < 5; ++j) EXPECT_EQ(got[j], want[j]) << "token " << j;
}

TEST_F(GpuTest, LogitBiasMaskAndTemperatureMatchCpu) {
  const int64_t n = 9, vocab = 32768;
  std::mt19937 rng(5);
  ops::TokenLists bias_ids = lists(random_lists(n, vocab, 40, rng));
  std::vector<float> bias_values;
  for (int64_t i = 0; i < bias_ids.token_ids.size(0); ++i) bias_values.push_back(static_cast<float>(rng() % 200) - 100);
  ops::TokenLists masked = lists(random_lists(n, vocab, 10, rng));
  const std::vector<float> temps = {0.f, 1.f, 0.7f, 1e-6f, kNaN, 1.3f, 2.f, 0.05f, 1e-5f};
  Tensor x = random_logits(n, vocab, 11);
  Tensor ref = x.clone();
  ops::apply_logit_bias(ref, {bias_ids, f32s(bias_values)});
  ops::mask_tokens(ref, masked);
  ops::apply_temperature(ref, f32s(temps));
  Tensor dev = to_device_strided(x, 3);
  ops::apply_logit_bias(dev, {on_device(bias_ids), to_device(f32s(bias_values))});
  ops::mask_tokens(dev, on_device(masked));
  ops::apply_temperature(dev, to_device(f32s(temps)));
  // Bias values are integers and logits ~N(0, 3): two additions on a repeated id may round differently by 1 ulp.
  Tensor got = to_host(dev);
  int64_t bad = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const float a = got.data<float>()[i], b = ref.data<float>()[i];
    if (!(a == b || std::abs(a - b) <= 2.5e-7f * std::abs(b))) ++bad;  // -inf == -inf; NaN never passes
  }
  EXPECT_EQ(bad, 0) << "bias + mask + temperature: " << bad << " of " << got.numel() << " differ";
}

// The structured-output bitmask on CUDA equals the CPU op bit for bit: random masks over vocab 128256 (llama-3) and
// 151936 with rows of all ones, all zeros and a narrow mask, strided logits rows, NaN-poisoned-free random inputs.
TEST_F(GpuTest, TokenBitmaskMatchesCpu) {
  for (const int64_t vocab : {int64_t{128256}, int64_t{151936}}) {
    const int64_t n = 7, words = (vocab + 31) / 32;
    std::mt19937 rng(static_cast<uint32_t>(vocab));
    std::vector<int32_t> mask(static_cast<size_t>(n * words));
    for (auto& w : mask) w = static_cast<int32_t>(rng() & rng());  // about a quarter of the bits set
    std::fill_n(mask.begin() + 1 * words, words, -1);
    std::fill_n(mask.begin() + 2 * words, words, 0);
    std::fill_n(mask.begin() + 3 * words + 100, words - 100, 0);
    Tensor x = random_logits(n, vocab, 23);
    Tensor bitmask = Tensor::from_i32(mask, {n, words});
    Tensor ref = x.clone();
    ops::apply_token_bitmask(ref, bitmask);
    Tensor dev = to_device_strided(x, 5);
    ops::apply_token_bitmask(dev, to_device(bitmask));
    Tensor got = to_host(dev);
    int64_t bad = 0;
    for (int64_t i = 0; i < got.numel(); ++i) bad += got.data<float>()[i] == ref.data<float>()[i] ? 0 : 1;
    EXPECT_EQ(bad, 0) << "vocab " << vocab << ": " << bad << " logits differ";
  }
}

// Filters `x` on the GPU with per-row parameters; returns the result on the host.
Tensor gpu_filtered(const Tensor& x, const std::vector<int32_t>& k, const std::vector<float>& p,
                    const std::vector<float>& min_p) {
  Tensor dev = to_device_strided(x, 5);
  ops::apply_top_k_top_p_min_p(dev, {to_device(i32s(k)), to_device(f32s(p)), to_device(f32s(min_p))});
  return to_host(dev);
}

TEST_F(GpuTest, FiltersExactOnHandMadeRows) {
  struct Case {
    std::vector<float> x;
    int32_t k;
    float p, min_p;
  };
  const float l2 = std::log(2.f), l4 = std::log(4.f);
  const std::vector<Case> cases = {
      {{5, 4, 4, 3, 2, 1}, 2, 1.f, 0.f},             // top-k keeps both ties at the threshold
      {{1, 3, 3, 3, 0, -1}, 1, 1.f, 0.f},            // k = 1 with a three-way tie at the top
      {{0, l2, l4, 0, kNaN, -kInf}, 0, 0.5f, 0.f},   // probs 1/8 2/8 4/8 1/8: p = 0.5 keeps id 2 only
      {{0, l2, l4, 0, kNaN, -kInf}, 0, 0.51f, 0.f},  // ... 0.51 adds id 1
      {{0, l2, l4, 0, 1, -kInf}, 0, 0.f, 0.3f},      // min-p 0.3: keeps exp(v - max) >= 0.3
      {{2, 2, 2, 2, 2, 2}, 0, 0.4f, 0.f},            // all equal: the lowest ids until the mass reaches 0.4
      {{2, 2, 2, 2, 2, 2}, 3, 1.f, 0.f},             // all tied at the k-th: all kept
      {{-kInf, -kInf, -kInf, -kInf, -kInf, -kInf}, 2, 0.5f, 0.1f},  // nothing finite: unchanged
      {{1, kInf, 0, kInf, 3, 2}, 1, 0.5f, 0.f},                     // +inf takes all the mass
      {{3, 1, 2, 0, 5, 4}, 7, 0.999f, 0.f},                         // k >= vocab: off
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    Tensor x = Tensor::from_f32(c.x, {1, static_cast<int64_t>(c.x.size())});
    const std::vector<float> got = row_of(gpu_filtered(x, {c.k}, {c.p}, {c.min_p}), 0);
    Tensor cpu = x.clone();
    ops::apply_top_k_top_p_min_p(cpu, {i32s({c.k}), f32s({c.p}), f32s({c.min_p})});
    const std::vector<float> want = row_of(cpu, 0);
    for (size_t j = 0; j < got.size(); ++j) {
      EXPECT_TRUE(got[j] == want[j] || (std::isnan(got[j]) && std::isnan(want[j])))
          << "case " << i << " token " << j << ": gpu " << got[j] << " cpu " << want[j];
    }
    if (!std::isinf(c.x[1]) && !std::isnan(c.x[4])) {  // the reference takes finite rows
      const std::vector<bool> keep = testing::reference_keep(c.x, c.k, c.p, c.min_p);
      for (size_t j = 0; j < got.size(); ++j) {
        if (c.x[j] == -kInf) continue;
        EXPECT_EQ(got[j] != -kInf, static_cast<bool>(keep[j])) << "case " << i << " token " << j << " vs reference";
      }
    }
  }
}

TEST_F(GpuTest, FiltersMatchCpuOnRandomRows) {
  int64_t rows_total = 0, rows_differing = 0;
  for (int64_t vocab : {32768, 151936}) {
    const int64_t n = 48;
    std::mt19937 rng(static_cast<uint32_t>(vocab) + 1);
    std::vector<int32_t> k;
    std::vector<float> p, min_p;
    for (int64_t r = 0; r < n; ++r) {
      const int kind = static_cast<int>(r % 8);
      k.push_back(kind & 1 ? static_cast<int32_t>(1 + rng() % 2000) : (kind == 6 ? 20 : 0));
      p.push_back(kind & 2 ? 0.05f + 0.9f * static_cast<float>(rng() % 1000) / 1000.f : 1.f);
      min_p.push_back(kind & 4 ? static_cast<float>(rng() % 100) / 1000.f : 0.f);
    }
    // Logits with a realistic spread; some rows quantised to many ties.
    Tensor x = random_logits(n, vocab, static_cast<uint32_t>(vocab) + 2, 2.f);
    for (int64_t r = 0; r < n; r += 5) {
      for (int64_t j = 0; j < vocab; ++j) {
        float& v = x.data<float>()[r * vocab + j];
        v = std::round(v * 8.f) / 8.f;
      }
    }
    Tensor cpu = x.clone();
    ops::apply_top_k_top_p_min_p(cpu, {i32s(k), f32s(p), f32s(min_p)});
    Tensor gpu = gpu_filtered(x, k, p, min_p);
    for (int64_t r = 0; r < n; ++r) {
      int64_t diff = 0;
      for (int64_t j = 0; j < vocab; ++j) {
        const float a = gpu.data<float>()[r * vocab + j], b = cpu.data<float>()[r * vocab + j];
        if (a != b) ++diff;
      }
      ++rows_total;
      if (diff > 0) ++rows_differing;
      EXPECT_LE(diff, 1) << "vocab " << vocab << " row " << r << " k " << k[r] << " p " << p[r] << " min_p "
                         << min_p[r];
    }
  }
  EXPECT_LE(rows_differing * 50, rows_total) << rows_differing << " of " << rows_total << " rows differ";
}

// The CPU's inverse-CDF bookkeeping for one row: is u * total within `tol` * total of the cumulative weight at
// the boundary between tokens a and b? (Then a one-ulp difference in exp() may move the draw between them.)
bool near_boundary(const std::vector<float>& x, int32_t a, int32_t b, double u, double tol) {
  float mx = -kInf;
  for (float v : x) mx = v > mx ? v : mx;
  double total = 0;
  std::vector<double> cumulative(x.size());
  for (size_t j = 0; j < x.size(); ++j) {
    total += x[j] > -kInf ? std::exp(x[j] - mx) : 0.f;
    cumulative[j] = total;
  }
  const double target = u * total;
  return std::abs(cumulative[std::min(a, b)] - target) <= tol * total;
}

TEST_F(GpuTest, SeededSamplesMatchCpu) {
  int64_t rows = 0, mismatches = 0;
  for (int64_t vocab : {100, 32768, 151936}) {
    const int64_t n = vocab > 1000 ? 96 : 512;
    std::mt19937 rng(static_cast<uint32_t>(vocab) + 3);
    std::vector<float> temps;
    std::vector<int64_t> seeds, offsets;
    for (int64_t r = 0; r < n; ++r) {
      temps.push_back(r % 7 == 0 ? 0.f : 0.3f + 0.2f * (r % 5));
      seeds.push_back(static_cast<int64_t>(rng()) << 20 | rng());
      offsets.push_back(r * 3 + 1);
    }
    Tensor x = random_logits(n, vocab, static_cast<uint32_t>(vocab) + 4, 2.f);
    ops::apply_temperature(x, f32s(temps));
    // Filter on the CPU once, so both sides draw from identical logits.
    std::vector<int32_t> k(n, 0);
    std::vector<float> p(n, 1.f), min_p(n, 0.f);
    for (int64_t r = 0; r < n; r += 3) p[r] = 0.9f;
    for (int64_t r = 1; r < n; r += 3) k[r] = 50;
    ops::apply_top_k_top_p_min_p(x, {i32s(k), f32s(p), f32s(min_p)});
    const ops::SampleParams params{f32s(temps), i64s(seeds), i64s(offsets)};
    Tensor cpu_ids = Tensor::empty({n}, DType::kI32);
    ops::sample(cpu_ids, x, params);
    Tensor gpu_ids = poisoned_device({n}, DType::kI32);
    ops::sample(gpu_ids, to_device_strided(x, 2),
                {to_device(params.temperatures), to_device(params.seeds), to_device(params.offsets)});
    Tensor got = to_host(gpu_ids);
    for (int64_t r = 0; r < n; ++r) {
      ++rows;
      const int32_t a = cpu_ids.data<int32_t>()[r], b = got.data<int32_t>()[r];
      if (a == b) continue;
      ++mismatches;
      const double u = philox::uniform(static_cast<uint64_t>(seeds[r]), static_cast<uint64_t>(offsets[r]));
      EXPECT_TRUE(temps[r] != 0.f && near_boundary(row_of(x, r), a, b, u, 1e-6))
          << "vocab " << vocab << " row " << r << ": cpu " << a << " gpu " << b;
    }
  }
  EXPECT_LE(mismatches, 2) << mismatches << " of " << rows << " seeded draws differ from the CPU";
}

TEST_F(GpuTest, SampleChiSquareAgainstFilteredSoftmax) {
  // One 12-token distribution, filtered and drawn on the GPU in 60000 rows (offsets 0..59999, one seed).
  const std::vector<float> base = {1.5f, 0.2f, -0.7f, 2.1f, 0.9f, 0.9f, -2.f, 0.f, 1.1f, -0.3f, 0.4f, 1.8f};
  const int64_t vocab = static_cast<int64_t>(base.size()), n = 60000;
  struct Params {
    float t;
    int32_t k;
    float p, min_p;
  };
  for (const Params& c : {Params{1.f, 0, 1.f, 0.f}, Params{0.7f, 6, 1.f, 0.f}, Params{1.3f, 0, 0.8f, 0.f},
                          Params{0.9f, 8, 0.9f, 0.05f}}) {
    std::vector<float> flat;
    for (int64_t r = 0; r < n; ++r) flat.insert(flat.end(), base.begin(), base.end());
    Tensor dev = to_device(Tensor::from_f32(flat, {n, vocab}));
    std::vector<int64_t> offsets(n);
    for (int64_t r = 0; r < n; ++r) offsets[r] = r;
    Tensor temps = to_device(f32s(std::vector<float>(n, c.t)));
    ops::apply_temperature(dev, temps);
    ops::apply_top_k_top_p_min_p(
        dev, {to_device(i32s(std::vector<int32_t>(n, c.k))), to_device(f32s(std::vector<float>(n, c.p))),
              to_device(f32s(std::vector<float>(n, c.min_p)))});
    Tensor ids = poisoned_device({n}, DType::kI32);
    ops::sample(ids, dev, {temps, to_device(i64s(std::vector<int64_t>(n, 12345))), to_device(i64s(offsets))});
    Tensor got = to_host(ids);
    std::vector<int64_t> counts(vocab, 0);
    for (int64_t r = 0; r < n; ++r) {
      const int32_t id = got.data<int32_t>()[r];
      ASSERT_TRUE(id >= 0 && id < vocab) << id;
      ++counts[id];
    }
    const testing::ChiSquare chi = testing::chi_square(counts, testing::expected_probs(base, c.t, c.k, c.p, c.min_p));
    EXPECT_EQ(chi.impossible_draws, 0) << "t " << c.t << " k " << c.k << " p " << c.p;
    EXPECT_GT(chi.p_value, 1e-4) << "t " << c.t << " k " << c.k << " p " << c.p << ": chi2 " << chi.statistic << " dof "
                                 << chi.dof;
  }
}

TEST_F(GpuTest, GreedyRowsTakeTheArgmaxAndAllMaskedRowsTheirArgmax) {
  Tensor x = Tensor::from_f32({1, 5, 5, 2, -kInf, -kInf, -kInf, -kInf, kNaN, 3, kNaN, 3}, {3, 4});
  Tensor ids = poisoned_device({3}, DType::kI32);
  ops::sample(ids, to_device(x),
              {to_device(f32s({0.f, 1.f, 0.f})), to_device(i64s({1, 2, 3})), to_device(i64s({0, 0, 0}))});
  Tensor got = to_host(ids);
  EXPECT_EQ(got.data<int32_t>()[0], 1);  // greedy: the lower of two tied maxima
  EXPECT_EQ(got.data<int32_t>()[1], 0);  // nothing finite: the argmax (all -inf ties -> id 0)
  EXPECT_EQ(got.data<int32_t>()[2], 1);  // greedy with NaN: NaN never wins
}

}  // namespace
}  // namespace llmserve

// Sampling ops against independent references: Philox known-answer vectors; penalties, logit bias and masks vs
// their formulas; min-p / top-k / top-p masks exact on hand-made rows (ties, p = 1, k = 1, k >= vocab) and vs a
// full-sort reference on random rows; the draw checked by chi-square against softmax(logits / T) after filtering.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "kernels/ops.h"
#include "kernels/philox.h"
#include "sampling_test_util.h"
#include "test_util.h"

namespace llmserve {
namespace {

using testing::chi_square;
using testing::expected_probs;
using testing::random_floats;
using testing::reference_keep;

constexpr float kInf = std::numeric_limits<float>::infinity();

// One row per vector, all the same length.
Tensor rows(const std::vector<std::vector<float>>& values) {
  std::vector<float> flat;
  for (const auto& v : values) flat.insert(flat.end(), v.begin(), v.end());
  return Tensor::from_f32(flat, {static_cast<int64_t>(values.size()), static_cast<int64_t>(values[0].size())});
}

std::vector<float> row(const Tensor& t, int64_t r) {
  const float* p = t.data<float>() + r * t.stride(0);
  return std::vector<float>(p, p + t.size(1));
}

// Tensor::from_f32 / from_i32 memcpy from vector::data(), null for an empty vector: build empty ones directly.
Tensor f32s(const std::vector<float>& v) {
  return v.empty() ? Tensor::empty({0}, DType::kF32) : Tensor::from_f32(v, {static_cast<int64_t>(v.size())});
}
Tensor i32s(const std::vector<int32_t>& v) {
  return v.empty() ? Tensor::empty({0}, DType::kI32) : Tensor::from_i32(v, {static_cast<int64_t>(v.size())});
}

ops::TokenLists lists(const std::vector<std::vector<int32_t>>& per_row) {
  std::vector<int32_t> offsets{0}, ids;
  for (const auto& v : per_row) {
    ids.insert(ids.end(), v.begin(), v.end());
    offsets.push_back(static_cast<int32_t>(ids.size()));
  }
  return {i32s(offsets), i32s(ids)};
}
Tensor i64s(const std::vector<int64_t>& v) { return Tensor::from_i64(v, {static_cast<int64_t>(v.size())}); }

// Filters every row of `logits` with the same parameters; returns the result.
Tensor filtered(Tensor logits, int32_t top_k, float top_p, float min_p) {
  const int64_t n = logits.size(0);
  ops::apply_top_k_top_p_min_p(logits, {i32s(std::vector<int32_t>(n, top_k)), f32s(std::vector<float>(n, top_p)),
                                        f32s(std::vector<float>(n, min_p))});
  return logits;
}

void expect_mask(const std::vector<float>& got, const std::vector<float>& in, const std::vector<bool>& keep,
                 const std::string& what) {
  ASSERT_EQ(got.size(), in.size());
  for (size_t j = 0; j < in.size(); ++j) {
    if (keep[j]) {
      EXPECT_EQ(got[j], in[j]) << what << ": token " << j << " should be kept";
    } else {
      EXPECT_EQ(got[j], -kInf) << what << ": token " << j << " should be masked";
    }
  }
}

std::vector<float> logs(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

TEST(Philox, MatchesRandom123KnownAnswers) {
  struct Case {
    philox::Block counter;
    uint32_t key0, key1;
    philox::Block want;
  };
  const Case cases[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Case& c : cases) {
    const philox::Block got = philox::philox4x32_10(c.counter, c.key0, c.key1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], c.want.v[i]) << "word " << i;
  }
  // uniform(): the top 53 bits of words 0 and 1, scaled into [0, 1).
  const philox::Block zero = philox::philox4x32_10({{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(philox::uniform(0, 0), static_cast<double>(((uint64_t{zero.v[0]} << 32) | zero.v[1]) >> 11) * 0x1p-53);
}

TEST(ChiSquareHelper, KnownQuantiles) {
  EXPECT_NEAR(testing::gamma_q(0.5, 3.841459 / 2), 0.05, 1e-6);    // df 1
  EXPECT_NEAR(testing::gamma_q(5.0, 18.307038 / 2), 0.05, 1e-6);   // df 10
  EXPECT_NEAR(testing::gamma_q(1.0, 7.0), std::exp(-7.0), 1e-12);  // df 2: exp(-x / 2)
  EXPECT_NEAR(testing::gamma_q(50.0, 124.342 / 2), 0.05, 2e-5);    // df 100
  EXPECT_NEAR(testing::gamma_q(50.0, 149.449 / 2), 0.001, 2e-6);   // df 100
}

TEST(ScatterSampledIds, WritesEachPositionFromItsRow) {
  Tensor input_ids = Tensor::from_i32({5, 6, 0, 7, 0, 8}, {6});
  const Tensor sampled = Tensor::from_i32({40, 41, 42}, {3});
  const Tensor index = Tensor::from_i32({2, 1, 4, 0}, {2, 2});  // position 2 <- row 1, position 4 <- row 0
  ops::scatter_sampled_ids(input_ids, sampled, index);
  const std::vector<int32_t> want{5, 6, 41, 7, 40, 8};
  EXPECT_EQ(std::vector<int32_t>(input_ids.data<int32_t>(), input_ids.data<int32_t>() + 6), want);
  ops::scatter_sampled_ids(input_ids, sampled, Tensor::from_i32(std::vector<int32_t>{}, {0, 2}));  // nothing to scatter
  EXPECT_EQ(std::vector<int32_t>(input_ids.data<int32_t>(), input_ids.data<int32_t>() + 6), want);
}

TEST(Penalties, HandMadeRow) {
  Tensor logits = rows({{2.f, -2.f, 1.f, 0.5f, 3.f}});
  ops::apply_penalties(logits, {lists({{0, 0}}), lists({{1, 1, 3}}), f32s({2.f}), f32s({0.5f}), f32s({0.25f})});
  // token 0 (prompt, positive): 2 / 2; token 1 (output x2, negative): -2 * 2 - 0.5 * 2 - 0.25;
  // token 3 (output x1): 0.5 / 2 - 0.5 - 0.25; tokens 2 and 4 untouched.
  const std::vector<float> want{1.f, -5.25f, 1.f, -0.5f, 3.f};
  EXPECT_EQ(row(logits, 0), want);
}

TEST(Penalties, MatchFormulasOnRandomRows) {
  const int64_t n = 6, v = 300;
  std::vector<float> x = random_floats(n * v, 1, -5.f, 5.f);
  std::vector<std::vector<int32_t>> prompts(n), outputs(n);
  std::mt19937 rng(2);
  for (int64_t r = 0; r < n; ++r) {
    for (int i = 0; i < 40; ++i) prompts[r].push_back(static_cast<int32_t>(rng() % 60));  // many repeats
    for (int i = 0; i < static_cast<int>(r * 7); ++i) outputs[r].push_back(static_cast<int32_t>(rng() % 80));
  }
  const std::vector<float> rep{1.f, 1.3f, 0.7f, 1.f, 2.f, 1.1f}, freq{0.f, 0.f, 0.4f, -0.3f, 1.5f, 0.2f},
      pres{0.f, 0.6f, 0.f, 0.5f, -1.f, 0.2f};
  Tensor logits = Tensor::from_f32(x, {n, v});
  ops::apply_penalties(logits, {lists(prompts), lists(outputs), f32s(rep), f32s(freq), f32s(pres)});
  for (int64_t r = 0; r < n; ++r) {
    std::set<int32_t> seen(prompts[r].begin(), prompts[r].end());
    seen.insert(outputs[r].begin(), outputs[r].end());
    std::map<int32_t, int> count;
    for (int32_t t : outputs[r]) ++count[t];
    for (int64_t j = 0; j < v; ++j) {
      double want = x[r * v + j];
      if (seen.count(static_cast<int32_t>(j))) want = want > 0 ? want / rep[r] : want * rep[r];
      if (auto it = count.find(static_cast<int32_t>(j)); it != count.end()) want -= freq[r] * it->second + pres[r];
      EXPECT_NEAR(logits.data<float>()[r * v + j], want, 1e-5 * (1 + std::abs(want))) << "row " << r << " token " << j;
    }
  }
}

TEST(LogitBiasAndMask, AddAndMaskPerRow) {
  Tensor logits = rows({{0.f, 1.f, 2.f, 3.f}, {5.f, 5.f, 5.f, 5.f}, {1.f, 1.f, 1.f, 1.f}});
  ops::apply_logit_bias(logits, {lists({{3, 0}, {}, {2, 2}}), f32s({-1.5f, 10.f, 0.25f, 0.5f})});
  EXPECT_EQ(row(logits, 0), (std::vector<float>{10.f, 1.f, 2.f, 1.5f}));
  EXPECT_EQ(row(logits, 1), (std::vector<float>{5.f, 5.f, 5.f, 5.f}));
  EXPECT_EQ(row(logits, 2), (std::vector<float>{1.f, 1.f, 1.75f, 1.f}));  // a repeated id adds twice
  ops::mask_tokens(logits, lists({{1}, {0, 3}, {}}));
  EXPECT_EQ(row(logits, 0), (std::vector<float>{10.f, -kInf, 2.f, 1.5f}));
  EXPECT_EQ(row(logits, 1), (std::vector<float>{-kInf, 5.f, 5.f, -kInf}));
  EXPECT_EQ(row(logits, 2), (std::vector<float>{1.f, 1.f, 1.75f, 1.f}));
}

// The bitmask against a per-token reference on random rows and masks of a vocabulary that is not a multiple of 32,
// with rows of all ones (untouched), all zeros (everything -inf), a short mask (ids past 32 * words disallowed) and
// strided logits rows.
TEST(TokenBitmask, MatchesPerTokenReference) {
  const int64_t n = 6, vocab = 1000, words = (vocab + 31) / 32;
  std::mt19937 rng(17);
  std::vector<int32_t> mask(static_cast<size_t>(n * words));
  for (auto& w : mask) w = static_cast<int32_t>(rng());
  std::fill_n(mask.begin() + 1 * words, words, -1);           // row 1: all allowed
  std::fill_n(mask.begin() + 2 * words, words, 0);            // row 2: nothing allowed
  std::fill_n(mask.begin() + 4 * words + 10, words - 10, 0);  // row 4: only ids < 320 can be allowed
  std::vector<float> base = random_floats(static_cast<size_t>(n * vocab), 3);
  Tensor storage = Tensor::from_f32(std::vector<float>(static_cast<size_t>(n * (vocab + 24)), 7.f), {n, vocab + 24});
  Tensor logits = storage.slice(1, 0, vocab);
  for (int64_t r = 0; r < n; ++r) std::copy_n(base.data() + r * vocab, vocab, logits.data<float>() + r * (vocab + 24));
  ops::apply_token_bitmask(logits, Tensor::from_i32(mask, {n, words}));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < vocab; ++j) {
      const uint32_t word = static_cast<uint32_t>(mask[r * words + j / 32]);
      const float want = (word >> (j % 32)) & 1u ? base[r * vocab + j] : -kInf;
      ASSERT_EQ(logits.data<float>()[r * (vocab + 24) + j], want) << "row " << r << " token " << j;
    }
    for (int64_t j = vocab; j < vocab + 24; ++j) ASSERT_EQ(storage.data<float>()[r * (vocab + 24) + j], 7.f);
  }
  // A bitmask narrower than the vocabulary: ids at or past 32 * words are disallowed.
  Tensor narrow = rows({std::vector<float>(40, 1.f)});
  ops::apply_token_bitmask(narrow, Tensor::from_i32({-1}, {1, 1}));
  for (int64_t j = 0; j < 40; ++j) EXPECT_EQ(narrow.data<float>()[j], j < 32 ? 1.f : -kInf) << j;
}

TEST(Temperature, DividesSamplingRowsOnly) {
  Tensor logits = rows({{1.f, -2.f, 3.f}, {1.f, -2.f, 3.f}, {1.f, -2.f, 3.f}, {1.f, -2.f, 3.f}});
  ops::apply_temperature(logits, f32s({0.5f, 0.f, 2.f, 9e-6f}));
  EXPECT_EQ(row(logits, 0), (std::vector<float>{2.f, -4.f, 6.f}));
  EXPECT_EQ(row(logits, 1), (std::vector<float>{1.f, -2.f, 3.f}));  // greedy: untouched
  EXPECT_EQ(row(logits, 2), (std::vector<float>{0.5f, -1.f, 1.5f}));
  EXPECT_EQ(row(logits, 3), (std::vector<float>{1.f, -2.f, 3.f}));  // below 1e-5: greedy
}

TEST(TopK, KeepsTiesAtTheThreshold) {
  const std::vector<float> x{1.f, 3.f, 2.f, 3.f, 0.f};
  EXPECT_EQ(row(filtered(rows({x}), 1, 1.f, 0.f), 0), (std::vector<float>{-kInf, 3.f, -kInf, 3.f, -kInf}));
  EXPECT_EQ(row(filtered(rows({x}), 2, 1.f, 0.f), 0), (std::vector<float>{-kInf, 3.f, -kInf, 3.f, -kInf}));
  EXPECT_EQ(row(filtered(rows({x}), 3, 1.f, 0.f), 0), (std::vector<float>{-kInf, 3.f, 2.f, 3.f, -kInf}));
  EXPECT_EQ(row(filtered(rows({x}), 4, 1.f, 0.f), 0), (std::vector<float>{1.f, 3.f, 2.f, 3.f, -kInf}));
  for (int32_t k : {0, -1, 5, 6, 100}) EXPECT_EQ(row(filtered(rows({x}), k, 1.f, 0.f), 0), x) << "k " << k;
  // k = 1 on distinct logits keeps exactly the max.
  EXPECT_EQ(row(filtered(rows({{0.5f, -1.f, 0.7f}}), 1, 1.f, 0.f), 0), (std::vector<float>{-kInf, -kInf, 0.7f}));
}

TEST(TopP, KeepsShortestPrefixReachingP) {
  const std::vector<float> x = logs({0.5, 0.2, 0.2, 0.1});
  auto kept = [&](float p) { return row(filtered(rows({x}), 0, p, 0.f), 0); };
  EXPECT_EQ(kept(0.01f), (std::vector<float>{x[0], -kInf, -kInf, -kInf}));
  EXPECT_EQ(kept(0.45f), (std::vector<float>{x[0], -kInf, -kInf, -kInf}));
  EXPECT_EQ(kept(0.65f), (std::vector<float>{x[0], x[1], -kInf, -kInf}));  // tie 0.2/0.2: lower id first
  EXPECT_EQ(kept(0.75f), (std::vector<float>{x[0], x[1], x[2], -kInf}));
  EXPECT_EQ(kept(0.95f), x);
  EXPECT_EQ(kept(1.f), x);
  // p = 1 is off even with masked tokens present.
  const std::vector<float> masked{1.f, -kInf, 0.f};
  EXPECT_EQ(row(filtered(rows({masked}), 0, 1.f, 0.f), 0), masked);
}

TEST(MinP, KeepsTokensAboveFractionOfMax) {
  const std::vector<float> x = logs({0.5, 0.2, 0.2, 0.1});
  EXPECT_EQ(row(filtered(rows({x}), 0, 1.f, 0.3f), 0), (std::vector<float>{x[0], x[1], x[2], -kInf}));  // >= 0.15
  EXPECT_EQ(row(filtered(rows({x}), 0, 1.f, 0.5f), 0), (std::vector<float>{x[0], -kInf, -kInf, -kInf}));
  EXPECT_EQ(row(filtered(rows({x}), 0, 1.f, 0.19f), 0), x);
  EXPECT_EQ(row(filtered(rows({x}), 0, 1.f, 1.f), 0), (std::vector<float>{x[0], -kInf, -kInf, -kInf}));
}

TEST(Filters, TopPRenormalisesAfterTopK) {
  const std::vector<float> x = logs({0.4, 0.3, 0.2, 0.1});
  // Alone, top-p 0.5 needs tokens 0 and 1 (0.4 < 0.5); after top-k 2 the mass is {4/7, 3/7} and token 0 suffices.
  EXPECT_EQ(row(filtered(rows({x}), 0, 0.5f, 0.f), 0), (std::vector<float>{x[0], x[1], -kInf, -kInf}));
  EXPECT_EQ(row(filtered(rows({x}), 2, 0.5f, 0.f), 0), (std::vector<float>{x[0], -kInf, -kInf, -kInf}));
  // min-p 0.6 (keeps >= 0.24) then top-p 0.55 over {4/7, 3/7}: token 0 alone.
  EXPECT_EQ(row(filtered(rows({x}), 0, 0.55f, 0.6f), 0), (std::vector<float>{x[0], -kInf, -kInf, -kInf}));
}

TEST(Filters, NanBecomesMaskedAndAllMaskedRowStays) {
  EXPECT_EQ(row(filtered(rows({{NAN, 1.f, 2.f}}), 2, 1.f, 0.f), 0), (std::vector<float>{-kInf, 1.f, 2.f}));
  EXPECT_EQ(row(filtered(rows({{-kInf, -kInf}}), 1, 0.5f, 0.5f), 0), (std::vector<float>{-kInf, -kInf}));
  // Out-of-range parameters (the Sampler rejects them) still keep the max: min_p > 1, top_p <= 0.
  EXPECT_EQ(row(filtered(rows({{0.f, 2.f, 1.f}}), 0, 1.f, 1.5f), 0), (std::vector<float>{-kInf, 2.f, -kInf}));
  EXPECT_EQ(row(filtered(rows({{0.f, 2.f, 1.f}}), 0, 0.f, 0.f), 0), (std::vector<float>{-kInf, 2.f, -kInf}));
  EXPECT_EQ(row(filtered(rows({{0.f, 2.f, 1.f}}), 0, -1.f, 0.f), 0), (std::vector<float>{-kInf, 2.f, -kInf}));
}

TEST(Filters, MatchFullSortReferenceOnRandomRows) {
  struct Case {
    int64_t vocab;
    int32_t top_k;
    float top_p, min_p, scale;
  };
  const Case cases[] = {
      {1000, 50, 1.f, 0.f, 3.f},     {1000, 0, 0.9f, 0.f, 3.f},    {1000, 0, 1.f, 0.05f, 3.f},
      {1000, 20, 0.8f, 0.01f, 5.f},  {32000, 0, 0.9f, 0.f, 1.f},   {32000, 40, 0.95f, 0.f, 4.f},
      {32000, 0, 0.5f, 0.001f, 8.f}, {500, 499, 0.99f, 0.f, 0.1f}, {64, 3, 0.3f, 0.f, 2.f},
      {32000, 0, 0.9f, 0.f, 8.f},    {2000, 600, 1.f, 0.f, 1.f},   {2000, 1500, 0.7f, 0.3f, 0.5f},
      {1000, 5, 1.f, 0.2f, 2.f},
  };
  uint32_t seed = 100;
  for (const Case& c : cases) {
    std::vector<float> x = random_floats(c.vocab, seed++, -c.scale, c.scale);
    // Quantise a third of the logits so ties occur at every cut; mask some rows' logits so top-k may exceed the
    // finite count; sort one row ascending (the worst case of the top-k heap).
    for (size_t j = 0; j < x.size(); j += 3) x[j] = std::round(x[j] * 4) / 4;
    if (seed % 3 == 0) {
      for (size_t j = 1; j < x.size(); j += 2) x[j] = -kInf;
    }
    if (seed % 4 == 0) std::sort(x.begin(), x.end());
    const Tensor got = filtered(rows({x, x}), c.top_k, c.top_p, c.min_p);
    const std::vector<bool> keep = reference_keep(x, c.top_k, c.top_p, c.min_p);
    const std::string what = "vocab " + std::to_string(c.vocab) + " k " + std::to_string(c.top_k) + " p " +
                             std::to_string(c.top_p) + " min_p " + std::to_string(c.min_p);
    expect_mask(row(got, 0), x, keep, what);
    expect_mask(row(got, 1), x, keep, what + " (row 1)");
  }
}

TEST(Filters, MatchReferenceOnManyRandomParameters) {
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  const int64_t v = 3000;
  for (uint32_t i = 0; i < 40; ++i) {
    const float scale = 0.1f + 10.f * unit(rng);
    std::vector<float> x = random_floats(v, 1000 + i, -scale, scale);
    for (size_t j = 0; j < x.size(); j += 4) x[j] = std::round(x[j]);  // ties
    const int32_t top_k = i % 3 == 0 ? 0 : static_cast<int32_t>(rng() % v);
    const float top_p = i % 4 == 0 ? 1.f : unit(rng);
    const float min_p = i % 2 == 0 ? 0.f : unit(rng) * 0.2f;
    const Tensor got = filtered(rows({x}), top_k, top_p, min_p);
    expect_mask(row(got, 0), x, reference_keep(x, top_k, top_p, min_p),
                "case " + std::to_string(i) + " k " + std::to_string(top_k) + " p " + std::to_string(top_p) +
                    " min_p " + std::to_string(min_p));
  }
}

// Draws `num_draws` tokens from the same logits, one row per draw: seed fixed, offset = draw index.
std::vector<int64_t> draw_counts(const std::vector<float>& x, float temperature, int32_t top_k, float top_p,
                                 float min_p, int64_t num_draws, int64_t seed) {
  const int64_t v = static_cast<int64_t>(x.size());
  std::vector<float> flat;
  for (int64_t i = 0; i < num_draws; ++i) flat.insert(flat.end(), x.begin(), x.end());
  Tensor logits = Tensor::from_f32(flat, {num_draws, v});
  const Tensor temperatures = f32s(std::vector<float>(num_draws, temperature));
  ops::apply_temperature(logits, temperatures);
  ops::apply_top_k_top_p_min_p(
      logits, {i32s(std::vector<int32_t>(num_draws, top_k)), f32s(std::vector<float>(num_draws, top_p)),
               f32s(std::vector<float>(num_draws, min_p))});
  std::vector<int64_t> offsets(num_draws);
  std::iota(offsets.begin(), offsets.end(), 0);
  Tensor ids = Tensor::empty({num_draws}, DType::kI32);
  ops::sample(ids, logits, {temperatures, i64s(std::vector<int64_t>(num_draws, seed)), i64s(offsets)});
  std::vector<int64_t> counts(v, 0);
  for (int64_t i = 0; i < num_draws; ++i) ++counts.at(ids.data<int32_t>()[i]);
  return counts;
}

TEST(Sample, ChiSquareMatchesFilteredSoftmax) {
  // 20k draws per configuration; fixed seeds make the outcome deterministic, and the 1e-6 threshold leaves room.
  struct Case {
    int64_t vocab;
    float temperature;
    int32_t top_k;
    float top_p, min_p;
  };
  const Case cases[] = {{12, 1.f, 0, 1.f, 0.f},
                        {12, 0.7f, 5, 1.f, 0.f},
                        {40, 1.3f, 0, 0.8f, 0.f},
                        {40, 0.9f, 0, 1.f, 0.1f},
                        {200, 1.f, 30, 0.9f, 0.02f}};
  uint32_t seed = 7;
  for (const Case& c : cases) {
    const std::vector<float> x = random_floats(c.vocab, seed, -2.f, 2.f);
    const std::vector<int64_t> counts = draw_counts(x, c.temperature, c.top_k, c.top_p, c.min_p, 20000, seed);
    const testing::ChiSquare result = chi_square(counts, expected_probs(x, c.temperature, c.top_k, c.top_p, c.min_p));
    EXPECT_EQ(result.impossible_draws, 0) << "vocab " << c.vocab;
    EXPECT_GT(result.p_value, 1e-6) << "vocab " << c.vocab << " T " << c.temperature << ": chi2 " << result.statistic
                                    << " dof " << result.dof;
    EXPECT_GE(result.dof, 3) << "vocab " << c.vocab;
    ++seed;
  }
}

TEST(Sample, ChiSquareRejectsTheWrongDistribution) {
  // The test has power: the same draws are far from the distribution at another temperature.
  const std::vector<float> x = random_floats(12, 7, -2.f, 2.f);
  const std::vector<int64_t> counts = draw_counts(x, 0.7f, 0, 1.f, 0.f, 20000, 1);
  EXPECT_LT(chi_square(counts, expected_probs(x, 1.f, 0, 1.f, 0.f)).p_value, 1e-6);
}

TEST(Sample, IsTheInverseCdfOfThePhiloxUniform) {
  const int64_t n = 64, v = 500;
  const std::vector<float> x = random_floats(n * v, 3, -4.f, 4.f);
  std::vector<int64_t> seeds(n), offsets(n);
  for (int64_t r = 0; r < n; ++r) {
    seeds[r] = 1000 + r * 77;
    offsets[r] = r * r;
  }
  Tensor logits = Tensor::from_f32(x, {n, v}), ids = Tensor::empty({n}, DType::kI32);
  ops::sample(ids, logits, {f32s(std::vector<float>(n, 1.f)), i64s(seeds), i64s(offsets)});
  for (int64_t r = 0; r < n; ++r) {
    const float* row_x = x.data() + r * v;
    const double mx = *std::max_element(row_x, row_x + v);
    double total = 0;
    for (int64_t j = 0; j < v; ++j) total += std::exp(row_x[j] - mx);
    const double target = philox::uniform(seeds[r], offsets[r]) * total;
    double cumulative = 0;
    int64_t want = v - 1;
    for (int64_t j = 0; j < v; ++j) {
      cumulative += std::exp(row_x[j] - mx);
      if (cumulative > target) {
        want = j;
        break;
      }
    }
    EXPECT_EQ(ids.data<int32_t>()[r], want) << "row " << r;
  }
}

TEST(Sample, SeededRowIgnoresBatchCompositionAndPosition) {
  const int64_t v = 50;
  const std::vector<float> x = random_floats(v, 11, -1.f, 1.f);
  const int64_t seed = 424242, steps = 200;
  std::vector<int32_t> alone, crowded, other_seed;
  for (int64_t step = 0; step < steps; ++step) {
    Tensor one = rows({x}), ids = Tensor::empty({1}, DType::kI32);
    ops::sample(ids, one, {f32s({1.f}), i64s({seed}), i64s({step})});
    alone.push_back(ids.data<int32_t>()[0]);
    // The same request at row (step % 5) of a batch of 5 with other logits, seeds and offsets around it.
    std::vector<std::vector<float>> batch;
    std::vector<int64_t> seeds, offsets;
    const int64_t position = step % 5;
    for (int64_t r = 0; r < 5; ++r) {
      const bool ours = r == position;
      batch.push_back(ours ? x : random_floats(v, static_cast<uint32_t>(step * 5 + r), -3.f, 3.f));
      seeds.push_back(ours ? seed : r + 1);
      offsets.push_back(ours ? step : step * 31 + r);
    }
    Tensor logits = rows(batch), batch_ids = Tensor::empty({5}, DType::kI32);
    ops::sample(batch_ids, logits, {f32s(std::vector<float>(5, 1.f)), i64s(seeds), i64s(offsets)});
    crowded.push_back(batch_ids.data<int32_t>()[position]);
    Tensor again = rows({x});
    ops::sample(ids, again, {f32s({1.f}), i64s({seed + 1}), i64s({step})});
    other_seed.push_back(ids.data<int32_t>()[0]);
  }
  EXPECT_EQ(alone, crowded);
  int64_t same = 0;
  for (int64_t i = 0; i < steps; ++i) same += alone[i] == other_seed[i];
  EXPECT_LT(same, steps / 5) << "streams of different seeds should be independent (about 1 in " << v
                             << " positions agree by chance)";
  EXPECT_GT(std::set<int32_t>(alone.begin(), alone.end()).size(), 20u) << "a stream should vary across steps";
}

TEST(Sample, GreedyRowsTakeTheArgmax) {
  Tensor logits =
      rows({{0.f, 2.f, 5.f, 5.f}, {NAN, 1.f, -1.f, 0.f}, {3.f, 1.f, 3.f, 2.f}, {-kInf, -kInf, -kInf, -kInf}});
  Tensor ids = Tensor::empty({4}, DType::kI32);
  ops::sample(ids, logits, {f32s({0.f, 0.f, 1e-6f, 1.f}), i64s({1, 2, 3, 4}), i64s({0, 0, 0, 0})});
  EXPECT_EQ(ids.data<int32_t>()[0], 2);  // ties: lowest id
  EXPECT_EQ(ids.data<int32_t>()[1], 1);  // NaN ranks last
  EXPECT_EQ(ids.data<int32_t>()[2], 0);
  EXPECT_EQ(ids.data<int32_t>()[3], 0);  // nothing finite: argmax rule
  // Random rows too: greedy equals ops::argmax.
  Tensor many = testing::random_tensor({16, 3000}, 5, DType::kF32, -3.f, 3.f);
  Tensor want = Tensor::empty({16}, DType::kI32), got = Tensor::empty({16}, DType::kI32);
  ops::argmax(want, many);
  ops::sample(
      got, many,
      {f32s(std::vector<float>(16, 0.f)), i64s(std::vector<int64_t>(16, 9)), i64s(std::vector<int64_t>(16, 0))});
  for (int64_t r = 0; r < 16; ++r) EXPECT_EQ(got.data<int32_t>()[r], want.data<int32_t>()[r]);
}

TEST(Sample, NeverDrawsMaskedTokens) {
  std::vector<float> x(100, -kInf);
  x[17] = 0.f;
  x[80] = -30.f;  // tiny but positive probability
  x[99] = 1.f;
  const std::vector<int64_t> counts = draw_counts(x, 1.f, 0, 1.f, 0.f, 2000, 3);
  EXPECT_EQ(counts[17] + counts[80] + counts[99], 2000);
  // A single finite token is always drawn.
  std::vector<float> one(10, -kInf);
  one[4] = -100.f;
  EXPECT_EQ(draw_counts(one, 1.f, 0, 1.f, 0.f, 100, 3)[4], 100);
}

TEST(GatherTokenLogprobs, ValuesAndRanks) {
  Tensor logits = testing::random_tensor({3, 200}, 21, DType::kF32, -5.f, 5.f);
  logits.data<float>()[1 * 200 + 7] = logits.data<float>()[1 * 200 + 8] = 9.f;  // a tie at the top of row 1
  Tensor lp = Tensor::empty({3, 200}, DType::kF32);
  ops::log_softmax(lp, logits);
  Tensor values = Tensor::empty({3}, DType::kF32), ranks = Tensor::empty({3}, DType::kI32);
  ops::gather_token_logprobs(values, ranks, lp, i32s({5, 8, 199}));
  const int32_t ids[] = {5, 8, 199};
  for (int64_t r = 0; r < 3; ++r) {
    const float* x = lp.data<float>() + r * 200;
    EXPECT_EQ(values.data<float>()[r], x[ids[r]]);
    int32_t want_rank = 0;
    for (int64_t j = 0; j < 200; ++j) want_rank += x[j] >= x[ids[r]];
    EXPECT_EQ(ranks.data<int32_t>()[r], want_rank);
  }
  EXPECT_EQ(ranks.data<int32_t>()[1], 2);  // tied with token 7: both count
}

TEST(SamplingParams, CheckNamesTheBadField) {
  Tensor logits = rows({{0.f, 1.f}, {1.f, 0.f}});
  ops::SamplingFilterParams filter{i32s({0, 0}), f32s({1.f}), f32s({0.f, 0.f})};
  const Status status = filter.check(logits);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("top_p"), std::string::npos) << status.message();
  ops::SampleParams sample{f32s({1.f, 1.f}), i32s({1, 2}), i64s({0, 0})};
  EXPECT_NE(sample.check(logits).message().find("seeds"), std::string::npos) << sample.check(logits).message();
  ops::PenaltyParams penalties{lists({{}, {}}), lists({{}}), f32s({1.f, 1.f}), f32s({0.f, 0.f}), f32s({0.f, 0.f})};
  EXPECT_NE(penalties.check(logits).message().find("output_tokens.offsets"), std::string::npos);
  ops::SamplingFilterParams good{i32s({0, 0}), f32s({1.f, 1.f}), f32s({0.f, 0.f})};
  EXPECT_TRUE(good.check(logits).ok());
}

TEST(SamplingDeathTest, BadShapesAndIdsAbort) {
  Tensor logits = rows({{0.f, 1.f, 2.f}});
  EXPECT_DEATH(ops::apply_top_k_top_p_min_p(logits, {i32s({0, 0}), f32s({1.f}), f32s({0.f})}),
               "apply_top_k_top_p_min_p: top_k");
  EXPECT_DEATH(ops::mask_tokens(logits, lists({{3}})), "mask_tokens: tokens token id 3 outside vocab 3");
  EXPECT_DEATH(ops::apply_logit_bias(logits, {lists({{0}}), f32s({})}), "apply_logit_bias: logit_bias.values");
  Tensor ids = Tensor::empty({1}, DType::kI32);
  EXPECT_DEATH(ops::gather_token_logprobs(ids, ids, logits, i32s({0})), "out_logprobs");
}

}  // namespace
}  // namespace llmserve

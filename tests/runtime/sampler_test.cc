// Sampler: validation names the row and field; vLLM's order (min_tokens, logit_bias, then penalties, on the
// logits greedy sees; logprobs from the raw logits); seeded requests reproduce across batches and positions;
// unseeded ones follow the engine seed; draws match the filtered softmax by chi-square; the persistent parameter
// arrays (rows kept while the same request sits in them) give what a fresh Sampler gives.
#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "../kernels/sampling_test_util.h"

namespace llmserve {
namespace {

std::vector<float> random_row(int64_t v, uint32_t seed, float scale = 2.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> x(v);
  for (float& f : x) f = dist(rng);
  return x;
}

Tensor batch(const std::vector<std::vector<float>>& rows) {
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return Tensor::from_f32(flat, {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())});
}

SamplerRequest request(const SamplingSettings& s, int64_t step = 0, std::span<const int32_t> prompt = {},
                       std::span<const int32_t> output = {}) {
  return SamplerRequest{&s, prompt, output, step};
}

// Samples one batch; fails the test on an error status.
SamplerOutput run(Sampler& sampler, const std::vector<std::vector<float>>& rows,
                  const std::vector<SamplerRequest>& requests) {
  Tensor logits = batch(rows);
  StatusOr<SamplerOutput> out = sampler.sample(logits, requests);
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  return std::move(out).value();
}

int32_t token(const SamplerOutput& out, int64_t r) { return out.sampled_token_ids.data<int32_t>()[r]; }

TEST(Sampler, ValidationNamesRowAndField) {
  const int64_t v = 10;
  struct Case {
    const char* field;
    void (*edit)(SamplingSettings&);
  };
  const Case cases[] = {
      {"temperature", [](SamplingSettings& s) { s.temperature = -0.5f; }},
      {"top_p", [](SamplingSettings& s) { s.top_p = 0.f; }},
      {"top_p", [](SamplingSettings& s) { s.top_p = 1.5f; }},
      {"top_k", [](SamplingSettings& s) { s.top_k = -2; }},
      {"min_p", [](SamplingSettings& s) { s.min_p = 1.1f; }},
      {"presence_penalty", [](SamplingSettings& s) { s.presence_penalty = 2.5f; }},
      {"frequency_penalty", [](SamplingSettings& s) { s.frequency_penalty = NAN; }},
      {"repetition_penalty", [](SamplingSettings& s) { s.repetition_penalty = 0.f; }},
      {"logit_bias", [](SamplingSettings& s) { s.logit_bias[10] = 1.f; }},
      {"logit_bias", [](SamplingSettings& s) { s.logit_bias[-1] = 1.f; }},
      {"min_tokens", [](SamplingSettings& s) { s.min_tokens = -1; }},
      {"all_stop_token_ids",
       [](SamplingSettings& s) {
         s.all_stop_token_ids = {3, 12};
       }},
      {"logprobs", [](SamplingSettings& s) { s.logprobs = 11; }},
      {"logprobs", [](SamplingSettings& s) { s.logprobs = -2; }},
  };
  const SamplingSettings good;
  for (const Case& c : cases) {
    SamplingSettings bad_settings;
    c.edit(bad_settings);
    Sampler sampler;
    Tensor logits = batch({random_row(v, 1), random_row(v, 2)});
    const std::vector<SamplerRequest> requests{request(good), request(bad_settings)};
    StatusOr<SamplerOutput> out = sampler.sample(logits, requests);
    ASSERT_FALSE(out.ok()) << c.field;
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find("request row 1"), std::string::npos) << out.status().message();
    EXPECT_NE(out.status().message().find(c.field), std::string::npos) << out.status().message();
  }
  // Token ids the penalties would read must be inside the vocabulary too.
  SamplingSettings penalised;
  penalised.repetition_penalty = 1.2f;
  const std::vector<int32_t> bad_prompt{1, 2, 10};
  Sampler sampler;
  Tensor logits = batch({random_row(v, 3)});
  const std::vector<SamplerRequest> requests{request(penalised, 0, bad_prompt)};
  StatusOr<SamplerOutput> out = sampler.sample(logits, requests);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("prompt_token_ids[2]"), std::string::npos) << out.status().message();
}

TEST(Sampler, MinTokensSuppressesStopIdsUntilReached) {
  SamplingSettings s;
  s.temperature = 0.f;
  s.min_tokens = 2;
  s.all_stop_token_ids = {3, 5};
  const std::vector<float> x{0.f, 1.f, 2.f, 9.f, 0.f, 8.f};  // stop ids 3 and 5 lead
  Sampler sampler;
  for (int64_t step : {0, 1, 2, 3}) {
    const SamplerOutput out = run(sampler, {x}, {request(s, step)});
    EXPECT_EQ(token(out, 0), step < 2 ? 2 : 3) << "step " << step;
  }
}

TEST(Sampler, BiasThenPenaltiesDecideTheGreedyToken) {
  // vLLM applies logit_bias before the penalties: token 0 goes 1 -> 4 (bias) -> 2 (repetition 2) and loses to
  // token 1 (3). Penalising first would give 0.5 + 3 = 3.5 and pick token 0.
  SamplingSettings s;
  s.temperature = 0.f;
  s.logit_bias = {{0, 3.f}};
  s.repetition_penalty = 2.f;
  const std::vector<int32_t> output{0};
  Sampler sampler;
  EXPECT_EQ(token(run(sampler, {{1.f, 3.f, 0.f}}, {request(s, 1, {}, output)}), 0), 1);
  // Frequency and presence penalties: token 2 seen three times loses 3 * 0.5 + 1 = 2.5 and drops below token 0.
  SamplingSettings f;
  f.temperature = 0.f;
  f.frequency_penalty = 0.5f;
  f.presence_penalty = 1.f;
  const std::vector<int32_t> repeats{2, 2, 2};
  EXPECT_EQ(token(run(sampler, {{3.f, 0.f, 5.f}}, {request(f, 3, {}, repeats)}), 0), 0);
  // Repetition penalty on a prompt token: 4 / 2 = 2 < 3.
  SamplingSettings r;
  r.temperature = 0.f;
  r.repetition_penalty = 2.f;
  const std::vector<int32_t> prompt{0};
  EXPECT_EQ(token(run(sampler, {{4.f, 3.f, 0.f}}, {request(r, 0, prompt)}), 0), 1);
}

TEST(Sampler, LogprobsComeFromTheRawLogits) {
  const int64_t v = 100;
  const std::vector<std::vector<float>> rows{random_row(v, 11, 4.f), random_row(v, 12, 4.f), random_row(v, 13, 4.f)};
  SamplingSettings processed;  // everything that changes the logits before the draw
  processed.temperature = 0.5f;
  processed.top_k = 10;
  processed.logit_bias = {{7, 5.f}};
  processed.repetition_penalty = 1.5f;
  processed.seed = 3;
  processed.logprobs = 5;
  SamplingSettings greedy;
  greedy.temperature = 0.f;
  greedy.logprobs = 0;
  SamplingSettings none;
  const std::vector<int32_t> prompt{1, 2, 3};
  Sampler sampler;
  const SamplerOutput out = run(sampler, rows, {request(processed, 0, prompt), request(greedy), request(none)});
  ASSERT_TRUE(out.logprobs.defined());
  ASSERT_EQ(out.logprobs.shape(), (Shape{3, 6}));
  ASSERT_EQ(out.logprob_token_ids.shape(), (Shape{3, 6}));
  for (int64_t r = 0; r < 2; ++r) {
    const std::vector<float>& x = rows[r];
    const double mx = *std::max_element(x.begin(), x.end());
    double sum = 0;
    for (float f : x) sum += std::exp(f - mx);
    auto logprob = [&](int32_t id) { return x[id] - mx - std::log(sum); };
    const int32_t sampled = token(out, r);
    EXPECT_EQ(out.logprob_token_ids.data<int32_t>()[r * 6], sampled);
    EXPECT_NEAR(out.logprobs.data<float>()[r * 6], logprob(sampled), 2e-5) << "row " << r;
    int32_t rank = 0;
    for (int64_t j = 0; j < v; ++j) rank += x[j] >= x[sampled];
    EXPECT_EQ(out.sampled_token_ranks.data<int32_t>()[r], rank);
    if (r == 0) {  // the top 5 by raw logit, descending
      std::vector<int32_t> order(v);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
      for (int64_t i = 0; i < 5; ++i) {
        EXPECT_EQ(out.logprob_token_ids.data<int32_t>()[1 + i], order[i]) << "rank " << i;
        EXPECT_NEAR(out.logprobs.data<float>()[1 + i], logprob(order[i]), 2e-5) << "rank " << i;
      }
    }
  }
  // The greedy row's token is the raw argmax (no processing on it), so its rank is 1.
  EXPECT_EQ(out.sampled_token_ranks.data<int32_t>()[1], 1);
  // No logprobs asked for: none returned.
  const SamplerOutput plain = run(sampler, {rows[2]}, {request(none)});
  EXPECT_FALSE(plain.logprobs.defined());
  // -1: the whole vocabulary.
  SamplingSettings all;
  all.logprobs = -1;
  const SamplerOutput full = run(sampler, {rows[2]}, {request(all)});
  EXPECT_EQ(full.logprobs.shape(), (Shape{1, v + 1}));
}

// The tokens request `s` gets at steps [0, steps), sampled alone or amid other requests at varying rows.
std::vector<int32_t> stream(const SamplingSettings& s, const std::vector<float>& x, int64_t steps, bool crowded,
                            uint64_t engine_seed) {
  Sampler sampler(engine_seed);
  SamplingSettings other_seeded;
  other_seeded.seed = 99;
  other_seeded.top_p = 0.8f;
  SamplingSettings unseeded;
  unseeded.temperature = 1.5f;
  std::vector<int32_t> tokens;
  for (int64_t step = 0; step < steps; ++step) {
    if (!crowded) {
      tokens.push_back(token(run(sampler, {x}, {request(s, step)}), 0));
      continue;
    }
    const int64_t n = 2 + step % 4, position = step % n;
    std::vector<std::vector<float>> rows;
    std::vector<SamplerRequest> requests;
    for (int64_t r = 0; r < n; ++r) {
      rows.push_back(r == position ? x
                                   : random_row(static_cast<int64_t>(x.size()), static_cast<uint32_t>(step * 7 + r)));
      requests.push_back(r == position ? request(s, step) : request(r % 2 ? other_seeded : unseeded, step + r));
    }
    tokens.push_back(token(run(sampler, rows, requests), position));
  }
  return tokens;
}

TEST(Sampler, SeededRequestIgnoresBatchAndEngineSeed) {
  const std::vector<float> x = random_row(64, 5, 1.f);
  SamplingSettings s;
  s.seed = 1234;
  s.temperature = 0.9f;
  s.top_k = 40;
  const std::vector<int32_t> alone = stream(s, x, 120, false, 1);
  EXPECT_EQ(stream(s, x, 120, true, 2), alone);
  EXPECT_GT(std::set<int32_t>(alone.begin(), alone.end()).size(), 15u);
  SamplingSettings other = s;
  other.seed = 1235;
  const std::vector<int32_t> different = stream(other, x, 120, false, 1);
  int64_t same = 0;
  for (size_t i = 0; i < alone.size(); ++i) same += alone[i] == different[i];
  EXPECT_LT(same, 20) << "different seeds should give independent streams";
}

TEST(Sampler, UnseededRequestsFollowTheEngineSeed) {
  const std::vector<float> x = random_row(64, 6, 1.f);
  const SamplingSettings s;
  const std::vector<int32_t> a = stream(s, x, 100, false, 7), b = stream(s, x, 100, false, 7);
  const std::vector<int32_t> c = stream(s, x, 100, false, 8);
  EXPECT_EQ(a, b);
  int64_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == c[i];
  EXPECT_LT(same, 20);
  EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 15u) << "each call should advance the stream";
}

// 20k draws of one request's distribution in a single batch (seeded: step = row; unseeded: row streams).
TEST(Sampler, DrawsMatchTheFilteredSoftmax) {
  const int64_t v = 24, draws = 20000;
  const std::vector<float> x = random_row(v, 17, 2.f);
  SamplingSettings seeded;
  seeded.temperature = 0.8f;
  seeded.top_k = 12;
  seeded.top_p = 0.9f;
  seeded.min_p = 0.05f;
  seeded.seed = 2024;
  SamplingSettings unseeded = seeded;
  unseeded.seed.reset();
  unseeded.temperature = 1.4f;
  for (const SamplingSettings* s : {&seeded, &unseeded}) {
    std::vector<SamplerRequest> requests;
    for (int64_t i = 0; i < draws; ++i) requests.push_back(request(*s, i));
    Sampler sampler(5);
    const SamplerOutput out = run(sampler, std::vector<std::vector<float>>(draws, x), requests);
    std::vector<int64_t> counts(v, 0);
    for (int64_t i = 0; i < draws; ++i) ++counts.at(token(out, i));
    const testing::ChiSquare result =
        testing::chi_square(counts, testing::expected_probs(x, s->temperature, s->top_k, s->top_p, s->min_p));
    EXPECT_EQ(result.impossible_draws, 0);
    EXPECT_GE(result.dof, 3);
    EXPECT_GT(result.p_value, 1e-6) << "chi2 " << result.statistic << " dof " << result.dof
                                    << (s->seed ? " seeded" : " unseeded");
  }
}

// One Sampler keeps its parameter rows across batches whose membership changes (rows join, leave, swap, and a
// penalty history outgrows the id pool); each batch must give the ids, logprobs and processed logits of a fresh
// Sampler that rewrites every row. Every request is seeded or greedy, so a fresh Sampler draws the same streams.
TEST(Sampler, PersistentRowsGiveWhatAFreshSamplerGives) {
  const int64_t v = 32;
  std::vector<SamplingSettings> settings(6);
  settings[0].temperature = 0.f;  // greedy, with bias and a frequency penalty
  settings[0].logit_bias = {{3, 5.f}, {7, -2.f}};
  settings[0].frequency_penalty = 0.5f;
  settings[1].temperature = 0.7f;
  settings[1].top_k = 5;
  settings[1].seed = 1;
  settings[1].logprobs = 3;
  settings[2].temperature = 1.2f;
  settings[2].top_p = 0.8f;
  settings[2].min_p = 0.05f;
  settings[2].seed = 2;
  settings[2].repetition_penalty = 1.3f;
  settings[2].min_tokens = 3;
  settings[2].all_stop_token_ids = {0, 1};
  settings[3].seed = 3;
  settings[3].presence_penalty = 0.4f;
  settings[4].temperature = 0.f;
  settings[5].temperature = 0.9f;
  settings[5].seed = 5;
  settings[5].top_k = 8;
  std::vector<std::vector<int32_t>> prompts(6), outputs(6);
  for (size_t i = 0; i < 6; ++i) prompts[i] = {static_cast<int32_t>(i), static_cast<int32_t>(2 * i + 1), 9};
  // Batches as request indices in row order; request 3's history grows past the pool (4 rows x 64 ids) at the end.
  const std::vector<std::vector<size_t>> batches = {{0, 1, 2}, {1, 0, 2},    {1, 2, 3}, {3},         {4, 3, 1, 0},
                                                    {2, 4},    {5, 2, 4, 3}, {0, 5},    {3, 0, 5, 1}};
  Sampler kept(11, 4, Device::cpu());
  const void* base = kept.params_base();
  ASSERT_NE(base, nullptr);
  for (size_t b = 0; b < batches.size(); ++b) {
    SCOPED_TRACE("batch " + std::to_string(b));
    if (b + 1 == batches.size()) outputs[3].resize(300, 4);  // 300 output ids: the pool must grow
    std::vector<std::vector<float>> rows;
    std::vector<SamplerRequest> keyed, plain;
    for (size_t r = 0; r < batches[b].size(); ++r) {
      const size_t i = batches[b][r];
      rows.push_back(random_row(v, static_cast<uint32_t>(100 * b + r)));
      plain.push_back(request(settings[i], static_cast<int64_t>(outputs[i].size()), prompts[i], outputs[i]));
      keyed.push_back(plain.back());
      keyed.back().row_key = i + 1;
    }
    Tensor kept_logits = batch(rows), fresh_logits = batch(rows);
    StatusOr<SamplerOutput> got = kept.sample(kept_logits, keyed);
    Sampler fresh(11);
    StatusOr<SamplerOutput> want = fresh.sample(fresh_logits, plain);
    ASSERT_TRUE(got.ok() && want.ok());
    for (size_t r = 0; r < rows.size(); ++r) {
      EXPECT_EQ(token(*got, r), token(*want, r)) << "row " << r;
      for (int64_t t = 0; t < v; ++t) {
        const float g = kept_logits.data<float>()[r * v + t], w = fresh_logits.data<float>()[r * v + t];
        EXPECT_TRUE(g == w || (std::isnan(g) && std::isnan(w))) << "row " << r << " token " << t;
      }
    }
    ASSERT_EQ(got->logprobs.defined(), want->logprobs.defined());
    if (got->logprobs.defined()) ASSERT_EQ(got->logprobs.to_string(), want->logprobs.to_string());
    for (int64_t e = 0; got->logprobs.defined() && e < got->logprobs.numel(); ++e) {
      EXPECT_EQ(got->logprobs.data<float>()[e], want->logprobs.data<float>()[e]);
      EXPECT_EQ(got->logprob_token_ids.data<int32_t>()[e], want->logprob_token_ids.data<int32_t>()[e]);
    }
    if (b + 1 < batches.size()) EXPECT_EQ(kept.params_base(), base) << "the arrays must not move while they fit";
    for (size_t r = 0; r < rows.size(); ++r) outputs[batches[b][r]].push_back(token(*got, r));
  }
}

TEST(Sampler, EmptyBatch) {
  Sampler sampler;
  Tensor logits = Tensor::empty({0, 16}, DType::kF32);
  StatusOr<SamplerOutput> out = sampler.sample(logits, {});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->sampled_token_ids.numel(), 0);
}

}  // namespace
}  // namespace llmserve

namespace llmserve {
namespace {

// Structured output in the Sampler: rows with a grammar bitmask never draw a disallowed token (greedy: the argmax over
// the allowed ids, checked by brute force; temperature 1: 200 seeded draws per row), their logprobs see the mask
// (disallowed -inf, the rest renormalised over the allowed), a bitmask shorter than the vocabulary disallows the ids
// past it, and unconstrained rows of the same batch sample exactly as in a batch without masks.
TEST(SamplerBitmask, ConstrainedRowsDrawOnlyAllowedTokens) {
  const int64_t vocab = 300, words = (vocab + 31) / 32;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 2.f);
  std::vector<std::vector<float>> rows(4, std::vector<float>(vocab));
  for (auto& r : rows) {
    for (float& x : r) x = normal(rng);
  }
  std::vector<std::vector<uint32_t>> masks(4, std::vector<uint32_t>(words));
  for (auto& m : masks) {
    for (uint32_t& w : m) w = static_cast<uint32_t>(rng()) & static_cast<uint32_t>(rng());
  }
  auto allowed = [&](size_t r, int64_t id) { return (masks[r][id / 32] >> (id % 32)) & 1u; };
  SamplingSettings greedy;
  greedy.temperature = 0.f;
  greedy.logprobs = 3;
  SamplingSettings hot;
  hot.temperature = 1.f;
  for (int trial = 0; trial < 200; ++trial) {
    hot.seed = trial;
    std::vector<SamplerRequest> reqs = {request(greedy), request(hot), request(hot), request(greedy)};
    reqs[0].allowed_token_bitmask = masks[0].data();
    reqs[0].bitmask_words = static_cast<int32_t>(words);
    reqs[2].allowed_token_bitmask = masks[2].data();
    reqs[2].bitmask_words = 3;  // ids >= 96 disallowed
    Sampler sampler(1);
    Tensor logits = batch(rows);
    StatusOr<SamplerOutput> out = sampler.sample(logits, reqs);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    const int32_t* ids = out->sampled_token_ids.data<int32_t>();
    if (trial == 0) {
      int64_t best = -1;
      for (int64_t j = 0; j < vocab; ++j) {
        if (allowed(0, j) && (best < 0 || rows[0][j] > rows[0][best])) best = j;
      }
      EXPECT_EQ(ids[0], best);
      EXPECT_EQ(ids[3], std::max_element(rows[3].begin(), rows[3].end()) - rows[3].begin());
      // Row 0's top logprobs are allowed tokens, normalised over the allowed set.
      double total = 0;
      for (int64_t j = 0; j < vocab; ++j) total += allowed(0, j) ? std::exp(rows[0][j] - rows[0][best]) : 0.0;
      const int64_t width = out->logprobs.size(1);
      for (int64_t k = 1; k < width; ++k) {
        const int32_t id = out->logprob_token_ids.data<int32_t>()[k];
        EXPECT_TRUE(allowed(0, id)) << id;
        EXPECT_NEAR(out->logprobs.data<float>()[k], rows[0][id] - rows[0][best] - std::log(total), 1e-4);
      }
    }
    EXPECT_TRUE(allowed(0, ids[0]));
    EXPECT_TRUE(ids[2] < 96 && allowed(2, ids[2])) << ids[2];
    // The unconstrained seeded row draws what it draws with no mask anywhere in the batch.
    Sampler plain(1);
    Tensor logits2 = batch(rows);
    std::vector<SamplerRequest> free_reqs = {request(greedy), request(hot), request(hot), request(greedy)};
    StatusOr<SamplerOutput> ref = plain.sample(logits2, free_reqs);
    ASSERT_TRUE(ref.ok());
    EXPECT_EQ(ids[1], ref->sampled_token_ids.data<int32_t>()[1]);
  }
}

}  // namespace
}  // namespace llmserve

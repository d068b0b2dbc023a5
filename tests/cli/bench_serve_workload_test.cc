// The serving benchmark's workload: arrival schedules (exact for an infinite rate, normalised end, gamma gaps
// whose squared coefficient of variation is 1 / burstiness), random prompts (lengths, id ranges, determinism),
// text prompts that the real tokenizer re-encodes to the drawn length, and the request bodies.
#include "cli/bench_serve_workload.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "cli/bench_serve_runner.h"
#include "tokenizer/tokenizer.h"

namespace llmserve::cli {
namespace {

std::string testdata() {
  const char* env = std::getenv("LLMSERVE_TESTDATA");
  return env != nullptr ? env : "../shared/testdata";
}

TEST(ArrivalTimes, InfiniteRateSendsAllAtOnce) {
  std::mt19937_64 rng(1);
  for (double t : arrival_times(50, INFINITY, 1.0, rng)) EXPECT_EQ(t, 0.0);
}

TEST(ArrivalTimes, LastArrivalIsScaledToNumOverRate) {
  std::mt19937_64 rng(2);
  const std::vector<double> t = arrival_times(200, 8.0, 1.0, rng);
  ASSERT_EQ(t.size(), 200u);
  EXPECT_NEAR(t.back(), 200 / 8.0, 1e-9);
  for (size_t i = 1; i < t.size(); ++i) EXPECT_GE(t[i], t[i - 1]);
  EXPECT_GT(t[0], 0.0);
}

TEST(ArrivalTimes, GapDispersionFollowsBurstiness) {
  // Gamma(k, theta) has mean k * theta and variance k * theta^2, so CV^2 = 1 / k: 1 for Poisson, 4 at k = 0.25.
  for (double burstiness : {0.25, 1.0, 4.0}) {
    std::mt19937_64 rng(3);
    const int n = 40000;
    const std::vector<double> t = arrival_times(n, 10.0, burstiness, rng);
    double sum = 0, sq = 0;
    for (int i = 0; i < n; ++i) {
      const double gap = t[i] - (i ? t[i - 1] : 0.0);
      sum += gap;
      sq += gap * gap;
    }
    const double mean = sum / n, var = sq / n - mean * mean;
    EXPECT_NEAR(mean, 0.1, 1e-9);  // normalised: n gaps sum to n / rate
    EXPECT_NEAR(var / (mean * mean), 1.0 / burstiness, 0.08 / burstiness) << "burstiness " << burstiness;
  }
}

TEST(RandomDataset, TokenIdPromptsWithoutTokenizer) {
  RandomDatasetOptions o{300, 100, 20, 0.5, 50};
  std::mt19937_64 rng(4), rng2(4);
  StatusOr<std::vector<SampleRequest>> a = make_random_dataset(o, nullptr, rng);
  StatusOr<std::vector<SampleRequest>> b = make_random_dataset(o, nullptr, rng2);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), 300u);
  int64_t min_in = 1 << 30, max_in = 0;
  for (size_t i = 0; i < a->size(); ++i) {
    const SampleRequest& r = (*a)[i];
    EXPECT_EQ(r.prompt_ids, (*b)[i].prompt_ids);  // same seed, same prompts
    EXPECT_EQ(r.prompt_len, static_cast<int64_t>(r.prompt_ids.size()));
    EXPECT_GE(r.prompt_len, 50);
    EXPECT_LE(r.prompt_len, 150);
    EXPECT_GE(r.expected_output_len, 10);
    EXPECT_LE(r.expected_output_len, 30);
    for (int32_t id : r.prompt_ids) EXPECT_TRUE(id >= 0 && id < 50);
    min_in = std::min(min_in, r.prompt_len);
    max_in = std::max(max_in, r.prompt_len);
  }
  EXPECT_LT(min_in, 60);  // the whole range is used
  EXPECT_GT(max_in, 140);
}

TEST(RandomDataset, ExactLengthsAtRatioZero) {
  RandomDatasetOptions o{10, 7, 3, 0.0, 1000};
  std::mt19937_64 rng(5);
  StatusOr<std::vector<SampleRequest>> a = make_random_dataset(o, nullptr, rng);
  ASSERT_TRUE(a.ok());
  for (const SampleRequest& r : *a) {
    EXPECT_EQ(r.prompt_len, 7);
    EXPECT_EQ(r.expected_output_len, 3);
  }
}

TEST(RandomDataset, RejectsBadOptions) {
  std::mt19937_64 rng(6);
  const RandomDatasetOptions bad[] = {{0, 10, 10, 0, 10},   {1, 0, 10, 0, 10},     {1, 10, 0, 0, 10},
                                      {1, 10, 10, 1.0, 10}, {1, 10, 10, -0.1, 10}, {1, 10, 10, 0, 0}};
  for (const RandomDatasetOptions& o : bad) EXPECT_FALSE(make_random_dataset(o, nullptr, rng).ok());
}

TEST(RandomDataset, TextPromptsEncodeToTheDrawnLength) {
  StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_dir(testdata() + "/tokenizers/tinyllama-1.1b-chat-v1.0");
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  RandomDatasetOptions o{40, 64, 8, 0.0, 0};
  std::mt19937_64 rng(7);
  StatusOr<std::vector<SampleRequest>> reqs = make_random_dataset(o, tok->get(), rng);
  ASSERT_TRUE(reqs.ok()) << reqs.status().message();
  for (const SampleRequest& r : *reqs) {
    EXPECT_TRUE(r.prompt_ids.empty());
    EXPECT_FALSE(r.prompt_text.empty());
    EXPECT_EQ(r.prompt_len, static_cast<int64_t>((*tok)->encode(r.prompt_text, false).size()));
    EXPECT_EQ(r.prompt_len, 64) << r.prompt_text;
  }
}

TEST(Payload, CompletionsAndChatBodies) {
  SampleRequest ids;
  ids.prompt_ids = {5, 6, 7};
  ids.expected_output_len = 9;
  nlohmann::json j = nlohmann::json::parse(make_payload(ids, "m", false, 0.0, true));
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["prompt"], (std::vector<int>{5, 6, 7}));
  EXPECT_EQ(j["max_tokens"], 9);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["stream_options"]["include_usage"], true);
  EXPECT_EQ(j["ignore_eos"], true);
  SampleRequest text;
  text.prompt_text = "hello \"world\"";
  text.expected_output_len = 4;
  j = nlohmann::json::parse(make_payload(text, "m", true, 0.5, false));
  EXPECT_EQ(j["messages"][0]["role"], "user");
  EXPECT_EQ(j["messages"][0]["content"], "hello \"world\"");
  EXPECT_EQ(j["max_completion_tokens"], 4);
  EXPECT_EQ(j["temperature"], 0.5);
  EXPECT_FALSE(j.contains("ignore_eos"));
  EXPECT_TRUE(is_chat_endpoint("/v1/chat/completions"));
  EXPECT_FALSE(is_chat_endpoint("/v1/completions"));
}

}  // namespace
}  // namespace llmserve::cli

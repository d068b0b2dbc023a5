// SamplingParams::validate: every invalid field is rejected with InvalidArgument naming that field, and every
// boundary value that vLLM accepts is accepted.
#include "engine/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

namespace llmserve {
namespace {

constexpr int64_t kVocab = 1000;

struct Case {
  const char* field;  // the message must start with this
  std::function<void(SamplingParams&)> set;
};

TEST(SamplingParamsTest, DefaultsAreValid) {
  SamplingParams p;
  EXPECT_TRUE(p.validate(kVocab).ok());
  EXPECT_FALSE(p.greedy());
  p.temperature = 0;
  EXPECT_TRUE(p.greedy());
}

TEST(SamplingParamsTest, EveryInvalidFieldIsNamed) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Case> cases = {
      {"n", [](SamplingParams& p) { p.n = 0; }},
      {"n", [](SamplingParams& p) { p.n = -3; }},
      {"temperature", [](SamplingParams& p) { p.temperature = -0.01; }},
      {"temperature", [=](SamplingParams& p) { p.temperature = nan; }},
      {"temperature", [=](SamplingParams& p) { p.temperature = inf; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 0; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 1.0001; }},
      {"top_p", [](SamplingParams& p) { p.top_p = -0.5; }},
      {"top_p", [=](SamplingParams& p) { p.top_p = nan; }},
      {"top_k", [](SamplingParams& p) { p.top_k = -2; }},
      {"min_p", [](SamplingParams& p) { p.min_p = -0.1; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 1.5; }},
      {"max_tokens", [](SamplingParams& p) { p.max_tokens = 0; }},
      {"max_tokens", [](SamplingParams& p) { p.max_tokens = -1; }},
      {"min_tokens", [](SamplingParams& p) { p.min_tokens = -1; }},
      {"min_tokens",
       [](SamplingParams& p) {
         p.max_tokens = 5;
         p.min_tokens = 6;
       }},
      {"stop",
       [](SamplingParams& p) {
         p.stop = {"ok", ""};
       }},
      {"stop_token_ids",
       [](SamplingParams& p) {
         p.stop_token_ids = {1, kVocab};
       }},
      {"stop_token_ids", [](SamplingParams& p) { p.stop_token_ids = {-1}; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = 2.01; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = -2.01; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = 2.5; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = -3; }},
      {"frequency_penalty", [=](SamplingParams& p) { p.frequency_penalty = nan; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = -1; }},
      {"logit_bias",
       [](SamplingParams& p) {
         p.logit_bias = {{kVocab, 1.0}};
       }},
      {"logit_bias",
       [](SamplingParams& p) {
         p.logit_bias = {{-1, 1.0}};
       }},
      {"logit_bias",
       [](SamplingParams& p) {
         p.logit_bias = {{3, 100.5}};
       }},
      {"logit_bias",
       [](SamplingParams& p) {
         p.logit_bias = {{3, -101}};
       }},
      {"logit_bias",
       [=](SamplingParams& p) {
         p.logit_bias = {{3, nan}};
       }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = -1; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = SamplingParams::kMaxLogprobs + 1; }},
      {"prompt_logprobs", [](SamplingParams& p) { p.prompt_logprobs = -1; }},
      {"prompt_logprobs", [](SamplingParams& p) { p.prompt_logprobs = 21; }},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SamplingParams p;
    cases[i].set(p);
    Status s = p.validate(kVocab);
    ASSERT_FALSE(s.ok()) << "case " << i << " (" << cases[i].field << ") accepted";
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << i;
    const std::string field = cases[i].field;
    // The message starts with the field name followed by a non-identifier character.
    EXPECT_EQ(s.message().rfind(field, 0), 0u) << "case " << i << ": " << s.message();
    const char next = s.message()[field.size()];
    EXPECT_FALSE(std::isalnum(static_cast<unsigned char>(next)) || next == '_') << s.message();
  }
}

TEST(SamplingParamsTest, BoundaryValuesAreAccepted) {
  const std::vector<std::function<void(SamplingParams&)>> ok = {
      [](SamplingParams& p) { p.temperature = 0; },
      [](SamplingParams& p) { p.top_p = 1.0; },
      [](SamplingParams& p) { p.top_p = 1e-9; },
      [](SamplingParams& p) { p.top_k = -1; },
      [](SamplingParams& p) { p.top_k = 0; },
      [](SamplingParams& p) { p.top_k = 1; },
      [](SamplingParams& p) { p.min_p = 0; },
      [](SamplingParams& p) { p.min_p = 1; },
      [](SamplingParams& p) { p.max_tokens = 1; },
      [](SamplingParams& p) {
        p.max_tokens = std::nullopt;
        p.min_tokens = 1000000;
      },
      [](SamplingParams& p) {
        p.max_tokens = 7;
        p.min_tokens = 7;
      },
      [](SamplingParams& p) {
        p.presence_penalty = -2;
        p.frequency_penalty = 2;
      },
      [](SamplingParams& p) { p.repetition_penalty = 1e-3; },
      [](SamplingParams& p) {
        p.logit_bias = {{0, -100}, {kVocab - 1, 100}};
      },
      [](SamplingParams& p) {
        p.logprobs = 0;
        p.prompt_logprobs = SamplingParams::kMaxLogprobs;
      },
      [](SamplingParams& p) {
        p.stop = {"\n\n", "END"};
        p.stop_token_ids = {0, kVocab - 1};
      },
      [](SamplingParams& p) {
        p.seed = -42;
        p.n = 8;
      },
  };
  for (size_t i = 0; i < ok.size(); ++i) {
    SamplingParams p;
    ok[i](p);
    Status s = p.validate(kVocab);
    EXPECT_TRUE(s.ok()) << "case " << i << ": " << s.to_string();
  }
}

}  // namespace
}  // namespace llmserve

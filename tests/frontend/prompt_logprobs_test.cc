// Prompt logprobs through LLMEngine (vLLM semantics: one entry per prompt token, none for position 0, the token's
// logprob and rank given the tokens before it, then the top-k): the same values whatever the chunking, with or
// without preemption, never served from the prefix cache, and the other requests of a batch unchanged.
// The values themselves are checked against transformers in tests/runtime/fixture_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "frontend/llm_engine.h"
#include "test_models.h"

namespace llmserve {
namespace {

CausalLM &model() {
  static std::unique_ptr<CausalLM> m = testing::load_model_or_die(testing::fixtures_dir() + "/llama_gqa_f32");
  return *m;
}

std::unique_ptr<LLMEngine> make_engine(EngineArgs args = {}) {
  StatusOr<std::unique_ptr<LLMEngine>> e = LLMEngine::create(model(), nullptr, args);
  CHECK(e.ok()) << e.status().to_string();
  return std::move(*e);
}

SamplingParams greedy(int64_t max_tokens, std::optional<int32_t> prompt_logprobs) {
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.prompt_logprobs = prompt_logprobs;
  return p;
}

// Adds (id, prompt, params) in order, runs to completion; final outputs by id.
std::map<std::string, RequestOutput> run(
    LLMEngine &engine, const std::vector<std::tuple<std::string, std::vector<int32_t>, SamplingParams>> &requests) {
  for (const auto &[id, prompt, params] : requests) {
    Status s = engine.add_request(id, PromptInput{"", prompt}, params);
    EXPECT_TRUE(s.ok()) << id << ": " << s.to_string();
  }
  std::map<std::string, RequestOutput> done;
  for (int guard = 0; engine.has_unfinished() && guard < 100000; ++guard) {
    StatusOr<std::vector<RequestOutput>> outs = engine.step();
    EXPECT_TRUE(outs.ok()) << outs.status().to_string();
    if (!outs.ok()) break;
    for (RequestOutput &o : *outs) {
      // Prompt logprobs appear complete or not at all.
      EXPECT_TRUE(o.prompt_logprobs.empty() || o.prompt_logprobs.size() == o.prompt_token_ids.size());
      if (o.finished) done[o.request_id] = std::move(o);
    }
  }
  return done;
}

// Checks the vLLM shape: P entries, none at 0, entry q scores prompt token q, 1 + k columns, rank >= 1.
void expect_shape(const RequestOutput &o, int32_t k) {
  ASSERT_EQ(o.prompt_logprobs.size(), o.prompt_token_ids.size()) << o.request_id;
  EXPECT_FALSE(o.prompt_logprobs[0].has_value());
  for (size_t q = 1; q < o.prompt_logprobs.size(); ++q) {
    ASSERT_TRUE(o.prompt_logprobs[q].has_value()) << o.request_id << " position " << q;
    const TokenLogprobs &lp = *o.prompt_logprobs[q];
    ASSERT_EQ(lp.token_ids.size(), static_cast<size_t>(1 + k));
    EXPECT_EQ(lp.token_ids[0], o.prompt_token_ids[q]);
    EXPECT_GE(lp.sampled_token_rank, 1);
    EXPECT_LE(lp.logprobs[0], 0.f);
    EXPECT_TRUE(std::is_sorted(lp.logprobs.begin() + 1, lp.logprobs.end(), std::greater<float>()));
  }
}

// Same values (batch shapes may round differently: 1e-4), same prompt tokens, same sorted top-k values.
void expect_same(const RequestOutput &a, const RequestOutput &b, const std::string &what) {
  ASSERT_EQ(a.prompt_logprobs.size(), b.prompt_logprobs.size()) << what;
  for (size_t q = 1; q < a.prompt_logprobs.size(); ++q) {
    const TokenLogprobs &x = *a.prompt_logprobs[q], &y = *b.prompt_logprobs[q];
    ASSERT_EQ(x.token_ids.size(), y.token_ids.size()) << what;
    EXPECT_EQ(x.token_ids[0], y.token_ids[0]) << what << " position " << q;
    for (size_t j = 0; j < x.logprobs.size(); ++j) {
      EXPECT_NEAR(x.logprobs[j], y.logprobs[j], 1e-4) << what << " position " << q << " column " << j;
    }
  }
  EXPECT_EQ(a.outputs[0].token_ids, b.outputs[0].token_ids) << what;
}

TEST(PromptLogprobs, ChunkedPrefillEqualsUnchunked) {
  const auto prompts = testing::random_prompts(4, 20, 90, model().config().vocab_size, 11);
  std::vector<std::tuple<std::string, std::vector<int32_t>, SamplingParams>> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) reqs.emplace_back("r" + std::to_string(i), prompts[i], greedy(6, 5));
  auto unchunked = make_engine();
  const auto want = run(*unchunked, reqs);
  for (const auto &[id, o] : want) expect_shape(o, 5);
  for (int64_t chunk : {1, 7, 64}) {
    EngineArgs args;
    args.max_num_batched_tokens = chunk;
    auto engine = make_engine(args);
    const auto got = run(*engine, reqs);
    for (const auto &[id, o] : want) expect_same(got.at(id), o, id + " chunk " + std::to_string(chunk));
  }
}

TEST(PromptLogprobs, PreemptedEqualsNeverPreempted) {
  const auto prompts = testing::random_prompts(5, 20, 30, model().config().vocab_size, 12);
  std::vector<std::tuple<std::string, std::vector<int32_t>, SamplingParams>> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) reqs.emplace_back("r" + std::to_string(i), prompts[i], greedy(24, 2));
  auto roomy = make_engine();
  const auto want = run(*roomy, reqs);
  EngineArgs args;
  args.block_size = 4;
  args.max_model_len = 64;
  args.num_kv_cache_tokens = 80;     // 20 blocks: five requests of up to 54 tokens cannot all stay
  args.max_num_batched_tokens = 16;  // chunked too, so a preemption can land mid-prompt
  auto tight = make_engine(args);
  const auto got = run(*tight, reqs);
  EXPECT_GT(tight->totals().num_preemptions, 0) << "the pool was meant to be too small";
  for (const auto &[id, o] : want) {
    expect_shape(got.at(id), 2);
    expect_same(got.at(id), o, id);
  }
}

TEST(PromptLogprobs, NeverServedFromThePrefixCache) {
  const auto prompt = testing::random_prompts(1, 50, 50, model().config().vocab_size, 13)[0];
  auto cold = make_engine();
  const RequestOutput want = run(*cold, {{"a", prompt, greedy(3, 1)}}).at("a");
  auto engine = make_engine();
  run(*engine, {{"warm", prompt, greedy(3, std::nullopt)}});
  const int64_t hits = engine->totals().prefix_cache_hits;
  const RequestOutput got = run(*engine, {{"a", prompt, greedy(3, 1)}}).at("a");
  EXPECT_EQ(engine->totals().prefix_cache_hits, hits) << "a prompt_logprobs request must compute every position";
  EXPECT_EQ(got.num_cached_tokens, 0);
  expect_shape(got, 1);
  expect_same(got, want, "after warm-up");
  // ...while the same prompt without prompt_logprobs does hit.
  run(*engine, {{"b", prompt, greedy(3, std::nullopt)}});
  EXPECT_GT(engine->totals().prefix_cache_hits, hits);
}

// Requests without prompt_logprobs get the same outputs whether or not their batch holds requests that ask.
TEST(PromptLogprobs, MixedBatchLeavesOthersUnchanged) {
  const auto prompts = testing::random_prompts(6, 1, 40, model().config().vocab_size, 14);
  SamplingParams sampled;
  sampled.temperature = 0.8;
  sampled.top_k = 20;
  sampled.max_tokens = 10;
  sampled.ignore_eos = true;
  sampled.logprobs = 3;
  for (int64_t budget : {2048, 7}) {
    std::map<std::string, RequestOutput> outs[2];
    for (int with : {0, 1}) {
      std::vector<std::tuple<std::string, std::vector<int32_t>, SamplingParams>> reqs;
      for (size_t i = 0; i < prompts.size(); ++i) {
        SamplingParams p = i % 2 ? greedy(10, std::nullopt) : sampled;
        if (i % 2 == 0) p.seed = 100 + static_cast<int64_t>(i);
        if (i % 3 == 0 && with) p.prompt_logprobs = static_cast<int32_t>(i % 2 ? 0 : 4);
        if (i == 3) p.n = 2;  // fan-out: both sequences score the prompt, one list is reported
        reqs.emplace_back("r" + std::to_string(i), prompts[i], p);
      }
      EngineArgs args;
      args.max_num_batched_tokens = budget;
      auto engine = make_engine(args);
      outs[with] = run(*engine, reqs);
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::string id = "r" + std::to_string(i), what = id + " budget " + std::to_string(budget);
      const RequestOutput &a = outs[0].at(id), &b = outs[1].at(id);
      ASSERT_EQ(a.outputs.size(), b.outputs.size()) << what;
      for (size_t k = 0; k < a.outputs.size(); ++k) {
        EXPECT_EQ(a.outputs[k].token_ids, b.outputs[k].token_ids) << what << " sequence " << k;
        ASSERT_EQ(a.outputs[k].logprobs.size(), b.outputs[k].logprobs.size()) << what;
        for (size_t t = 0; t < a.outputs[k].logprobs.size(); ++t) {
          EXPECT_EQ(a.outputs[k].logprobs[t].token_ids, b.outputs[k].logprobs[t].token_ids) << what;
          for (size_t j = 0; j < a.outputs[k].logprobs[t].logprobs.size(); ++j) {
            EXPECT_NEAR(a.outputs[k].logprobs[t].logprobs[j], b.outputs[k].logprobs[t].logprobs[j], 1e-4) << what;
          }
        }
      }
      EXPECT_TRUE(a.prompt_logprobs.empty());
      if (i % 3 == 0) {
        expect_shape(b, i % 2 ? 0 : 4);
      } else {
        EXPECT_TRUE(b.prompt_logprobs.empty()) << what;
      }
    }
  }
}

}  // namespace
}  // namespace llmserve

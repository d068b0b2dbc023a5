// Async scheduling (EngineCore's batch queue of two steps) through LLMEngine on the CPU: every output equals the
// synchronous engine's — ids, logprobs, prompt logprobs, finish and stop reasons — under greedy and seeded sampling,
// n > 1, penalties (they read the output ids the placeholders stand for), min_tokens, stop ids / EOS / max_tokens,
// stop strings (the frontend's), preemption storms and aborts mid stream; no block is left allocated.
#include <gtest/gtest.h>

#include <cctype>
#include <map>

#include "frontend/llm_engine.h"
#include "test_models.h"
#include "tokenizer/tokenizer.h"

namespace llmserve {
namespace {

using testing::random_prompts;

CausalLM &model() {
  static std::unique_ptr<CausalLM> m = testing::load_model_or_die(testing::fixtures_dir() + "/llama_gqa_f32");
  return *m;
}

std::unique_ptr<LLMEngine> make_engine(bool async, EngineArgs args = {}, const Tokenizer *tokenizer = nullptr) {
  args.async_scheduling = async;
  StatusOr<std::unique_ptr<LLMEngine>> e = LLMEngine::create(model(), tokenizer, args);
  CHECK(e.ok()) << e.status().to_string();
  return std::move(*e);
}

// Runs every request to completion; each request's final output by id. Checks that nothing reaches a request
// after its final output and that the cache is empty at the end.
std::map<std::string, RequestOutput> run_all(LLMEngine &engine, const std::vector<std::vector<int32_t>> &prompts,
                                             const SamplingParams &params) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    Status s = engine.add_request("r" + std::to_string(i), PromptInput{"", prompts[i]}, params);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  std::map<std::string, RequestOutput> done;
  for (int guard = 0; engine.has_unfinished() && guard < 100000; ++guard) {
    StatusOr<std::vector<RequestOutput>> outs = engine.step();
    EXPECT_TRUE(outs.ok()) << outs.status().to_string();
    if (!outs.ok()) break;
    for (RequestOutput &o : *outs) {
      EXPECT_EQ(done.count(o.request_id), 0u) << o.request_id << " got output after finishing";
      if (o.finished) done[o.request_id] = std::move(o);
    }
  }
  EXPECT_EQ(engine.core().scheduler().kv_cache_manager().usage(), 0.0);
  return done;
}

void expect_same_logprobs(const std::vector<TokenLogprobs> &a, const std::vector<TokenLogprobs> &b,
                          const std::string &what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].token_ids, b[i].token_ids) << what << " position " << i;
    EXPECT_EQ(a[i].logprobs, b[i].logprobs) << what << " position " << i;
    EXPECT_EQ(a[i].sampled_token_rank, b[i].sampled_token_rank) << what << " position " << i;
  }
}

void expect_same(const std::map<std::string, RequestOutput> &sync, const std::map<std::string, RequestOutput> &async,
                 size_t num_requests) {
  ASSERT_EQ(sync.size(), num_requests);
  ASSERT_EQ(async.size(), num_requests);
  for (const auto &[id, s] : sync) {
    const RequestOutput &a = async.at(id);
    ASSERT_EQ(s.outputs.size(), a.outputs.size()) << id;
    for (size_t k = 0; k < s.outputs.size(); ++k) {
      const std::string what = id + " sequence " + std::to_string(k);
      EXPECT_EQ(s.outputs[k].token_ids, a.outputs[k].token_ids) << what;
      EXPECT_EQ(s.outputs[k].text, a.outputs[k].text) << what;
      EXPECT_EQ(s.outputs[k].finish_reason, a.outputs[k].finish_reason) << what;
      EXPECT_EQ(s.outputs[k].stop_reason, a.outputs[k].stop_reason) << what;
      expect_same_logprobs(s.outputs[k].logprobs, a.outputs[k].logprobs, what + " logprobs");
    }
    ASSERT_EQ(s.prompt_logprobs.size(), a.prompt_logprobs.size()) << id;
    for (size_t q = 0; q < s.prompt_logprobs.size(); ++q) {
      ASSERT_EQ(s.prompt_logprobs[q].has_value(), a.prompt_logprobs[q].has_value()) << id;
      if (s.prompt_logprobs[q]) expect_same_logprobs({*s.prompt_logprobs[q]}, {*a.prompt_logprobs[q]}, id + " prompt");
    }
  }
}

// Runs the same workload on a synchronous and an asynchronous engine and compares every output.
void expect_async_equals_sync(const std::vector<std::vector<int32_t>> &prompts, const SamplingParams &params,
                              const EngineArgs &args = {}, const Tokenizer *tokenizer = nullptr) {
  auto sync = make_engine(false, args, tokenizer);
  auto async = make_engine(true, args, tokenizer);
  const auto s = run_all(*sync, prompts, params);
  const auto a = run_all(*async, prompts, params);
  expect_same(s, a, prompts.size());
  EXPECT_EQ(sync->totals().num_preemptions > 0, async->totals().num_preemptions > 0);
}

SamplingParams greedy(int64_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

TEST(AsyncScheduling, GreedyWithLogprobsEqualsSync) {
  SamplingParams p = greedy(12);
  p.logprobs = 3;
  expect_async_equals_sync(random_prompts(6, 1, 40, model().config().vocab_size, 1), p);
}

TEST(AsyncScheduling, SeededNWithPenaltiesEqualsSync) {
  SamplingParams p;
  p.temperature = 0.9;
  p.top_k = 40;
  p.max_tokens = 16;
  p.ignore_eos = true;
  p.seed = 77;
  p.n = 3;
  p.presence_penalty = 0.5;
  p.frequency_penalty = 0.7;
  p.repetition_penalty = 1.3;
  p.logprobs = 2;
  expect_async_equals_sync(random_prompts(3, 5, 30, model().config().vocab_size, 2), p);
}

TEST(AsyncScheduling, StopIdsMinTokensAndLengthEqualSync) {
  const auto prompts = random_prompts(5, 4, 20, model().config().vocab_size, 3);
  // Stop ids drawn from what greedy decoding produces, so some requests stop early and some run to max_tokens.
  auto probe = make_engine(false);
  const auto ref = run_all(*probe, prompts, greedy(10));
  SamplingParams p = greedy(10);
  for (const auto &[id, o] : ref) p.stop_token_ids.push_back(o.outputs[0].token_ids[3]);
  expect_async_equals_sync(prompts, p);
  p.min_tokens = 6;  // the stop ids masked for the first six tokens
  expect_async_equals_sync(prompts, p);
  p.ignore_eos = false;  // EOS from the model's config, if it has one
  p.stop_token_ids.clear();
  p.min_tokens = 0;
  p.max_tokens = 1;  // every request ends on its first token, while the next step already computes another
  expect_async_equals_sync(prompts, p);
}

TEST(AsyncScheduling, StopStringsThroughTheFrontendEqualSync) {
  StatusOr<std::unique_ptr<Tokenizer>> tok =
      Tokenizer::from_dir(testing::testdata_dir() + "/tokenizers/tinyllama-1.1b-chat-v1.0");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const auto prompts = random_prompts(3, 4, 20, model().config().vocab_size, 4);
  auto probe = make_engine(false, {}, tok->get());
  const auto ref = run_all(*probe, prompts, greedy(16));
  // A stop string from the middle of a generated text: that request stops on it, mid stream.
  const std::string &text = ref.at("r0").outputs[0].text;
  ASSERT_GE(text.size(), 8u);
  SamplingParams p = greedy(16);
  p.stop = {text.substr(text.size() / 2, 2)};
  auto sync = make_engine(false, {}, tok->get());
  auto async = make_engine(true, {}, tok->get());
  const auto s = run_all(*sync, prompts, p);
  expect_same(s, run_all(*async, prompts, p), prompts.size());
  EXPECT_EQ(s.at("r0").outputs[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ(std::get<std::string>(s.at("r0").outputs[0].stop_reason), p.stop[0]);
}

TEST(AsyncScheduling, PreemptionStormEqualsSync) {
  EngineArgs args;
  args.block_size = 4;
  args.max_model_len = 64;
  args.num_kv_cache_tokens = 80;  // 20 blocks for eight requests of up to 54 tokens
  for (bool caching : {false, true}) {
    args.enable_prefix_caching = caching;
    auto sync = make_engine(false, args);
    const auto prompts = random_prompts(8, 20, 30, model().config().vocab_size, 5);
    SamplingParams p = greedy(24);
    p.seed = 3;
    p.temperature = 0.8;
    p.repetition_penalty = 1.2;
    const auto s = run_all(*sync, prompts, p);
    EXPECT_GT(sync->totals().num_preemptions, 0) << "the pool was meant to be too small";
    auto async = make_engine(true, args);
    expect_same(s, run_all(*async, prompts, p), prompts.size());
    EXPECT_GT(async->totals().num_preemptions, 0);
  }
}

TEST(AsyncScheduling, PromptLogprobsWithChunkingEqualSync) {
  EngineArgs args;
  args.max_num_batched_tokens = 7;  // prompts scored over several chunks
  SamplingParams p = greedy(6);
  p.prompt_logprobs = 2;
  const auto prompts = random_prompts(3, 10, 30, model().config().vocab_size, 6);
  auto sync = make_engine(false, args);
  auto async = make_engine(true, args);
  const auto s = run_all(*sync, prompts, p);
  ASSERT_EQ(s.at("r0").prompt_logprobs.size(), prompts[0].size());
  expect_same(s, run_all(*async, prompts, p), prompts.size());
}

// Aborting mid stream: the ids received before the abort are a prefix of the uninterrupted run, nothing arrives
// after it (a token of a step in flight is dropped), the final output says abort and the blocks come back.
TEST(AsyncScheduling, AbortMidStreamDropsTheInFlightToken) {
  const auto prompts = random_prompts(2, 6, 12, model().config().vocab_size, 7);
  auto probe = make_engine(true);
  const auto ref = run_all(*probe, prompts, greedy(20));
  auto engine = make_engine(true);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(engine->add_request("r" + std::to_string(i), PromptInput{"", prompts[i]}, greedy(20)).ok());
  }
  std::vector<int32_t> received;
  bool aborted = false, finished = false;
  while (engine->has_unfinished()) {
    StatusOr<std::vector<RequestOutput>> outs = engine->step();
    ASSERT_TRUE(outs.ok());
    for (const RequestOutput &o : *outs) {
      if (o.request_id != "r0") continue;
      ASSERT_FALSE(finished) << "output after the final one";
      if (aborted) {
        EXPECT_TRUE(o.finished);
        EXPECT_EQ(o.outputs[0].finish_reason, FinishReason::kAbort);
        EXPECT_EQ(o.outputs[0].token_ids, received) << "a token arrived after the abort";
        finished = true;
        continue;
      }
      received = o.outputs[0].token_ids;
    }
    if (!aborted && received.size() >= 4) aborted = engine->abort_request("r0");
  }
  EXPECT_TRUE(finished);
  const auto &want = ref.at("r0").outputs[0].token_ids;
  ASSERT_LT(received.size(), want.size());
  EXPECT_TRUE(std::equal(received.begin(), received.end(), want.begin()));
  EXPECT_EQ(engine->core().scheduler().kv_cache_manager().usage(), 0.0);
}

}  // namespace
}  // namespace llmserve

// LLMEngine end to end on the HF fixture models (greedy unless stated): the
// engine's ids equal transformers' (the fixtures) and a plain greedy loop that
// recomputes the whole sequence every step (testing::reference_greedy: no
// scheduler, runner, cache reuse or sampler), and they do not change with
// batching, chunked prefill, preemption, prefix-cache hits or n>1 fan-out.
// Prompt logprobs do not change with chunking or preemption and leave other
// requests alone. Bad input is rejected before it touches the cache.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "frontend/llm_engine.h"
#include "test_models.h"

namespace llmserve {
namespace {

using testing::random_prompts;

// "<prefix><i>" (appending, not operator+: GCC 12 -Wrestrict misfires on
// `rid("r", i)`).
std::string rid(const std::string &prefix, size_t i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

const CausalLM &fixture_model(const std::string &name) {
  static std::map<std::string, std::unique_ptr<CausalLM>> models;
  auto &m = models[name];
  if (!m) m = testing::load_model_or_die(testing::fixtures_dir() + "/" + name);
  return *m;
}
CausalLM &model(const std::string &name) { return const_cast<CausalLM &>(fixture_model(name)); }

std::unique_ptr<LLMEngine> make_engine(CausalLM &m, EngineArgs args = {}) {
  StatusOr<std::unique_ptr<LLMEngine>> e = LLMEngine::create(m, nullptr, args);
  CHECK(e.ok()) << e.status().to_string();
  return std::move(*e);
}

// Runs every request to completion; returns each request's final output by id.
std::map<std::string, RequestOutput> run_all(LLMEngine &engine, const std::vector<std::vector<int32_t>> &prompts,
                                             const SamplingParams &params, const std::string &prefix = "r") {
  for (size_t i = 0; i < prompts.size(); ++i) {
    PromptInput p;
    p.token_ids = prompts[i];
    Status s = engine.add_request(rid(prefix, i), p, params);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  std::map<std::string, RequestOutput> done;
  for (int guard = 0; engine.has_unfinished() && guard < 100000; ++guard) {
    StatusOr<std::vector<RequestOutput>> outs = engine.step();
    EXPECT_TRUE(outs.ok()) << outs.status().to_string();
    if (!outs.ok()) break;
    for (RequestOutput &o : *outs) {
      if (o.finished) done[o.request_id] = std::move(o);
    }
  }
  return done;
}

SamplingParams greedy(int64_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

std::vector<int32_t> ids_of(const std::map<std::string, RequestOutput> &outs, const std::string &id, int k = 0) {
  auto it = outs.find(id);
  if (it == outs.end() || it->second.outputs.size() <= static_cast<size_t>(k)) return {};
  return it->second.outputs[k].token_ids;
}

constexpr const char *kModel = "llama_gqa_f32";

// The cache and scheduling equivalences run on a dense model, on a mixture-of-experts one (Qwen2-MoE: routed
// experts, a gated shared expert and a dense layer), whose per-token routing must not depend on the batch either, and
// on DeepSeek-V3 (multi-head latent attention over a latent KV cache: one row per token, no value tensor).
class EngineEquivalenceOn : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Models, EngineEquivalenceOn,
                         ::testing::Values(kModel, "qwen2_moe_shared_f32", "deepseek_v3_f32"));

// The reference: the recompute-everything greedy loop, one prompt at a time.
std::vector<std::vector<int32_t>> reference(CausalLM &m, const std::vector<std::vector<int32_t>> &prompts,
                                            int64_t max_tokens) {
  std::vector<std::vector<int32_t>> out;
  for (const auto &p : prompts) out.push_back(testing::reference_greedy(m, p, max_tokens));
  return out;
}

TEST(EngineEquivalence, MatchesTransformersFixtures) {
  for (const std::string name : {"llama_gqa_f32", "qwen3_qknorm_f32", "mistral_swa_f32", "mixtral_moe_f32",
                                 "qwen3_moe_f32", "deepseek_v3_f32"}) {
    std::ifstream in(testing::fixtures_dir() + "/" + name + "/expected.json");
    const nlohmann::json expected = nlohmann::json::parse(in);
    std::vector<std::vector<int32_t>> prompts;
    for (const auto &c : expected["cases"]) prompts.push_back(c["prompt"].get<std::vector<int32_t>>());
    auto engine = make_engine(model(name));
    auto outs = run_all(*engine, prompts, greedy(expected["num_steps"].get<int64_t>()));
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto got = ids_of(outs, rid("r", i));
      const auto &steps = expected["cases"][i]["steps"];
      ASSERT_EQ(got.size(), steps.size()) << name << " case " << i;
      for (size_t s = 0; s < steps.size(); ++s) {
        if (got[s] == steps[s]["id"].get<int32_t>()) continue;
        // vLLM's rule at the first divergence: each side's choice in the
        // other's top-k; then stop comparing.
        const auto top = steps[s]["top_ids"].get<std::vector<int32_t>>();
        EXPECT_NE(std::find(top.begin(), top.end(), got[s]), top.end()) << name << " case " << i << " step " << s;
        break;
      }
    }
  }
}

TEST_P(EngineEquivalenceOn, BatchedEqualsOneByOneAndReference) {
  CausalLM &m = model(GetParam());
  const auto prompts = random_prompts(6, 1, 40, m.config().vocab_size, 1);
  const auto ref = reference(m, prompts, 12);
  auto batched = make_engine(m);
  const auto outs = run_all(*batched, prompts, greedy(12));
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(ids_of(outs, rid("r", i)), ref[i]) << "prompt " << i;
    auto single = make_engine(m);
    EXPECT_EQ(ids_of(run_all(*single, {prompts[i]}, greedy(12)), "r0"), ref[i]) << "prompt " << i;
  }
}

TEST_P(EngineEquivalenceOn, ChunkedPrefillEqualsUnchunked) {
  CausalLM &m = model(GetParam());
  const auto prompts = random_prompts(4, 20, 90, m.config().vocab_size, 2);
  const auto ref = reference(m, prompts, 8);
  for (int64_t chunk : {1, 7, 64}) {
    EngineArgs args;
    args.max_num_batched_tokens = chunk;
    auto engine = make_engine(m, args);
    const auto outs = run_all(*engine, prompts, greedy(8));
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(ids_of(outs, rid("r", i)), ref[i]) << "chunk " << chunk << " prompt " << i;
    }
  }
}

TEST_P(EngineEquivalenceOn, PreemptedAndRecomputedEqualsNeverPreempted) {
  CausalLM &m = model(GetParam());
  const auto prompts = random_prompts(5, 20, 30, m.config().vocab_size, 3);
  const auto ref = reference(m, prompts, 24);
  EngineArgs args;
  args.block_size = 4;
  args.max_model_len = 64;
  args.num_kv_cache_tokens = 80;  // 20 blocks: five requests of up to 54 tokens cannot all stay
  for (bool caching : {false, true}) {
    args.enable_prefix_caching = caching;
    auto engine = make_engine(m, args);
    const auto outs = run_all(*engine, prompts, greedy(24));
    EXPECT_GT(engine->totals().num_preemptions, 0) << "the pool was meant to be too small";
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(ids_of(outs, rid("r", i)), ref[i]) << "caching " << caching << " prompt " << i;
    }
  }
}

TEST_P(EngineEquivalenceOn, PrefixCacheHitEqualsMiss) {
  CausalLM &m = model(GetParam());
  auto prompts = random_prompts(1, 50, 50, m.config().vocab_size, 4);
  auto tails = random_prompts(3, 1, 9, m.config().vocab_size, 5);
  std::vector<std::vector<int32_t>> second;
  for (const auto &t : tails) {
    second.push_back(prompts[0]);
    second.back().insert(second.back().end(), t.begin(), t.end());
  }
  const auto ref = reference(m, second, 10);
  for (bool caching : {false, true}) {
    EngineArgs args;
    args.enable_prefix_caching = caching;
    auto engine = make_engine(m, args);
    run_all(*engine, prompts, greedy(4), "warm");
    const int64_t hits_before = engine->totals().prefix_cache_hits;
    const auto outs = run_all(*engine, second, greedy(10));
    if (caching) {
      EXPECT_GE(engine->totals().prefix_cache_hits - hits_before, 3 * 48) << "three prompts share 3 full blocks";
      EXPECT_GT(outs.at("r0").num_cached_tokens, 0);
    } else {
      EXPECT_EQ(engine->totals().prefix_cache_hits, 0);
    }
    for (size_t i = 0; i < second.size(); ++i) {
      EXPECT_EQ(ids_of(outs, rid("r", i)), ref[i]) << "caching " << caching << " prompt " << i;
    }
  }
}

TEST(EngineEquivalence, SeededNEqualsSeededSingles) {
  CausalLM &m = model(kModel);
  const auto prompts = random_prompts(1, 12, 12, m.config().vocab_size, 6);
  const auto others = random_prompts(3, 5, 30, m.config().vocab_size, 7);
  SamplingParams p;
  p.temperature = 1.0;
  p.top_k = 40;
  p.max_tokens = 16;
  p.ignore_eos = true;
  p.seed = 1234;
  p.n = 3;
  // n=3 in a batch with unseeded strangers...
  auto engine = make_engine(m);
  SamplingParams stranger = p;
  stranger.n = 1;
  stranger.seed.reset();
  for (size_t i = 0; i < others.size(); ++i) {
    ASSERT_TRUE(engine->add_request(rid("x", i), PromptInput{"", others[i]}, stranger).ok());
  }
  const auto outs = run_all(*engine, prompts, p);
  ASSERT_EQ(outs.at("r0").outputs.size(), 3u);
  // ...equals three single requests with seeds 1234, 1235, 1236 run alone.
  std::set<std::vector<int32_t>> distinct;
  for (int k = 0; k < 3; ++k) {
    SamplingParams single = p;
    single.n = 1;
    single.seed = 1234 + k;
    auto alone = make_engine(m);
    EXPECT_EQ(ids_of(outs, "r0", k), ids_of(run_all(*alone, prompts, single), "r0")) << "sequence " << k;
    EXPECT_EQ(outs.at("r0").outputs[k].index, k);
    distinct.insert(ids_of(outs, "r0", k));
  }
  EXPECT_EQ(distinct.size(), 3u) << "different seeds should give different samples on a random model";
}

TEST(EngineEquivalence, StopTokenIdsAndLength) {
  CausalLM &m = model(kModel);
  const auto prompts = random_prompts(1, 10, 10, m.config().vocab_size, 8);
  const auto ref = reference(m, prompts, 12)[0];
  SamplingParams p = greedy(12);
  p.stop_token_ids = {ref[5]};
  auto engine = make_engine(m);
  auto outs = run_all(*engine, prompts, p);
  const size_t first = std::find(ref.begin(), ref.end(), ref[5]) - ref.begin();
  const CompletionOutput &c = outs.at("r0").outputs[0];
  EXPECT_EQ(c.token_ids, std::vector<int32_t>(ref.begin(), ref.begin() + first + 1));
  EXPECT_EQ(c.finish_reason, FinishReason::kStop);
  EXPECT_EQ(std::get<int32_t>(c.stop_reason), ref[5]);
  outs = run_all(*engine, prompts, greedy(7), "len");
  EXPECT_EQ(outs.at("len0").outputs[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(outs.at("len0").outputs[0].token_ids.size(), 7u);
}

// `priority` on the request: with the priority policy and room for one sequence, requests finish in priority
// order (lower first, arrival breaks ties) with unchanged outputs; without the policy a priority is an error.
TEST(EngineEquivalence, PriorityOrdersServiceAndNeedsThePolicy) {
  CausalLM &m = model(kModel);
  const auto prompts = random_prompts(4, 3, 12, m.config().vocab_size, 10);
  const auto ref = reference(m, prompts, 5);
  auto fcfs = make_engine(m);
  Status s = fcfs->add_request("p", PromptInput{"", prompts[0]}, greedy(5), 2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("priority", 0), 0u) << s.message();
  EXPECT_FALSE(fcfs->has_unfinished());

  EngineArgs args;
  args.scheduling_policy = SchedulingPolicy::kPriority;
  args.max_num_seqs = 1;
  auto engine = make_engine(m, args);
  const int32_t priorities[] = {5, 0, 3, 0};
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(engine->add_request(rid("r", i), PromptInput{"", prompts[i]}, greedy(5), priorities[i]).ok());
  }
  std::vector<std::string> order;
  while (engine->has_unfinished()) {
    StatusOr<std::vector<RequestOutput>> outs = engine->step();
    ASSERT_TRUE(outs.ok());
    for (const RequestOutput &o : *outs) {
      if (!o.finished) continue;
      order.push_back(o.request_id);
      EXPECT_EQ(o.outputs[0].token_ids, ref[std::stoul(o.request_id.substr(1))]) << o.request_id;
    }
  }
  EXPECT_EQ(order, (std::vector<std::string>{"r1", "r3", "r2", "r0"}));
}

TEST(EngineEquivalence, AbortFinishesWithAbort) {
  CausalLM &m = model(kModel);
  auto engine = make_engine(m);
  ASSERT_TRUE(engine->add_request("a", PromptInput{"", {1, 2, 3}}, greedy(50)).ok());
  ASSERT_TRUE(engine->step().ok());
  EXPECT_TRUE(engine->abort_request("a"));
  StatusOr<std::vector<RequestOutput>> outs = engine->step();
  ASSERT_TRUE(outs.ok());
  ASSERT_EQ(outs->size(), 1u);
  EXPECT_TRUE((*outs)[0].finished);
  EXPECT_EQ((*outs)[0].outputs[0].finish_reason, FinishReason::kAbort);
  EXPECT_FALSE(engine->has_unfinished());
  EXPECT_EQ(engine->core().scheduler().kv_cache_manager().usage(), 0.0);
}

TEST(EngineEquivalence, BadInputRejectedBeforeTheCache) {
  CausalLM &m = model(kModel);
  EngineArgs args;
  args.max_model_len = 32;
  auto engine = make_engine(m, args);
  const auto too_long = random_prompts(1, 40, 40, m.config().vocab_size, 9)[0];
  Status s = engine->add_request("long", PromptInput{"", too_long}, greedy(4));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("max"), std::string::npos) << s.message();
  s = engine->add_request("fit", PromptInput{"", {1, 2, 3}}, greedy(40));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "3 + 40 > max_model_len";
  s = engine->add_request("oov", PromptInput{"", {1, static_cast<int32_t>(m.config().vocab_size)}}, greedy(4));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  SamplingParams bad = greedy(4);
  bad.top_p = 1.5;
  EXPECT_EQ(engine->add_request("topp", PromptInput{"", {1, 2}}, bad).code(), StatusCode::kInvalidArgument);
  for (int32_t k : {-1, SamplingParams::kMaxLogprobs + 1}) {
    SamplingParams plp = greedy(4);
    plp.prompt_logprobs = k;
    s = engine->add_request("plp", PromptInput{"", {1, 2}}, plp);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << k;
    EXPECT_EQ(s.message().rfind("prompt_logprobs", 0), 0u) << s.message();
  }
  s = engine->add_request("text", PromptInput{"hello", {}}, greedy(4));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "text without a tokenizer";
  EXPECT_FALSE(engine->has_unfinished());
  EXPECT_EQ(engine->core().scheduler().num_unfinished(), 0);
  EXPECT_EQ(engine->core().scheduler().kv_cache_manager().usage(), 0.0);
  // The engine still works afterwards.
  EXPECT_EQ(ids_of(run_all(*engine, {{1, 2, 3}}, greedy(4)), "r0").size(), 4u);
}

}  // namespace
}  // namespace llmserve

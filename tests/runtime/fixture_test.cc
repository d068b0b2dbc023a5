// The model forward against HF transformers: every fixture in tests/fixtures/models (written by
// tests/fixtures/make_fixtures.py) must reproduce transformers' greedy ids and top-5 logprobs through the
// engine's path (EngineCore + ModelRunner + Sampler). vLLM's rule: at each step equal ids, or at the first
// divergence each side's token is in the other's top-5 (then stop). Prompt logprobs are checked against the same
// fixtures by feeding prompt + transformers' continuation as the prompt (teacher forcing): position P + s must
// carry step s's logprobs.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "test_models.h"

namespace llmserve {
namespace {

bool contains(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Logprob tolerances. transformers computed the references in float32 from the saved weights, so f32
// checkpoints and bf16 checkpoints widened to f32 at load match closely (the bars: 1e-3 and 3e-2). The
// native bf16 GEMM also rounds activations to bf16 (as a bf16 GPU run does): ids by the same rule, logprobs
// within 0.1.
constexpr float kF32Tolerance = 1e-3f, kBf16Tolerance = 3e-2f, kBf16NativeTolerance = 1e-1f;

bool is_bf16_fixture(const nlohmann::json& expected) { return expected["weights_dtype"] == "bfloat16"; }

struct Fixture {
  nlohmann::json expected;
  std::unique_ptr<CausalLM> model;
  float tolerance = kF32Tolerance;
  std::vector<std::vector<int32_t>> prompts;
};

Fixture load_fixture(const std::string& name, std::optional<DType> weight_dtype) {
  Fixture f;
  const std::string dir = testing::fixtures_dir() + "/" + name;
  std::ifstream in(dir + "/expected.json");
  f.expected = nlohmann::json::parse(in);
  const bool bf16_native = is_bf16_fixture(f.expected) && weight_dtype != DType::kF32;
  f.tolerance = !is_bf16_fixture(f.expected) ? kF32Tolerance : bf16_native ? kBf16NativeTolerance : kBf16Tolerance;
  ModelLoadOptions load_options;
  load_options.weight_dtype = weight_dtype;
  StatusOr<std::unique_ptr<CausalLM>> loaded = load_model(dir, load_options);
  CHECK(loaded.ok()) << loaded.status().to_string();
  f.model = std::move(*loaded);
  for (const auto& c : f.expected["cases"]) f.prompts.push_back(c["prompt"].get<std::vector<int32_t>>());
  return f;
}

// Compares the logprobs of every token both top-k lists share; returns how many were compared.
int compare_top(const TokenLogprobs& ours, const nlohmann::json& step, float tolerance, const std::string& where) {
  const auto their_ids = step["top_ids"].get<std::vector<int32_t>>();
  const auto their_lps = step["top_logprobs"].get<std::vector<float>>();
  int compared = 0;
  for (size_t k = 0; k < their_ids.size(); ++k) {
    for (size_t j = 1; j < ours.token_ids.size(); ++j) {
      if (ours.token_ids[j] == their_ids[k]) {
        EXPECT_NEAR(ours.logprobs[j], their_lps[k], tolerance) << where << " token " << their_ids[k];
        ++compared;
      }
    }
  }
  return compared;
}

std::vector<int32_t> top_ids_of(const TokenLogprobs& lp) { return {lp.token_ids.begin() + 1, lp.token_ids.end()}; }

void compare_fixture(const std::string& name, int64_t max_num_batched_tokens, std::optional<DType> weight_dtype) {
  Fixture f = load_fixture(name, weight_dtype);
  SCOPED_TRACE(name + (max_num_batched_tokens ? " chunk " + std::to_string(max_num_batched_tokens) : "") +
               (f.tolerance == kBf16NativeTolerance ? " (bf16 GEMM)" : " (f32 GEMM)"));
  const int num_steps = f.expected["num_steps"], top_k = f.expected["top_k"];
  std::vector<EngineCoreRequest> requests;
  for (size_t p = 0; p < f.prompts.size(); ++p) {
    requests.push_back(testing::greedy_request(std::to_string(p), f.prompts[p], num_steps));
    requests.back().sampling_params.logprobs = top_k;
  }
  testing::CoreRunOptions options;
  options.num_blocks = 64;
  if (max_num_batched_tokens > 0) options.max_num_batched_tokens = max_num_batched_tokens;
  const testing::CoreRun run = testing::run_engine_core(*f.model, std::move(requests), options);
  EXPECT_EQ(run.runner_requests_left, 0);
  EXPECT_EQ(run.kv_usage_left, 0.0) << "blocks leaked";

  int compared = 0;
  for (size_t p = 0; p < f.prompts.size(); ++p) {
    const auto& steps = f.expected["cases"][p]["steps"];
    const testing::CoreResult& r = run.results.at(std::to_string(p));
    ASSERT_EQ(r.token_ids.size(), steps.size());
    ASSERT_EQ(r.logprobs.size(), steps.size());
    for (size_t s = 0; s < steps.size(); ++s) {
      const std::string where = "prompt " + std::to_string(p) + " step " + std::to_string(s);
      compared += compare_top(r.logprobs[s], steps[s], f.tolerance, where);
      const int32_t ours = r.token_ids[s], theirs = steps[s]["id"];
      EXPECT_EQ(r.logprobs[s].token_ids[0], ours);
      if (ours != theirs) {
        EXPECT_TRUE(contains(steps[s]["top_ids"].get<std::vector<int32_t>>(), ours) &&
                    contains(top_ids_of(r.logprobs[s]), theirs))
            << where << ": ours " << ours << ", transformers " << theirs;
        break;  // the continuations differ from here on
      }
    }
  }
  EXPECT_GT(compared, 0);
}

TEST(HfFixtures, AllFixturesPresent) { EXPECT_GE(testing::fixture_model_names().size(), 12u); }

TEST(HfFixtures, GreedyIdsAndLogprobsMatchTransformers) {
  for (const std::string& name : testing::fixture_model_names()) compare_fixture(name, 0, std::nullopt);
}

TEST(HfFixtures, Bf16CheckpointsWidenedToF32MatchTransformers) {
  for (const std::string& name : testing::fixture_model_names()) {
    if (name.find("bf16") != std::string::npos) compare_fixture(name, 0, DType::kF32);
  }
}

// Chunked prefill reads earlier chunks back from the paged cache: it must give the same results.
TEST(HfFixtures, ChunkedPrefillMatchesTransformers) {
  for (const std::string& name : testing::fixture_model_names()) {
    for (int64_t chunk : {1, 7}) compare_fixture(name, chunk, std::nullopt);
  }
}

// Teacher forcing: prompt + transformers' greedy ids as one prompt with prompt_logprobs = top_k. The logits of
// position P + s - 1 are the ones transformers took step s from, so prompt position P + s must carry its top-k
// logprobs, the token (transformers' step-s id) its logprob with rank 1 (greedy picked it), whatever the chunking.
void compare_prompt_logprobs(const std::string& name, int64_t max_num_batched_tokens) {
  Fixture f = load_fixture(name, std::nullopt);
  SCOPED_TRACE(name + " chunk " + std::to_string(max_num_batched_tokens));
  const int top_k = f.expected["top_k"];
  std::vector<EngineCoreRequest> requests;
  std::vector<std::vector<int32_t>> forced(f.prompts.size());
  for (size_t p = 0; p < f.prompts.size(); ++p) {
    forced[p] = f.prompts[p];
    for (const auto& step : f.expected["cases"][p]["steps"]) forced[p].push_back(step["id"].get<int32_t>());
    requests.push_back(testing::greedy_request(std::to_string(p), forced[p], 1));
    requests.back().sampling_params.prompt_logprobs = top_k;
  }
  testing::CoreRunOptions options;
  options.num_blocks = 64;
  options.max_num_batched_tokens = max_num_batched_tokens;
  const testing::CoreRun run = testing::run_engine_core(*f.model, std::move(requests), options);
  EXPECT_EQ(run.runner_requests_left, 0);
  EXPECT_EQ(run.kv_usage_left, 0.0);
  int compared = 0;
  for (size_t p = 0; p < f.prompts.size(); ++p) {
    const testing::CoreResult& r = run.results.at(std::to_string(p));
    // Positions 1 .. len - 1, each once, in order, each starting with the prompt token itself.
    ASSERT_EQ(r.prompt_logprobs.size(), forced[p].size() - 1) << "prompt " << p;
    for (size_t q = 1; q < forced[p].size(); ++q) {
      const TokenLogprobs& lp = r.prompt_logprobs[q - 1];
      ASSERT_EQ(lp.token_ids.size(), static_cast<size_t>(1 + top_k));
      EXPECT_EQ(lp.token_ids[0], forced[p][q]) << "prompt " << p << " position " << q;
      EXPECT_LE(lp.logprobs[0], 0.f);
      EXPECT_GE(lp.sampled_token_rank, 1);
    }
    const auto& steps = f.expected["cases"][p]["steps"];
    const size_t len = f.prompts[p].size();
    for (size_t s = 0; s < steps.size(); ++s) {
      const std::string where = "prompt " + std::to_string(p) + " position " + std::to_string(len + s);
      const TokenLogprobs& lp = r.prompt_logprobs[len + s - 1];
      compared += compare_top(lp, steps[s], f.tolerance, where);
      // The token's own logprob is transformers' top-1 value (greedy chose it).
      EXPECT_NEAR(lp.logprobs[0], steps[s]["top_logprobs"][0].get<float>(), f.tolerance) << where;
      if (f.tolerance == kF32Tolerance) {
        const float gap = steps[s]["top_logprobs"][0].get<float>() - steps[s]["top_logprobs"][1].get<float>();
        if (gap > 1e-3f) {
          EXPECT_EQ(lp.sampled_token_rank, 1) << where;
        }
      }
    }
  }
  EXPECT_GT(compared, 0);
}

TEST(HfFixtures, PromptLogprobsMatchTransformers) {
  for (const std::string& name : testing::fixture_model_names()) compare_prompt_logprobs(name, 2048);
}

TEST(HfFixtures, ChunkedPromptLogprobsMatchTransformers) {
  for (const char* name : {"llama_gqa_f32", "qwen3_qknorm_bf16"}) {
    for (int64_t chunk : {1, 7}) compare_prompt_logprobs(name, chunk);
  }
}

}  // namespace
}  // namespace llmserve

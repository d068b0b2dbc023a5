// The model forward against HF transformers: every fixture in tests/fixtures/models (written by
// tests/fixtures/make_fixtures.py) must reproduce transformers' greedy ids and top-5 logprobs through the engine's
// path, within the tolerances of fixture_compare.h. Each test prints "[ distance ]" lines: the measured distance
// per fixture, from which those tolerances are set.
#include <gtest/gtest.h>

#include <iostream>

#include "fixture_compare.h"
#include "test_models.h"

namespace llmserve::testing {
namespace {

void expect_greedy_matches(const std::string& name, int64_t chunk, std::optional<DType> weight_dtype) {
  const Fixture f = load_fixture(name, weight_dtype);
  const std::string label = name + " (" + path_name(f.path) + ")" + (chunk ? " chunk " + std::to_string(chunk) : "");
  const FixtureComparison c = compare_greedy(f, chunk);
  print_distance("greedy " + label, c, f.tolerance);
  EXPECT_TRUE(c.ok()) << label << ": " << c.summary();
}

void expect_prompt_logprobs_match(const std::string& name, int64_t chunk) {
  const Fixture f = load_fixture(name, std::nullopt);
  const std::string label = name + " (" + path_name(f.path) + ") chunk " + std::to_string(chunk);
  const FixtureComparison c = compare_prompt_logprobs(f, chunk);
  print_distance("prompt " + label, c, f.tolerance);
  EXPECT_TRUE(c.ok()) << label << ": " << c.summary();
}

TEST(HfFixtures, AllFixturesPresent) {
  EXPECT_GE(fixture_model_names().size(), 12u);
  for (const std::string& name : fixture_model_names()) {
    const Fixture f = load_fixture(name, std::nullopt);
    if (f.path != FixturePath::kF32 && !f.exact_rotary) {
      std::cout << "[ distance ] " << name << ": legacy fixture (bf16-rounded rotary in the reference); regenerate "
                << "with scripts/gpu-check --fixtures" << std::endl;
    }
  }
}

TEST(HfFixtures, GreedyIdsAndLogprobsMatchTransformers) {
  for (const std::string& name : fixture_model_names()) expect_greedy_matches(name, 0, std::nullopt);
}

TEST(HfFixtures, Bf16CheckpointsWidenedToF32MatchTransformers) {
  for (const std::string& name : fixture_model_names()) {
    if (name.find("bf16") != std::string::npos) expect_greedy_matches(name, 0, DType::kF32);
  }
}

// Chunked prefill reads earlier chunks back from the paged cache: it must give the same results.
TEST(HfFixtures, ChunkedPrefillMatchesTransformers) {
  for (const std::string& name : fixture_model_names()) {
    for (int64_t chunk : {1, 7}) expect_greedy_matches(name, chunk, std::nullopt);
  }
}

TEST(HfFixtures, PromptLogprobsMatchTransformers) {
  for (const std::string& name : fixture_model_names()) expect_prompt_logprobs_match(name, 2048);
}

TEST(HfFixtures, ChunkedPromptLogprobsMatchTransformers) {
  for (const char* name : {"llama_gqa_f32", "qwen3_qknorm_bf16"}) {
    for (int64_t chunk : {1, 7}) expect_prompt_logprobs_match(name, chunk);
  }
}

}  // namespace
}  // namespace llmserve::testing

// The HF fixture oracle: runs a fixture's prompts through the engine's path (EngineCore + ModelRunner + Sampler)
// and compares ids and top-k logprobs with transformers' expected.json. Invariant: a comparison only records what
// differs (never asserts), so the same code proves a correct model passes and a mutated one fails.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/causal_lm.h"

namespace llmserve::testing {

// Logprob tolerances, |ours - transformers| per compared logprob, by path. `runtime_test
// --gtest_filter='HfFixtures.*:FixtureMutations.*'` prints "[ distance ]" lines: the largest distance per fixture
// and path, and each mutant's. A tolerance is ~2x the largest distance its path shows on a correct model, and must
// stay below the distance of the mutants it is meant to catch.
//  - kF32Tolerance: f32 checkpoints, f32 math. Measured <= 1.1e-5 (CPU, 12 fixtures, every path and chunking).
//  - kBf16Tolerance: bf16 checkpoints widened to f32 at load: the same f32 math as the reference now that the
//    fixtures carry "rotary_inv_freq": "float32" (regenerated 2026-11-25 on an H100, transformers 5.17): measured
//    <= 8.4e-6 (was 2.85e-2 with the bf16-rounded frequencies). Both bars are ~4x the largest distance and 100x
//    below the rotary-base mutant's (0.009-0.042).
//  - kBf16LegacyTolerance: older bf16 fixtures, whose reference rounded the rotary inv_freq to bf16: the fixture's
//    own error reaches 2.8e-2 (measured 2.85e-2 on llama_gqa_bf16), so a real error below ~3e-2 passes there.
//  - kBf16NativeTolerance: bf16 GEMM (activations rounded to bf16 at every matmul input, as on a GPU). Measured
//    0.060 on the regenerated fixtures (llama_gqa_bf16; 0.061 on the legacy ones): the activations' own rounding.
constexpr float kF32Tolerance = 5e-5f;
constexpr float kBf16Tolerance = 5e-5f;
constexpr float kBf16LegacyTolerance = 3e-2f;
constexpr float kBf16NativeTolerance = 1e-1f;

enum class FixturePath { kF32, kBf16Widened, kBf16Gemm };

struct Fixture {
  std::string name;
  nlohmann::json expected;
  std::unique_ptr<CausalLM> model;
  FixturePath path = FixturePath::kF32;
  bool exact_rotary = false;  // the reference used float32 rotary frequencies (see kBf16LegacyTolerance)
  float tolerance = kF32Tolerance;
  std::vector<std::vector<int32_t>> prompts;
};

std::string path_name(FixturePath path);

// Loads fixture `dir` (expected.json + the checkpoint); weight_dtype as ModelLoadOptions::weight_dtype.
Fixture load_fixture_dir(const std::string& dir, const std::string& name, std::optional<DType> weight_dtype);
Fixture load_fixture(const std::string& name, std::optional<DType> weight_dtype);

struct FixtureComparison {
  float max_distance = 0;               // largest |ours - transformers| over the compared logprobs
  int compared = 0;                     // logprobs compared
  std::vector<std::string> violations;  // each difference beyond the rules, in order
  bool ok() const { return violations.empty() && compared > 0; }
  std::string summary() const;  // distance, count and the first violations
};

// Greedy continuation with top-k logprobs. vLLM's rule: at each step equal ids, or at the first divergence each
// side's token is in the other's top-k (then stop); every shared top-k token's logprob within the tolerance.
// `model` defaults to f.model (a test may pass a wrapper around it).
FixtureComparison compare_greedy(const Fixture& f, int64_t max_num_batched_tokens, CausalLM* model = nullptr);

// Teacher forcing: prompt + transformers' continuation as one prompt with prompt_logprobs = top_k; position P + s
// must carry step s's top-k logprobs, the forced token its top-1 logprob.
FixtureComparison compare_prompt_logprobs(const Fixture& f, int64_t max_num_batched_tokens, CausalLM* model = nullptr);

// Prints "[ distance ] <label>: max |dlogprob| X over N logprobs (tolerance T)" for setting the tolerances.
void print_distance(const std::string& label, const FixtureComparison& c, float tolerance);

}  // namespace llmserve::testing

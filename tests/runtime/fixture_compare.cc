// The HF fixture oracle (see fixture_compare.h): engine runs of a fixture's prompts compared with expected.json,
// recording every difference instead of asserting, so mutation tests can demand that a comparison fails.
#include "fixture_compare.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

#include "test_models.h"

namespace llmserve::testing {
namespace {

bool contains(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

bool is_bf16_fixture(const nlohmann::json& expected) { return expected["weights_dtype"] == "bfloat16"; }

void violate(FixtureComparison& c, const std::string& what) { c.violations.push_back(what); }

// Compares one logprob; a NaN distance is a violation too.
void compare_logprob(FixtureComparison& c, float ours, float theirs, float tolerance, const std::string& where) {
  const float d = std::fabs(ours - theirs);
  c.max_distance = std::max(c.max_distance, std::isnan(d) ? INFINITY : d);
  ++c.compared;
  if (!(d <= tolerance)) {
    std::ostringstream s;
    s << where << ": ours " << ours << ", transformers " << theirs << " (|d| " << d << " > " << tolerance << ")";
    violate(c, s.str());
  }
}

// Compares the logprobs of every token both top-k lists share.
void compare_top(FixtureComparison& c, const TokenLogprobs& ours, const nlohmann::json& step, float tolerance,
                 const std::string& where) {
  const auto their_ids = step["top_ids"].get<std::vector<int32_t>>();
  const auto their_lps = step["top_logprobs"].get<std::vector<float>>();
  for (size_t k = 0; k < their_ids.size(); ++k) {
    for (size_t j = 1; j < ours.token_ids.size(); ++j) {
      if (ours.token_ids[j] == their_ids[k]) {
        compare_logprob(c, ours.logprobs[j], their_lps[k], tolerance, where + " token " + std::to_string(their_ids[k]));
      }
    }
  }
}

std::vector<int32_t> top_ids_of(const TokenLogprobs& lp) { return {lp.token_ids.begin() + 1, lp.token_ids.end()}; }

CoreRunOptions fixture_run_options(int64_t max_num_batched_tokens) {
  CoreRunOptions options;
  options.num_blocks = 64;
  if (max_num_batched_tokens > 0) options.max_num_batched_tokens = max_num_batched_tokens;
  return options;
}

}  // namespace

Fixture load_fixture_dir(const std::string& dir, const std::string& name, std::optional<DType> weight_dtype) {
  Fixture f;
  f.name = name;
  std::ifstream in(dir + "/expected.json");
  f.expected = nlohmann::json::parse(in);
  f.exact_rotary = f.expected.value("rotary_inv_freq", "") == "float32";
  if (!is_bf16_fixture(f.expected)) {
    f.path = FixturePath::kF32;
    f.tolerance = kF32Tolerance;
  } else if (weight_dtype == DType::kF32) {
    f.path = FixturePath::kBf16Widened;
    f.tolerance = f.exact_rotary ? kBf16Tolerance : kBf16LegacyTolerance;
  } else {
    f.path = FixturePath::kBf16Gemm;
    f.tolerance = kBf16NativeTolerance;
  }
  ModelLoadOptions load_options;
  load_options.weight_dtype = weight_dtype;
  StatusOr<std::unique_ptr<CausalLM>> loaded = load_model(dir, load_options);
  CHECK(loaded.ok()) << loaded.status().to_string();
  f.model = std::move(*loaded);
  for (const auto& c : f.expected["cases"]) f.prompts.push_back(c["prompt"].get<std::vector<int32_t>>());
  return f;
}

Fixture load_fixture(const std::string& name, std::optional<DType> weight_dtype) {
  return load_fixture_dir(fixtures_dir() + "/" + name, name, weight_dtype);
}

std::string path_name(FixturePath path) {
  switch (path) {
    case FixturePath::kF32:
      return "f32";
    case FixturePath::kBf16Widened:
      return "bf16 widened";
    case FixturePath::kBf16Gemm:
      return "bf16 GEMM";
  }
  return "?";
}

std::string FixtureComparison::summary() const {
  std::ostringstream s;
  s << "max |dlogprob| " << max_distance << " over " << compared << " logprobs, " << violations.size() << " violations";
  for (size_t i = 0; i < std::min<size_t>(violations.size(), 5); ++i) s << "\n  " << violations[i];
  return s.str();
}

FixtureComparison compare_greedy(const Fixture& f, int64_t max_num_batched_tokens, CausalLM* model) {
  const int num_steps = f.expected["num_steps"], top_k = f.expected["top_k"];
  std::vector<EngineCoreRequest> requests;
  for (size_t p = 0; p < f.prompts.size(); ++p) {
    requests.push_back(greedy_request(std::to_string(p), f.prompts[p], num_steps));
    requests.back().sampling_params.logprobs = top_k;
  }
  const CoreRun run =
      run_engine_core(model ? *model : *f.model, std::move(requests), fixture_run_options(max_num_batched_tokens));
  FixtureComparison c;
  if (run.runner_requests_left != 0) violate(c, "runner state left");
  if (run.kv_usage_left != 0.0) violate(c, "KV blocks leaked");
  for (size_t p = 0; p < f.prompts.size(); ++p) {
    const auto& steps = f.expected["cases"][p]["steps"];
    const CoreResult& r = run.results.at(std::to_string(p));
    if (r.token_ids.size() != steps.size() || r.logprobs.size() != steps.size()) {
      violate(c, "prompt " + std::to_string(p) + ": wrong number of steps");
      continue;
    }
    for (size_t s = 0; s < steps.size(); ++s) {
      const std::string where = "prompt " + std::to_string(p) + " step " + std::to_string(s);
      compare_top(c, r.logprobs[s], steps[s], f.tolerance, where);
      const int32_t ours = r.token_ids[s], theirs = steps[s]["id"];
      if (r.logprobs[s].token_ids[0] != ours) violate(c, where + ": logprobs not of the sampled token");
      if (ours != theirs) {
        if (!contains(steps[s]["top_ids"].get<std::vector<int32_t>>(), ours) ||
            !contains(top_ids_of(r.logprobs[s]), theirs)) {
          violate(c, where + ": ours " + std::to_string(ours) + ", transformers " + std::to_string(theirs) +
                         ", not in each other's top-k");
        }
        break;  // the continuations differ from here on
      }
    }
  }
  return c;
}

FixtureComparison compare_prompt_logprobs(const Fixture& f, int64_t max_num_batched_tokens, CausalLM* model) {
  const int top_k = f.expected["top_k"];
  std::vector<EngineCoreRequest> requests;
  std::vector<std::vector<int32_t>> forced(f.prompts.size());
  for (size_t p = 0; p < f.prompts.size(); ++p) {
    forced[p] = f.prompts[p];
    for (const auto& step : f.expected["cases"][p]["steps"]) forced[p].push_back(step["id"].get<int32_t>());
    requests.push_back(greedy_request(std::to_string(p), forced[p], 1));
    requests.back().sampling_params.prompt_logprobs = top_k;
  }
  const CoreRun run =
      run_engine_core(model ? *model : *f.model, std::move(requests), fixture_run_options(max_num_batched_tokens));
  FixtureComparison c;
  if (run.runner_requests_left != 0) violate(c, "runner state left");
  if (run.kv_usage_left != 0.0) violate(c, "KV blocks leaked");
  for (size_t p = 0; p < f.prompts.size(); ++p) {
    const CoreResult& r = run.results.at(std::to_string(p));
    // Positions 1 .. len - 1, each once, in order, each starting with the prompt token itself.
    if (r.prompt_logprobs.size() != forced[p].size() - 1) {
      violate(c, "prompt " + std::to_string(p) + ": wrong number of prompt logprobs");
      continue;
    }
    for (size_t q = 1; q < forced[p].size(); ++q) {
      const TokenLogprobs& lp = r.prompt_logprobs[q - 1];
      const std::string where = "prompt " + std::to_string(p) + " position " + std::to_string(q);
      if (lp.token_ids.size() != static_cast<size_t>(1 + top_k) || lp.token_ids[0] != forced[p][q] ||
          !(lp.logprobs[0] <= 0.f) || lp.sampled_token_rank < 1) {
        violate(c, where + ": malformed prompt logprobs");
      }
    }
    const auto& steps = f.expected["cases"][p]["steps"];
    const size_t len = f.prompts[p].size();
    for (size_t s = 0; s < steps.size(); ++s) {
      const std::string where = "prompt " + std::to_string(p) + " position " + std::to_string(len + s);
      const TokenLogprobs& lp = r.prompt_logprobs[len + s - 1];
      compare_top(c, lp, steps[s], f.tolerance, where);
      // The token's own logprob is transformers' top-1 value (greedy chose it).
      compare_logprob(c, lp.logprobs[0], steps[s]["top_logprobs"][0].get<float>(), f.tolerance, where + " (forced)");
      if (f.path == FixturePath::kF32) {
        const float gap = steps[s]["top_logprobs"][0].get<float>() - steps[s]["top_logprobs"][1].get<float>();
        if (gap > 1e-3f && lp.sampled_token_rank != 1) violate(c, where + ": forced token not rank 1");
      }
    }
  }
  return c;
}

void print_distance(const std::string& label, const FixtureComparison& c, float tolerance) {
  std::cout << "[ distance ] " << label << ": max |dlogprob| " << c.max_distance << " over " << c.compared
            << " logprobs (tolerance " << tolerance << ")" << std::endl;
}

}  // namespace llmserve::testing

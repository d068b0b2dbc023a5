// Helpers for runtime tests: locating the committed HF fixtures and the shared test data, loading models, a
// plain greedy reference (whole-sequence recompute) and a driver of EngineCore + ModelRunner.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "model/model_registry.h"

namespace llmserve::testing {

// tests/fixtures/models (relative to the repo root, the tests' working directory).
std::string fixtures_dir();
// Names of the fixture models (sub-directories holding expected.json), sorted.
std::vector<std::string> fixture_model_names();
// $LLMSERVE_TESTDATA, else ../shared/testdata.
std::string testdata_dir();
// Loads a model directory (weights in the checkpoint dtype); aborts the test binary on error (the fixtures are ours).
std::unique_ptr<CausalLM> load_model_or_die(const std::string& dir);

// Greedy continuation of `prompt`, computed the plain way: every step runs the whole sequence as one prefill
// through CausalLM::forward on a fresh cache and takes the argmax of its last row. No decode path, no runner, no
// scheduler, no sampler: the independent reference for those.
std::vector<int32_t> reference_greedy(CausalLM& model, const std::vector<int32_t>& prompt, int64_t max_tokens);

// What one request produced through EngineCore.
struct CoreResult {
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprobs> logprobs;         // per generated token (SamplingParams::logprobs)
  std::vector<TokenLogprobs> prompt_logprobs;  // prompt positions 1.. in order (SamplingParams::prompt_logprobs)
  std::optional<FinishReason> finish_reason;
};

struct CoreRunOptions {
  int64_t max_num_batched_tokens = 2048;  // small values force chunked prefill
  int32_t block_size = 16;
  int32_t num_blocks = 256;
  int64_t max_model_len = 1024;
  bool enable_prefix_caching = true;
};

struct CoreRun {
  std::map<std::string, CoreResult> results;  // by request id
  int64_t num_preemptions = 0;
  int64_t prefix_cache_hits = 0;     // tokens
  int64_t runner_requests_left = 0;  // state the ModelRunner still holds at the end (should be 0)
  double kv_usage_left = 0.0;        // KV cache usage at the end (should be 0)
};

// Runs `requests` (added at once, in order) to completion through EngineCore over a ModelRunner.
CoreRun run_engine_core(CausalLM& model, std::vector<EngineCoreRequest> requests, const CoreRunOptions& options = {});

// vLLM's rule between two runs of the same prompts (gtest expectations): equal ids, or at the first divergence each
// side's token in the other's top-k (then stop); the shared top-k tokens' logprobs within `tolerance` up to there.
void expect_same_by_rule(const CoreRun& want, const CoreRun& got, float tolerance, const std::string& label);

// A greedy request (temperature 0, ignore_eos) for run_engine_core.
EngineCoreRequest greedy_request(std::string id, std::vector<int32_t> prompt, int64_t max_tokens);

// `count` prompts of uniform random length in [min_len, max_len] with ids uniform in [0, vocab), from `seed`.
std::vector<std::vector<int32_t>> random_prompts(int count, int min_len, int max_len, int64_t vocab, uint32_t seed);

}  // namespace llmserve::testing

// Test helpers: fixture discovery, model loading, the recompute-everything greedy reference and the
// EngineCore + ModelRunner driver.
#include "test_models.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>

#include "kernels/ops.h"
#include "runtime/model_runner.h"

namespace llmserve::testing {

std::string fixtures_dir() { return "tests/fixtures/models"; }

std::vector<std::string> fixture_model_names() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(fixtures_dir())) {
    if (std::filesystem::exists(entry.path() / "expected.json")) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string testdata_dir() {
  const char* env = std::getenv("LLMSERVE_TESTDATA");
  return env != nullptr ? env : "../shared/testdata";
}

std::unique_ptr<CausalLM> load_model_or_die(const std::string& dir) {
  StatusOr<std::unique_ptr<CausalLM>> model = load_model(dir, ModelLoadOptions{});
  CHECK(model.ok()) << dir << ": " << model.status().to_string();
  return std::move(*model);
}

std::vector<int32_t> reference_greedy(CausalLM& model, const std::vector<int32_t>& prompt, int64_t max_tokens) {
  const ModelConfig& c = model.config();
  std::vector<int32_t> seq = prompt, out;
  // forward reads its buffers from an arena planned for the longest step: the whole final sequence.
  const ActivationMemory activations(model, {static_cast<int64_t>(prompt.size()) + max_tokens, 1});
  for (int64_t step = 0; step < max_tokens; ++step) {
    const int64_t n = static_cast<int64_t>(seq.size());
    // One block holding the whole sequence, fresh every step: nothing is read back from an earlier step.
    KVCacheTensors cache;
    cache.num_blocks = 1;
    cache.block_size = n;
    const KVCacheSpec spec = model.kv_cache_spec();
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      cache.key.push_back(Tensor::zeros(spec.layer_shape(1, n), DType::kF32));
      if (spec.has_value) cache.value.push_back(Tensor::zeros(spec.layer_shape(1, n), DType::kF32));
    }
    ForwardBatch batch;
    batch.input_ids = Tensor::from_i32(seq, {n});
    batch.positions = Tensor::empty({n}, DType::kI64);
    batch.attention.slot_mapping = Tensor::empty({n}, DType::kI64);
    for (int64_t i = 0; i < n; ++i) {
      batch.positions.data<int64_t>()[i] = i;
      batch.attention.slot_mapping.data<int64_t>()[i] = i;
    }
    batch.logits_indices = Tensor::empty({1}, DType::kI32);
    batch.logits_indices.data<int32_t>()[0] = static_cast<int32_t>(n - 1);
    batch.attention.query_start_loc = Tensor::from_i32({0, static_cast<int32_t>(n)}, {2});
    batch.attention.seq_lens = Tensor::from_i32({static_cast<int32_t>(n)}, {1});
    batch.attention.block_table = Tensor::from_i32({0}, {1, 1});
    batch.attention.num_reqs = 1;
    batch.attention.num_decode_tokens = n == 1 ? 1 : 0;
    batch.attention.max_query_len = n;
    batch.attention.max_seq_len = n;
    Tensor logits = Tensor::empty({1, c.vocab_size}, DType::kF32);
    model.forward(batch, cache, logits);
    Tensor next = Tensor::empty({1}, DType::kI32);
    ops::argmax(next, logits);
    out.push_back(next.data<int32_t>()[0]);
    seq.push_back(out.back());
  }
  return out;
}

CoreRun run_engine_core(CausalLM& model, std::vector<EngineCoreRequest> requests, const CoreRunOptions& options) {
  SchedulerConfig sc;
  sc.max_num_batched_tokens = options.max_num_batched_tokens;
  sc.max_model_len = options.max_model_len;
  KVCacheConfig cache;
  cache.num_blocks = options.num_blocks;
  cache.block_size = options.block_size;
  cache.enable_prefix_caching = options.enable_prefix_caching;
  ModelRunnerConfig rc;
  rc.num_blocks = options.num_blocks;
  rc.block_size = options.block_size;
  rc.max_num_tokens = sc.max_num_batched_tokens;
  rc.max_num_reqs = sc.max_num_seqs;
  rc.max_model_len = sc.max_model_len;
  ModelRunner runner(model, rc);
  EngineCore core(sc, cache, runner);
  CoreRun run;
  for (EngineCoreRequest& r : requests) {
    const std::string id = r.request_id;
    Status s = core.add_request(std::move(r));
    CHECK(s.ok()) << id << ": " << s.to_string();
    run.results[id];
  }
  for (int guard = 0; core.has_work(); ++guard) {
    CHECK_LT(guard, 100000) << "the engine does not finish";
    StatusOr<EngineCoreOutputs> outs = core.step();
    CHECK(outs.ok()) << outs.status().to_string();
    run.num_preemptions += outs->scheduler_stats.num_preemptions;
    run.prefix_cache_hits += outs->scheduler_stats.prefix_cache_hits;
    for (const EngineCoreOutput& o : outs->outputs) {
      CoreResult& r = run.results[o.request_id.str()];
      r.token_ids.insert(r.token_ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      r.logprobs.insert(r.logprobs.end(), o.new_logprobs.begin(), o.new_logprobs.end());
      r.prompt_logprobs.insert(r.prompt_logprobs.end(), o.new_prompt_logprobs.begin(), o.new_prompt_logprobs.end());
      if (o.finish_reason) r.finish_reason = o.finish_reason;
    }
  }
  // One more (empty) step hands the last finished ids to the runner, which then drops their state.
  CHECK(core.step().ok());
  run.runner_requests_left = runner.num_requests();
  run.kv_usage_left = core.scheduler().kv_cache_manager().usage();
  return run;
}

EngineCoreRequest greedy_request(std::string id, std::vector<int32_t> prompt, int64_t max_tokens) {
  EngineCoreRequest r;
  r.request_id = std::move(id);
  r.prompt_token_ids = std::move(prompt);
  r.sampling_params.temperature = 0.0;
  r.sampling_params.max_tokens = max_tokens;
  r.sampling_params.ignore_eos = true;
  return r;
}

std::vector<std::vector<int32_t>> random_prompts(int count, int min_len, int max_len, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> prompts(count);
  for (auto& p : prompts) {
    p.resize(std::uniform_int_distribution<int>(min_len, max_len)(rng));
    for (int32_t& id : p) id = std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(vocab - 1))(rng);
  }
  return prompts;
}

void expect_same_by_rule(const CoreRun& want, const CoreRun& got, float tolerance, const std::string& label) {
  ASSERT_EQ(want.results.size(), got.results.size());
  for (const auto& [id, a] : want.results) {
    const CoreResult& b = got.results.at(id);
    ASSERT_EQ(a.token_ids.size(), b.token_ids.size()) << label << " " << id;
    for (size_t j = 0; j < a.token_ids.size(); ++j) {
      const TokenLogprobs &la = a.logprobs.at(j), &lb = b.logprobs.at(j);
      for (size_t x = 0; x < la.token_ids.size(); ++x) {
        for (size_t y = 0; y < lb.token_ids.size(); ++y) {
          if (la.token_ids[x] == lb.token_ids[y]) {
            EXPECT_NEAR(la.logprobs[x], lb.logprobs[y], tolerance) << label << " " << id << " step " << j;
          }
        }
      }
      if (a.token_ids[j] == b.token_ids[j]) continue;
      auto in = [](int32_t t, const TokenLogprobs& l) {
        return std::find(l.token_ids.begin(), l.token_ids.end(), t) != l.token_ids.end();
      };
      EXPECT_TRUE(in(a.token_ids[j], lb) && in(b.token_ids[j], la)) << label << " " << id << " diverges at " << j;
      break;
    }
  }
}

}  // namespace llmserve::testing

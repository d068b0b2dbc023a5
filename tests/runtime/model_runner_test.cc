// ModelRunner driven by hand-made SchedulerOutputs (no scheduler): batching, block placement (scattered blocks,
// small block sizes), chunked prompts and the engine loop all give the greedy ids of the recompute-everything
// reference; prompt logprobs are reported once per position, only for requests that asked, and do not change
// the sampled tokens. The step inputs and logits keep their device addresses across steps of any size, and a step
// beyond the runner's capacity dies naming the limit.
#include "runtime/model_runner.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "test_models.h"

namespace llmserve {
namespace {

const char* kModel = "llama_gqa_f32";

std::vector<std::vector<int32_t>> test_prompts() {
  return {{5, 17, 99, 3}, {42}, {7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25}};
}

CausalLM& model() {
  static std::unique_ptr<CausalLM> m = testing::load_model_or_die(testing::fixtures_dir() + "/" + kModel);
  return *m;
}

struct Driven {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<TokenLogprobs>> prompt_logprobs;
};

// Admits every prompt in one step with the given block lists (covering prompt + max_tokens), computing each
// prompt in chunks of at most `chunk` tokens, then decodes greedily; finishes them all at the end.
Driven drive(ModelRunner& runner, const std::vector<std::vector<int32_t>>& prompts,
             const std::vector<std::vector<int32_t>>& blocks, int64_t max_tokens, int64_t chunk = 1 << 20,
             const std::vector<std::optional<int32_t>>& prompt_logprobs = {},
             const std::function<void()>& after_step = nullptr) {
  const size_t n = prompts.size();
  Driven out;
  out.ids.resize(n);
  out.prompt_logprobs.resize(n);
  std::vector<int64_t> computed(n, 0);
  std::vector<std::string> ids(n);
  SchedulerOutput so;
  for (size_t i = 0; i < n; ++i) {
    ids[i] = "q" + std::to_string(i);
    NewRequestData nr;
    nr.req_id = ids[i];
    nr.prompt_token_ids = prompts[i];
    nr.sampling_params.temperature = 0.0;
    if (i < prompt_logprobs.size()) nr.sampling_params.prompt_logprobs = prompt_logprobs[i];
    nr.block_ids = blocks[i];
    so.scheduled_new_reqs.push_back(std::move(nr));
  }
  for (bool first = true;; first = false) {
    if (!first) so = SchedulerOutput{};
    for (size_t i = 0; i < n; ++i) {
      if (static_cast<int64_t>(out.ids[i].size()) >= max_tokens) continue;
      const int64_t known = static_cast<int64_t>(prompts[i].size() + out.ids[i].size());
      const int64_t num = std::min(chunk, known - computed[i]);
      if (!first) so.scheduled_cached_reqs.push_back({ids[i], false, {}, computed[i]});
      so.num_scheduled_tokens.push_back({ids[i], num});
      so.total_num_scheduled_tokens += num;
      computed[i] += num;
    }
    if (so.num_scheduled_tokens.empty()) break;
    StatusOr<ModelRunnerOutput> r = runner.execute(so);
    CHECK(r.ok()) << r.status().to_string();
    CHECK_EQ(r->req_ids.size(), so.num_scheduled_tokens.size());
    if (after_step) after_step();
    for (size_t j = 0; j < r->req_ids.size(); ++j) {
      const size_t i = std::stoul(r->req_ids[j].str().substr(1));
      for (int32_t id : r->sampled_token_ids[j]) out.ids[i].push_back(id);
      if (j < r->prompt_logprobs.size()) {
        out.prompt_logprobs[i].insert(out.prompt_logprobs[i].end(), r->prompt_logprobs[j].begin(),
                                      r->prompt_logprobs[j].end());
      }
    }
  }
  so = SchedulerOutput{};
  for (const std::string& id : ids) so.finished_req_ids.push_back(id);
  CHECK(runner.execute(so).ok());
  return out;
}

// Blocks 0, 1, 2, ... in order for each prompt.
std::vector<std::vector<int32_t>> contiguous_blocks(const std::vector<std::vector<int32_t>>& prompts,
                                                    int64_t max_tokens, int32_t block_size) {
  std::vector<std::vector<int32_t>> blocks;
  int32_t next = 0;
  for (const auto& p : prompts) {
    const int64_t need = (static_cast<int64_t>(p.size()) + max_tokens + block_size - 1) / block_size;
    blocks.emplace_back();
    for (int64_t b = 0; b < need; ++b) blocks.back().push_back(next++);
  }
  return blocks;
}

TEST(ModelRunner, BatchedEqualsOneByOneEqualsReference) {
  ModelRunner runner(model(), {.num_blocks = 16, .block_size = 16});
  const auto prompts = test_prompts();
  const Driven batched = drive(runner, prompts, contiguous_blocks(prompts, 12, 16), 12);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(batched.ids[i], testing::reference_greedy(model(), prompts[i], 12)) << "prompt " << i;
    const Driven single = drive(runner, {prompts[i]}, contiguous_blocks({prompts[i]}, 12, 16), 12);
    EXPECT_EQ(single.ids[0], batched.ids[i]) << "prompt " << i;
  }
  EXPECT_EQ(runner.num_requests(), 0);
  EXPECT_TRUE(batched.prompt_logprobs[0].empty()) << "nobody asked for prompt logprobs";
}

TEST(ModelRunner, ScatteredBlocksSmallBlocksAndChunksGiveSameTokens) {
  const auto prompts = test_prompts();
  ModelRunner plain(model(), {.num_blocks = 8});
  const auto want = drive(plain, prompts, contiguous_blocks(prompts, 10, 16), 10).ids;
  // Block size 4, the cache's blocks dealt out in a shuffled order so each request's blocks are scattered.
  std::vector<int32_t> pool(64);
  for (int32_t b = 0; b < 64; ++b) pool[b] = b;
  std::shuffle(pool.begin(), pool.end(), std::mt19937(7));
  std::vector<std::vector<int32_t>> blocks;
  size_t next = 0;
  for (const auto& p : prompts) {
    blocks.emplace_back();
    for (size_t b = 0; b < (p.size() + 10 + 3) / 4; ++b) blocks.back().push_back(pool[next++]);
  }
  for (int64_t chunk : {1, 3, 1 << 20}) {
    ModelRunner runner(model(), {.num_blocks = 64, .block_size = 4});
    EXPECT_EQ(drive(runner, prompts, blocks, 10, chunk).ids, want) << "chunk " << chunk;
  }
}

// The KV cache follows the model's KVCacheSpec: a Llama-family model's key and value [heads, head_dim] per token and
// layer; DeepSeek-V3's one latent row and no value tensor. A block's bytes (what the GPU memory plan divides the
// free memory by) are the spec's, and scattered small blocks still give the reference's tokens.
TEST(ModelRunner, KvCacheFollowsTheModelsSpec) {
  EXPECT_EQ(ModelRunner::kv_block_bytes(model(), 16), 2u * 2 * 16 * 2 * 16 * 4);  // K+V, 2 layers, 2 kv heads of 16
  std::unique_ptr<CausalLM> mla = testing::load_model_or_die(testing::fixtures_dir() + "/deepseek_v3_f32");
  EXPECT_EQ(ModelRunner::kv_block_bytes(*mla, 16), 3u * 16 * (64 + 16) * 4);  // 3 layers, L + R, f32
  const auto prompts = test_prompts();
  std::vector<int32_t> pool(64);
  for (int32_t b = 0; b < 64; ++b) pool[b] = b;
  std::shuffle(pool.begin(), pool.end(), std::mt19937(11));
  std::vector<std::vector<int32_t>> blocks;
  size_t next = 0;
  for (const auto& p : prompts) {
    blocks.emplace_back();
    for (size_t b = 0; b < (p.size() + 8 + 3) / 4; ++b) blocks.back().push_back(pool[next++]);
  }
  ModelRunner runner(*mla, {.num_blocks = 64, .block_size = 4});
  const Driven got = drive(runner, prompts, blocks, 8, 3);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got.ids[i], testing::reference_greedy(*mla, prompts[i], 8)) << "prompt " << i;
  }
}

TEST(ModelRunner, PromptLogprobsOnlyForThoseAskingAndOncePerPosition) {
  const auto prompts = test_prompts();
  ModelRunner plain(model(), {.num_blocks = 16});
  const Driven without = drive(plain, prompts, contiguous_blocks(prompts, 6, 16), 6);
  for (int64_t chunk : {1, 5, 1 << 20}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    ModelRunner runner(model(), {.num_blocks = 16});
    const Driven with = drive(runner, prompts, contiguous_blocks(prompts, 6, 16), 6, chunk, {3, std::nullopt, 0});
    EXPECT_EQ(with.ids, without.ids);
    EXPECT_EQ(with.prompt_logprobs[0].size(), prompts[0].size() - 1);
    EXPECT_TRUE(with.prompt_logprobs[1].empty());
    ASSERT_EQ(with.prompt_logprobs[2].size(), prompts[2].size() - 1);
    for (size_t q = 1; q < prompts[0].size(); ++q) {
      const TokenLogprobs& lp = with.prompt_logprobs[0][q - 1];
      EXPECT_EQ(lp.token_ids.size(), 4u);
      EXPECT_EQ(lp.token_ids[0], prompts[0][q]);
    }
    for (size_t q = 1; q < prompts[2].size(); ++q) {
      const TokenLogprobs& lp = with.prompt_logprobs[2][q - 1];
      EXPECT_EQ(lp.token_ids, std::vector<int32_t>{prompts[2][q]}) << "k = 0: the prompt token alone";
      EXPECT_GE(lp.sampled_token_rank, 1);
    }
  }
}

std::vector<const void*> addresses(const ModelRunner& runner) {
  const ModelRunner::StepAddresses a = runner.last_step_addresses();
  return {a.input_ids,      a.positions,   a.slot_mapping, a.query_start_loc, a.seq_lens,
          a.logits_indices, a.block_table, a.logits,       a.sampler_params};
}

// Prefill chunks of 1..5 tokens over 1..3 requests, then decodes: every step reads its inputs and writes its logits
// at the same device addresses (what CUDA graphs replay), and the tokens stay the reference's.
TEST(ModelRunner, InputsAndLogitsKeepTheirAddressesAcrossStepSizes) {
  const auto prompts = test_prompts();
  ModelRunner runner(
      model(), {.num_blocks = 16, .block_size = 16, .max_num_tokens = 64, .max_num_reqs = 4, .max_model_len = 64});
  EXPECT_EQ(runner.limits().max_num_tokens, 64);
  EXPECT_EQ(runner.limits().max_num_reqs, 4);
  EXPECT_EQ(runner.limits().max_blocks_per_seq, 4);
  std::vector<std::vector<const void*>> seen;
  const Driven out =
      drive(runner, prompts, contiguous_blocks(prompts, 8, 16), 8, 5, {}, [&] { seen.push_back(addresses(runner)); });
  ASSERT_GT(seen.size(), 5u);
  for (const void* p : seen[0]) EXPECT_NE(p, nullptr);
  for (size_t step = 1; step < seen.size(); ++step) EXPECT_EQ(seen[step], seen[0]) << "step " << step;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(out.ids[i], testing::reference_greedy(model(), prompts[i], 8)) << "prompt " << i;
  }
}

// More prompt-logprob rows than the persistent logits hold: those steps use a scratch, with the same results.
TEST(ModelRunner, PromptLogprobRowsBeyondThePersistentLogits) {
  const auto prompts = test_prompts();
  ModelRunner plain(model(), {.num_blocks = 16});
  const Driven want = drive(plain, prompts, contiguous_blocks(prompts, 4, 16), 4, 1 << 20, {2, 1, 0});
  ModelRunner small(model(), {.num_blocks = 16, .max_num_reqs = 3});
  const Driven got = drive(small, prompts, contiguous_blocks(prompts, 4, 16), 4, 1 << 20, {2, 1, 0});
  EXPECT_EQ(got.ids, want.ids);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(got.prompt_logprobs[i].size(), want.prompt_logprobs[i].size());
    for (size_t q = 0; q < got.prompt_logprobs[i].size(); ++q) {
      EXPECT_EQ(got.prompt_logprobs[i][q].token_ids, want.prompt_logprobs[i][q].token_ids);
      EXPECT_EQ(got.prompt_logprobs[i][q].logprobs, want.prompt_logprobs[i][q].logprobs);
    }
  }
}

TEST(ModelRunnerDeathTest, StepBeyondCapacityNamesTheLimit) {
  const auto prompts = test_prompts();  // 4, 1 and 19 tokens
  const auto blocks = contiguous_blocks(prompts, 2, 16);
  EXPECT_DEATH(
      {
        ModelRunner runner(model(), {.num_blocks = 16, .block_size = 16, .max_num_tokens = 16});
        drive(runner, prompts, blocks, 2);
      },
      "max_num_tokens 16");
  EXPECT_DEATH(
      {
        ModelRunner runner(model(), {.num_blocks = 16, .block_size = 16, .max_num_reqs = 2});
        drive(runner, prompts, blocks, 2);
      },
      "max_num_reqs 2");
  EXPECT_DEATH(
      {
        ModelRunner runner(model(), {.num_blocks = 16, .block_size = 16, .max_model_len = 16});
        drive(runner, prompts, blocks, 2);
      },
      "max_blocks_per_seq 1");
}

// The engine loop (scheduler + runner) with a budget that forces chunked prefill.
// The split API under async scheduling: step 2 is launched before step 1 is waited for and computes step 1's
// sampled token (a placeholder for the scheduler) with the same result as one step at a time; a preemption while
// step 1 is outstanding drops its token (the scheduler discards it), so the resumed request samples it again.
TEST(ModelRunner, SplitApiOverlapsStepsAndDropsAPreemptedOutstandingToken) {
  const std::vector<int32_t> prompt = {5, 17, 99, 3};
  auto first_step = [&] {
    SchedulerOutput so;
    NewRequestData nr;
    nr.req_id = "a";
    nr.prompt_token_ids = prompt;
    nr.sampling_params.temperature = 0.0;
    nr.block_ids = {0};
    so.scheduled_new_reqs.push_back(std::move(nr));
    so.num_scheduled_tokens.push_back({"a", 4});
    so.total_num_scheduled_tokens = 4;
    return so;
  };
  SchedulerOutput decode;
  decode.scheduled_cached_reqs.push_back({"a", false, {}, 4});
  decode.num_scheduled_tokens.push_back({"a", 1});
  decode.total_num_scheduled_tokens = 1;

  ModelRunner sync(model(), {.num_blocks = 4, .block_size = 8});
  StatusOr<ModelRunnerOutput> s1 = sync.execute(first_step());
  StatusOr<ModelRunnerOutput> s2 = sync.execute(decode);
  ASSERT_TRUE(s1.ok() && s2.ok());

  ModelRunner async(model(), {.num_blocks = 4, .block_size = 8});
  StatusOr<ModelExecutor::StepHandle> h1 = async.execute_async(first_step());
  StatusOr<ModelExecutor::StepHandle> h2 = async.execute_async(decode);
  ASSERT_TRUE(h1.ok() && h2.ok());
  StatusOr<ModelRunnerOutput> a1 = async.wait(*h1);
  StatusOr<ModelRunnerOutput> a2 = async.wait(*h2);
  ASSERT_TRUE(a1.ok() && a2.ok());
  EXPECT_EQ(a1->sampled_token_ids, s1->sampled_token_ids);
  EXPECT_EQ(a2->sampled_token_ids, s2->sampled_token_ids);

  ModelRunner preempting(model(), {.num_blocks = 4, .block_size = 8});
  StatusOr<ModelExecutor::StepHandle> p1 = preempting.execute_async(first_step());
  SchedulerOutput preempt;
  preempt.preempted_req_ids.push_back("a");
  StatusOr<ModelExecutor::StepHandle> p2 = preempting.execute_async(preempt);
  ASSERT_TRUE(p1.ok() && p2.ok());
  EXPECT_EQ(preempting.wait(*p1)->sampled_token_ids, s1->sampled_token_ids);  // discarded by the scheduler
  ASSERT_TRUE(preempting.wait(*p2).ok());
  SchedulerOutput resume;
  resume.scheduled_cached_reqs.push_back({"a", true, {2}, 0});
  resume.num_scheduled_tokens.push_back({"a", 4});
  resume.total_num_scheduled_tokens = 4;
  StatusOr<ModelRunnerOutput> again = preempting.execute(resume);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->sampled_token_ids, s1->sampled_token_ids) << "the prompt alone samples the first token again";
}

TEST(ModelRunner, EngineCoreEqualsReference) {
  const auto prompts = test_prompts();
  for (int64_t budget : {5, 2048}) {
    std::vector<EngineCoreRequest> reqs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      reqs.push_back(testing::greedy_request(std::to_string(i), prompts[i], 9));
    }
    const testing::CoreRun run = testing::run_engine_core(
        model(), std::move(reqs), {.max_num_batched_tokens = budget, .num_blocks = 32, .max_model_len = 128});
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(run.results.at(std::to_string(i)).token_ids, testing::reference_greedy(model(), prompts[i], 9))
          << "budget " << budget << " prompt " << i;
    }
    EXPECT_EQ(run.runner_requests_left, 0);
    EXPECT_EQ(run.kv_usage_left, 0.0);
  }
}

}  // namespace
}  // namespace llmserve

// AsyncLLM end to end over a real EngineCoreClient on an HF fixture model: many concurrent greedy requests
// submitted from several threads give exactly LLMEngine's outputs (the single-threaded oracle), every request
// gets exactly one final output, aborts from other threads free the KV cache, rejected requests never reach
// the core, and shutting down with live requests is clean. Parametrized over the client kinds.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <random>
#include <thread>

#include "async_llm_harness.h"
#include "failing_executor.h"
#include "frontend/llm_engine.h"
#include "frontend/async_llm_factory.h"
#include "ipc/inproc_client.h"
#include "test_models.h"

namespace llmserve {
namespace {

using testing::check_stream;
using testing::OutputCollector;

CausalLM &fixture(const std::string &name) {
  static std::map<std::string, std::unique_ptr<CausalLM>> models;
  auto &m = models[name];
  if (!m) m = testing::load_model_or_die(testing::fixtures_dir() + "/" + name);
  return *m;
}

std::string rid(const std::string &prefix, size_t i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

struct Job {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams params;
};

std::vector<Job> random_jobs(int count, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Job> jobs(count);
  for (int i = 0; i < count; ++i) {
    Job &j = jobs[i];
    j.id = rid("req", i);
    j.prompt.resize(std::uniform_int_distribution<int>(1, 40)(rng));
    for (int32_t &t : j.prompt) t = std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(vocab - 1))(rng);
    j.params.temperature = 0.0;
    j.params.max_tokens = std::uniform_int_distribution<int>(1, 24)(rng);
    j.params.ignore_eos = i % 3 != 0;  // some may stop at EOS
    j.params.n = i % 7 == 0 ? 2 : 1;
    if (i % 5 == 0) j.params.logprobs = 2;
  }
  return jobs;
}

// The oracle: LLMEngine stepping every job on this thread.
std::map<std::string, RequestOutput> reference_outputs(CausalLM &model, const EngineArgs &args,
                                                       const std::vector<Job> &jobs) {
  std::unique_ptr<LLMEngine> engine = std::move(LLMEngine::create(model, nullptr, args)).value();
  for (const Job &j : jobs) {
    PromptInput p;
    p.token_ids = j.prompt;
    CHECK_OK(engine->add_request(j.id, p, j.params));
  }
  std::map<std::string, RequestOutput> done;
  while (engine->has_unfinished()) {
    std::vector<RequestOutput> outs = std::move(engine->step()).value();  // not in the for: it would dangle
    for (RequestOutput &o : outs) {
      if (o.finished) done[o.request_id] = std::move(o);
    }
  }
  return done;
}

enum class ClientKind { kInproc, kProcess };

// The engine-core child's flags for `args` on the fixture `model_name` (what `serve --engine-process` passes).
EngineProcessOptions process_options(const std::string &model_name, const EngineArgs &args) {
  EngineProcessOptions o;
#ifdef LLMSERVE_BIN
  o.executable = LLMSERVE_BIN;
#endif
  o.args = {"engine-core",
            "--model=" + testing::fixtures_dir() + "/" + model_name,
            "--max-model-len=" + std::to_string(args.max_model_len),
            "--max-num-seqs=" + std::to_string(args.max_num_seqs),
            "--max-num-batched-tokens=" + std::to_string(args.max_num_batched_tokens),
            "--block-size=" + std::to_string(args.block_size),
            "--kv-cache-tokens=" + std::to_string(args.num_kv_cache_tokens),
            "--seed=" + std::to_string(args.seed),
            args.enable_prefix_caching ? "--enable-prefix-caching" : "--no-enable-prefix-caching"};
  o.startup_timeout_s = 60.0;
  return o;
}

class AsyncLLMTest : public ::testing::TestWithParam<ClientKind> {
 protected:
  // Every test here runs on this fixture model.
  std::unique_ptr<AsyncLLM> make(CausalLM &model, const EngineArgs &args) {
    StatusOr<std::unique_ptr<AsyncLLM>> llm =
        GetParam() == ClientKind::kInproc ? create_inproc_async_llm(model, nullptr, args)
                                          : create_process_async_llm(nullptr, process_options("llama_gqa_f32", args));
    CHECK(llm.ok()) << llm.status().to_string();
    return std::move(llm).value();
  }
};

EngineArgs small_args() {
  EngineArgs a;
  a.max_num_batched_tokens = 64;  // chunked prefill and mixed batches
  a.max_num_seqs = 8;
  return a;
}

TEST_P(AsyncLLMTest, ConcurrentGreedyMatchesLLMEngine) {
  CausalLM &model = fixture("llama_gqa_f32");
  const EngineArgs args = small_args();
  const std::vector<Job> jobs = random_jobs(48, model.config().vocab_size, 7);
  const std::map<std::string, RequestOutput> expected = reference_outputs(model, args, jobs);
  ASSERT_EQ(expected.size(), jobs.size());

  OutputCollector collector;  // outlives the AsyncLLM, whose thread calls into it
  std::unique_ptr<AsyncLLM> llm = make(model, args);
  llm->set_stats_callback(collector.stats_callback());
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < jobs.size(); i += kThreads) {
        PromptInput p;
        p.token_ids = jobs[i].prompt;
        Status s = llm->add_request(jobs[i].id, p, jobs[i].params, 0, collector.callback(jobs[i].id));
        EXPECT_TRUE(s.ok()) << s.to_string();
      }
    });
  }
  for (auto &th : threads) th.join();
  ASSERT_TRUE(collector.wait_finished(static_cast<int>(jobs.size())));

  int64_t num_sequences = 0, num_tokens = 0;
  for (const auto &[id, stream] : collector.streams()) {
    const RequestOutput got = check_stream(id, stream);
    const RequestOutput &want = expected.at(id);
    ASSERT_EQ(got.outputs.size(), want.outputs.size()) << id;
    for (size_t k = 0; k < want.outputs.size(); ++k) {
      EXPECT_EQ(got.outputs[k].token_ids, want.outputs[k].token_ids) << id << " seq " << k;
      EXPECT_EQ(got.outputs[k].finish_reason, want.outputs[k].finish_reason) << id;
      ASSERT_EQ(got.outputs[k].logprobs.size(), want.outputs[k].logprobs.size()) << id;
      for (size_t t = 0; t < want.outputs[k].logprobs.size(); ++t) {
        EXPECT_EQ(got.outputs[k].logprobs[t].token_ids, want.outputs[k].logprobs[t].token_ids) << id;
      }
      ++num_sequences;
      num_tokens += static_cast<int64_t>(want.outputs[k].token_ids.size());
    }
    EXPECT_EQ(got.prompt_token_ids, want.prompt_token_ids) << id;
  }
  EXPECT_EQ(collector.streams().size(), jobs.size());

  // Stats: every sequence's tokens counted once, one TTFT and one finished entry per sequence, sane times.
  llm->shutdown();  // no more stats after this
  int64_t stat_tokens = 0, num_ttft = 0, num_finished = 0;
  for (const IterationStats &s : collector.stats()) {
    stat_tokens += s.num_generation_tokens;
    num_ttft += static_cast<int64_t>(s.time_to_first_tokens.size());
    num_finished += static_cast<int64_t>(s.finished_requests.size());
    for (double x : s.time_to_first_tokens) EXPECT_GE(x, 0.0);
    for (double x : s.inter_token_latencies) EXPECT_GE(x, 0.0);
    for (const FinishedRequestStats &f : s.finished_requests) {
      EXPECT_GE(f.queued_time, 0.0);
      EXPECT_GE(f.prefill_time, 0.0);
      EXPECT_GE(f.decode_time, 0.0);
      EXPECT_GE(f.e2e_latency, f.queued_time + f.prefill_time + f.decode_time - 1e-6);
      EXPECT_GE(f.num_generation_tokens, 1);
    }
  }
  EXPECT_EQ(stat_tokens, num_tokens);
  EXPECT_EQ(num_ttft, num_sequences);
  EXPECT_EQ(num_finished, num_sequences);
  ASSERT_FALSE(collector.stats().empty());
  EXPECT_EQ(collector.stats().back().scheduler_stats.num_running_reqs, 0);
  EXPECT_EQ(collector.stats().back().scheduler_stats.kv_cache_usage, 0.0);
}

TEST_P(AsyncLLMTest, AbortFromAnotherThreadFreesTheRequest) {
  CausalLM &model = fixture("llama_gqa_f32");
  OutputCollector collector;
  std::unique_ptr<AsyncLLM> llm = make(model, small_args());
  llm->set_stats_callback(collector.stats_callback());
  SamplingParams params;
  params.temperature = 0.0;
  params.ignore_eos = true;
  params.max_tokens = 200;
  const std::vector<int32_t> prompt = {5, 9, 17, 33, 2, 8};
  for (int i = 0; i < 4; ++i) {
    PromptInput p;
    p.token_ids = prompt;
    p.token_ids.push_back(i);
    ASSERT_TRUE(llm->add_request(rid("long", i), p, params, 0, collector.callback(rid("long", i))).ok());
  }
  ASSERT_TRUE(collector.wait_any_output("long0"));
  std::thread aborter([&] {
    for (int i = 0; i < 4; ++i) llm->abort_request(rid("long", i));
    llm->abort_request("unknown-id");  // ignored
  });
  aborter.join();
  ASSERT_TRUE(collector.wait_finished(4));
  for (const auto &[id, stream] : collector.streams()) {
    const RequestOutput last = check_stream(id, stream);
    ASSERT_EQ(last.outputs.size(), 1u);
    EXPECT_EQ(last.outputs[0].finish_reason, FinishReason::kAbort) << id;
    EXPECT_LT(last.outputs[0].token_ids.size(), 200u) << id;
  }
  const std::vector<IterationStats> stats = collector.stats();
  ASSERT_FALSE(stats.empty());
  EXPECT_EQ(stats.back().scheduler_stats.kv_cache_usage, 0.0);
  EXPECT_EQ(stats.back().scheduler_stats.num_running_reqs + stats.back().scheduler_stats.num_waiting_reqs, 0);
  int num_aborted = 0;
  for (const IterationStats &s : stats) {
    for (const FinishedRequestStats &f : s.finished_requests) num_aborted += f.finish_reason == FinishReason::kAbort;
  }
  EXPECT_EQ(num_aborted, 4);
  // The ids are free again and the engine still works.
  PromptInput p;
  p.token_ids = prompt;
  params.max_tokens = 3;
  ASSERT_TRUE(llm->add_request("long0", p, params, 0, collector.callback("again")).ok());
  ASSERT_TRUE(collector.wait_finished(5));
  EXPECT_EQ(check_stream("again", collector.streams().at("again"), "long0").outputs[0].token_ids.size(), 3u);
}

TEST_P(AsyncLLMTest, RejectedRequestsLeaveNoTrace) {
  CausalLM &model = fixture("llama_gqa_f32");
  EngineArgs args = small_args();
  args.max_model_len = 64;
  OutputCollector collector;
  std::unique_ptr<AsyncLLM> llm = make(model, args);
  EXPECT_EQ(llm->max_model_len(), 64);
  EXPECT_EQ(llm->vocab_size(), model.config().vocab_size);
  EXPECT_EQ(llm->tokenizer(), nullptr);
  SamplingParams ok;
  ok.temperature = 0.0;
  ok.max_tokens = 4;
  ok.ignore_eos = true;
  PromptInput good;
  good.token_ids = {1, 2, 3};
  struct Bad {
    std::string what;
    PromptInput prompt;
    SamplingParams params;
    StatusCode code;
  };
  std::vector<Bad> bad;
  bad.push_back({"temperature", good, ok, StatusCode::kInvalidArgument});
  bad.back().params.temperature = -1.0;
  bad.push_back({"empty prompt", PromptInput{}, ok, StatusCode::kInvalidArgument});
  bad.back().prompt.text = "";
  bad.push_back({"text without tokenizer", PromptInput{"hello", {}}, ok, StatusCode::kInvalidArgument});
  bad.push_back({"id outside vocab", PromptInput{"", {1, 256}}, ok, StatusCode::kInvalidArgument});
  bad.push_back({"negative id", PromptInput{"", {-1}}, ok, StatusCode::kInvalidArgument});
  bad.push_back({"too long", PromptInput{"", std::vector<int32_t>(64, 1)}, ok, StatusCode::kInvalidArgument});
  bad.push_back({"max_tokens", good, ok, StatusCode::kInvalidArgument});
  bad.back().params.max_tokens = 62;
  bad.push_back({"n", good, ok, StatusCode::kInvalidArgument});
  bad.back().params.n = 0;
  bad.push_back({"stop without tokenizer", good, ok, StatusCode::kInvalidArgument});
  bad.back().params.stop = {"x"};
  bad.push_back({"prompt_logprobs", good, ok, StatusCode::kInvalidArgument});
  bad.back().params.prompt_logprobs = SamplingParams::kMaxLogprobs + 1;
  for (const Bad &b : bad) {
    Status s = llm->add_request("r", b.prompt, b.params, 0, collector.callback("r"));
    EXPECT_EQ(s.code(), b.code) << b.what << ": " << s.to_string();
  }
  // A live id is refused; after rejections the same id works and nothing else ever produced output.
  ASSERT_TRUE(llm->add_request("r", good, ok, 0, collector.callback("r")).ok());
  EXPECT_EQ(llm->add_request("r", good, ok, 0, collector.callback("dup")).code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(collector.wait_finished(1));
  auto streams = collector.streams();
  ASSERT_EQ(streams.size(), 1u);
  EXPECT_EQ(check_stream("r", streams.at("r")).outputs[0].token_ids.size(), 4u);
  EXPECT_TRUE(llm->healthy());
}

TEST_P(AsyncLLMTest, ShutdownWithLiveRequestsIsClean) {
  CausalLM &model = fixture("llama_gqa_f32");
  OutputCollector collector;
  std::unique_ptr<AsyncLLM> llm = make(model, small_args());
  SamplingParams params;
  params.temperature = 0.0;
  params.ignore_eos = true;
  params.max_tokens = 150;
  for (int i = 0; i < 12; ++i) {
    PromptInput p;
    p.token_ids = {static_cast<int32_t>(i + 1), 4, 4, 7};
    ASSERT_TRUE(llm->add_request(rid("s", i), p, params, 0, collector.callback(rid("s", i))).ok());
  }
  ASSERT_TRUE(collector.wait_any_output("s0"));
  llm->shutdown();
  const size_t seen = collector.streams().size();
  int num_outputs = 0;
  for (const auto &[id, s] : collector.streams()) num_outputs += static_cast<int>(s.outputs.size());
  EXPECT_FALSE(llm->healthy());
  PromptInput p;
  p.token_ids = {1};
  EXPECT_EQ(llm->add_request("late", p, params, 0, collector.callback("late")).code(), StatusCode::kUnavailable);
  llm->abort_request("s1");  // no-op after shutdown
  llm->shutdown();           // idempotent
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  int after = 0;
  for (const auto &[id, s] : collector.streams()) after += static_cast<int>(s.outputs.size());
  EXPECT_EQ(after, num_outputs) << "outputs after shutdown";
  EXPECT_EQ(collector.streams().size(), seen);
  llm.reset();
}

// The core dies mid-generation (an executor error): every live request gets its final abort output, the
// frontend turns unhealthy and refuses new requests with Unavailable.
TEST(AsyncLLMCoreDeathTest, EveryLiveRequestGetsAFinalAbort) {
  CausalLM &model = fixture("llama_gqa_f32");
  EngineArgs args = small_args();
  args.log_stats = true;
  const EngineCoreConfig config = std::move(make_engine_core_config(model, args)).value();
  std::unique_ptr<InprocClient> client = std::move(InprocClient::create([&]() -> StatusOr<EngineCoreInstance> {
                                           return testing::build_core_failing_at(model, config, /*fail_at=*/6);
                                         })).value();
  OutputCollector collector;
  std::unique_ptr<AsyncLLM> llm = make_async_llm(std::move(client), nullptr, config.info());
  SamplingParams params;
  params.temperature = 0.0;
  params.ignore_eos = true;
  params.max_tokens = 100;
  for (int i = 0; i < 5; ++i) {
    PromptInput p;
    p.token_ids = {static_cast<int32_t>(10 + i), 3, 3};
    params.n = i == 0 ? 3 : 1;
    ASSERT_TRUE(llm->add_request(rid("d", i), p, params, 0, collector.callback(rid("d", i))).ok());
  }
  ASSERT_TRUE(collector.wait_finished(5));
  for (const auto &[id, stream] : collector.streams()) {
    const RequestOutput last = check_stream(id, stream);
    for (const CompletionOutput &c : last.outputs) EXPECT_EQ(c.finish_reason, FinishReason::kAbort) << id;
  }
  EXPECT_FALSE(llm->healthy());
  PromptInput p;
  p.token_ids = {1};
  params.n = 1;
  EXPECT_EQ(llm->add_request("late", p, params, 0, collector.callback("late")).code(), StatusCode::kUnavailable);
  llm->abort_request("d1");  // no-op
}

#if LLMSERVE_WITH_ZMQ
INSTANTIATE_TEST_SUITE_P(Clients, AsyncLLMTest, ::testing::Values(ClientKind::kInproc, ClientKind::kProcess),
                         [](const ::testing::TestParamInfo<ClientKind> &info) {
                           return std::string(info.param == ClientKind::kInproc ? "Thread" : "Process");
                         });
#else
INSTANTIATE_TEST_SUITE_P(Clients, AsyncLLMTest, ::testing::Values(ClientKind::kInproc),
                         [](const ::testing::TestParamInfo<ClientKind> &) { return std::string("Thread"); });
#endif

}  // namespace
}  // namespace llmserve

// Scheduler unit tests: admission errors, budget and chunked prefill, stop rules, priority / FCFS order,
// preemption victim choice, aborts and frontend-driven stops, stats and events.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "fake_runner.h"

namespace llmserve {
namespace {

using testing::FakeRunner;

EngineCoreRequest make(const std::string& id, int prompt_len, int64_t max_tokens, int32_t priority = 0,
                       double arrival = 0) {
  EngineCoreRequest r;
  r.request_id = id;
  for (int i = 0; i < prompt_len; ++i) r.prompt_token_ids.push_back((i * 7 + 3) % 50);
  r.sampling_params.max_tokens = max_tokens;
  r.priority = priority;
  r.arrival_time = arrival;
  return r;
}

// Runs until idle; returns the request ids in the order they finished.
std::vector<std::string> drain(Scheduler& s, FakeRunner& runner, std::vector<EngineCoreOutputs>* all = nullptr) {
  std::vector<std::string> order;
  for (int step = 0; step < 10000 && s.has_work(); ++step) {
    SchedulerOutput so = s.schedule();
    EngineCoreOutputs outs = s.update_from_output(so, runner.execute(so));
    for (const auto& o : outs.outputs) {
      if (o.finished()) order.push_back(o.request_id);
    }
    if (all) all->push_back(std::move(outs));
  }
  return order;
}

TEST(SchedulerTest, RejectsPromptsThatDoNotFitMaxModelLen) {
  Scheduler s({.max_model_len = 32}, {.num_blocks = 4, .block_size = 8});
  Status st = s.add_request(make("long", 33, 1));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("maximum model length of 32"), std::string::npos) << st.message();
  st = s.add_request(make("exact", 32, 1));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  st = s.add_request(make("sum", 20, 13));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message().rfind("max_tokens", 0), 0u) << st.message();
  EXPECT_NE(st.message().find("33 tokens (20 in the prompt, 13 in the completion)"), std::string::npos);
  st = s.add_request(make("empty", 0, 1));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.num_waiting(), 0);
  EXPECT_EQ(s.kv_cache_manager().block_pool().num_cached_blocks(), 0);
  EXPECT_TRUE(s.add_request(make("fits", 20, 12)).ok());
  EXPECT_EQ(s.add_request(make("fits", 3, 1)).code(), StatusCode::kAlreadyExists);
  // max_tokens unset: fill up to max_model_len.
  EngineCoreRequest open = make("open", 30, 1);
  open.sampling_params.max_tokens = std::nullopt;
  EXPECT_TRUE(s.add_request(open).ok());
  FakeRunner runner(4, 8, 50);
  std::vector<EngineCoreOutputs> all;
  drain(s, runner, &all);
  size_t open_tokens = 0;
  for (const auto& o : all) {
    for (const auto& out : o.outputs) {
      if (out.request_id == "open") open_tokens += out.new_token_ids.size();
    }
  }
  EXPECT_EQ(open_tokens, 2u);
}

TEST(SchedulerConfigTest, ValidateNamesTheField) {
  KVCacheConfig cache{.num_blocks = 4, .block_size = 8};
  EXPECT_TRUE(SchedulerConfig{.max_model_len = 32}.validate(cache).ok());
  Status st = SchedulerConfig{.max_model_len = 33}.validate(cache);
  EXPECT_EQ(st.message().rfind("max_model_len", 0), 0u) << st.message();
  auto starts_with = [](const Status& st, const std::string& field) { return st.message().rfind(field, 0) == 0; };
  EXPECT_TRUE(starts_with(SchedulerConfig{.max_num_batched_tokens = 0, .max_model_len = 8}.validate(cache),
                          "max_num_batched_tokens"));
  EXPECT_TRUE(starts_with(SchedulerConfig{.max_num_seqs = 0, .max_model_len = 8}.validate(cache), "max_num_seqs"));
}

TEST(SchedulerTest, ChunkedPrefillAndBudget) {
  // A 50-token prompt under a 16-token budget takes 4 steps; a decode request shares the budget.
  Scheduler s({.max_num_batched_tokens = 16, .max_model_len = 128}, {.num_blocks = 32, .block_size = 4});
  FakeRunner runner(32, 4, 50);
  ASSERT_TRUE(s.add_request(make("short", 3, 5)).ok());
  SchedulerOutput so = s.schedule();
  ASSERT_EQ(so.scheduled_new_reqs.size(), 1u);
  s.update_from_output(so, runner.execute(so));
  ASSERT_TRUE(s.add_request(make("long", 50, 2)).ok());
  std::vector<int64_t> long_chunks;
  for (int i = 0; i < 4; ++i) {
    so = s.schedule();
    EXPECT_EQ(so.num_scheduled_tokens_of("short"), 1);
    EXPECT_LE(so.total_num_scheduled_tokens, 16);
    long_chunks.push_back(so.num_scheduled_tokens_of("long"));
    ModelRunnerOutput ro = runner.execute(so);
    // No token comes out of a partial prefill.
    for (size_t k = 0; k < ro.req_ids.size(); ++k) {
      if (ro.req_ids[k] == "long") {
        EXPECT_EQ(ro.sampled_token_ids[k].empty(), i < 3);
      }
    }
    s.update_from_output(so, ro);
  }
  EXPECT_EQ(long_chunks, (std::vector<int64_t>{15, 15, 15, 5}));
}

TEST(SchedulerTest, StopRules) {
  // Decide the fake model's continuation first, then place EOS / stop ids on it.
  FakeRunner probe(16, 4, 50);
  Scheduler p({.max_model_len = 64}, {.num_blocks = 16, .block_size = 4});
  ASSERT_TRUE(p.add_request(make("p", 5, 10)).ok());
  std::vector<int32_t> cont;
  for (int i = 0; i < 20 && p.has_work(); ++i) {
    SchedulerOutput so = p.schedule();
    for (const auto& o : p.update_from_output(so, probe.execute(so)).outputs) {
      cont.insert(cont.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
  }
  ASSERT_EQ(cont.size(), 10u);
  auto run = [&](EngineCoreRequest r) {
    Scheduler s({.max_model_len = 64}, {.num_blocks = 16, .block_size = 4});
    FakeRunner runner(16, 4, 50);
    EXPECT_TRUE(s.add_request(std::move(r)).ok());
    std::vector<EngineCoreOutputs> all;
    drain(s, runner, &all);
    EngineCoreOutput last;
    std::vector<int32_t> toks;
    for (auto& o : all) {
      for (auto& out : o.outputs) {
        toks.insert(toks.end(), out.new_token_ids.begin(), out.new_token_ids.end());
        if (out.finished()) last = out;
      }
    }
    return std::make_pair(toks, last);
  };
  // Find a position whose token did not appear before it, to make "first occurrence" unambiguous.
  size_t k = 3;
  while (std::find(cont.begin(), cont.begin() + k, cont[k]) != cont.begin() + k) ++k;
  ASSERT_LT(k, cont.size());
  {  // EOS stops with reason stop, no stop_reason
    EngineCoreRequest r = make("p", 5, 10);
    r.eos_token_id = cont[k];
    auto [toks, last] = run(r);
    EXPECT_EQ(toks.size(), k + 1);
    EXPECT_EQ(last.finish_reason, FinishReason::kStop);
    EXPECT_TRUE(std::holds_alternative<std::monostate>(last.stop_reason));
  }
  {  // ignore_eos
    EngineCoreRequest r = make("p", 5, 10);
    r.eos_token_id = cont[k];
    r.sampling_params.ignore_eos = true;
    auto [toks, last] = run(r);
    EXPECT_EQ(toks, cont);
    EXPECT_EQ(last.finish_reason, FinishReason::kLength);
  }
  {  // min_tokens suppresses EOS until reached
    EngineCoreRequest r = make("p", 5, 10);
    r.eos_token_id = cont[k];
    r.sampling_params.min_tokens = static_cast<int64_t>(k) + 2;
    auto [toks, last] = run(r);
    EXPECT_GE(toks.size(), k + 2);
    EXPECT_EQ(toks, std::vector<int32_t>(cont.begin(), cont.begin() + toks.size()));
  }
  {  // stop_token_ids reports the id
    EngineCoreRequest r = make("p", 5, 10);
    r.sampling_params.stop_token_ids = {cont[k]};
    auto [toks, last] = run(r);
    EXPECT_EQ(toks.size(), k + 1);
    EXPECT_EQ(last.finish_reason, FinishReason::kStop);
    EXPECT_EQ(std::get<int32_t>(last.stop_reason), cont[k]);
  }
  {  // max_tokens
    auto [toks, last] = run(make("p", 5, 4));
    EXPECT_EQ(toks.size(), 4u);
    EXPECT_EQ(last.finish_reason, FinishReason::kLength);
  }
}

TEST(SchedulerTest, FrontendStopStringAndAbort) {
  Scheduler s({.max_model_len = 64}, {.num_blocks = 16, .block_size = 4});
  FakeRunner runner(16, 4, 50);
  ASSERT_TRUE(s.add_request(make("a", 5, 20)).ok());
  ASSERT_TRUE(s.add_request(make("b", 5, 20)).ok());
  ASSERT_TRUE(s.add_request(make("w", 5, 20)).ok());
  SchedulerOutput so = s.schedule();
  s.update_from_output(so, runner.execute(so));
  EXPECT_TRUE(s.finish_request("a", RequestStatus::kFinishedStopped, std::string("\n\n")));
  EXPECT_FALSE(s.finish_request("a", RequestStatus::kFinishedStopped));  // already finished
  EXPECT_FALSE(s.abort_request("nope"));
  so = s.schedule();
  EXPECT_EQ(so.finished_req_ids, std::vector<RequestId>{"a"});
  EXPECT_TRUE(s.abort_request("b"));  // mid-step: its runner output is ignored
  EngineCoreOutputs outs = s.update_from_output(so, runner.execute(so));
  ASSERT_GE(outs.outputs.size(), 2u);
  EXPECT_EQ(outs.outputs[0].request_id, "a");
  EXPECT_EQ(outs.outputs[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ(std::get<std::string>(outs.outputs[0].stop_reason), "\n\n");
  EXPECT_EQ(outs.outputs[1].request_id, "b");
  EXPECT_EQ(outs.outputs[1].finish_reason, FinishReason::kAbort);
  for (size_t i = 2; i < outs.outputs.size(); ++i) EXPECT_EQ(outs.outputs[i].request_id, "w");
  EXPECT_EQ(s.num_running(), 1);
  EXPECT_TRUE(s.abort_request("w"));
  EXPECT_EQ(s.kv_cache_manager().block_pool().num_free_blocks(), 16);
}

TEST(SchedulerTest, AdmissionOrderFollowsPolicy) {
  // One sequence at a time: finishing order is exactly the admission order.
  std::mt19937 rng(7);
  for (SchedulingPolicy policy : {SchedulingPolicy::kFcfs, SchedulingPolicy::kPriority}) {
    Scheduler s({.max_num_seqs = 1, .max_model_len = 64, .policy = policy}, {.num_blocks = 16, .block_size = 4});
    FakeRunner runner(16, 4, 50);
    std::vector<EngineCoreRequest> reqs;
    for (int i = 0; i < 30; ++i) {
      std::string id = "r";
      id += std::to_string(i);  // (not "r" + to_string: GCC 12 warns falsely with -Wrestrict)
      reqs.push_back(
          make(id, 1 + rng() % 10, 1 + rng() % 3, static_cast<int32_t>(rng() % 4), static_cast<double>(rng() % 5)));
    }
    for (const auto& r : reqs) ASSERT_TRUE(s.add_request(r).ok());
    std::vector<std::string> expected;
    auto sorted = reqs;
    if (policy == SchedulingPolicy::kPriority) {
      std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
        return std::tie(a.priority, a.arrival_time, a.request_id) < std::tie(b.priority, b.arrival_time, b.request_id);
      });
    }
    for (const auto& r : sorted) expected.push_back(r.request_id);
    EXPECT_EQ(drain(s, runner), expected);
  }
}

TEST(SchedulerTest, PreemptionVictimFollowsPolicy) {
  // Two running requests outgrow a tiny pool; the victim is the later one (FCFS) or the lower-priority one.
  for (SchedulingPolicy policy : {SchedulingPolicy::kFcfs, SchedulingPolicy::kPriority}) {
    Scheduler s({.max_model_len = 16, .policy = policy},
                {.num_blocks = 4, .block_size = 4, .enable_prefix_caching = false});
    FakeRunner runner(4, 4, 50);
    // "early" arrives first but has the worse priority.
    ASSERT_TRUE(s.add_request(make("early", 4, 12, /*priority=*/5, 0.0)).ok());
    ASSERT_TRUE(s.add_request(make("late", 4, 12, /*priority=*/1, 1.0)).ok());
    std::string victim;
    for (int step = 0; step < 100 && s.has_work(); ++step) {
      SchedulerOutput so = s.schedule();
      if (victim.empty() && !so.preempted_req_ids.empty()) {
        victim = so.preempted_req_ids[0];
      }
      s.update_from_output(so, runner.execute(so));
    }
    EXPECT_EQ(victim, policy == SchedulingPolicy::kFcfs ? "late" : "early");
    EXPECT_FALSE(s.has_work());
    EXPECT_EQ(runner.num_corrupt_reads, 0);
  }
}

TEST(SchedulerTest, PrefixHitReportedInOutputsAndStats) {
  Scheduler s({.max_model_len = 64, .log_stats = true, .clock = [] { return 5.0; }},
              {.num_blocks = 16, .block_size = 4});
  FakeRunner runner(16, 4, 50);
  ASSERT_TRUE(s.add_request(make("a", 10, 2)).ok());
  SchedulerOutput so = s.schedule();
  EngineCoreOutputs outs = s.update_from_output(so, runner.execute(so));
  EXPECT_EQ(outs.scheduler_stats.prefix_cache_queries, 10);
  EXPECT_EQ(outs.scheduler_stats.prefix_cache_hits, 0);
  ASSERT_EQ(outs.outputs.size(), 1u);
  ASSERT_EQ(outs.outputs[0].events.size(), 2u);
  EXPECT_EQ(outs.outputs[0].events[0].type, EngineCoreEventType::kQueued);
  EXPECT_EQ(outs.outputs[0].events[1].type, EngineCoreEventType::kScheduled);
  EXPECT_EQ(outs.outputs[0].events[1].timestamp, 5.0);
  ASSERT_TRUE(s.add_request(make("b", 10, 2)).ok());
  so = s.schedule();
  ASSERT_EQ(so.scheduled_new_reqs.size(), 1u);
  EXPECT_EQ(so.scheduled_new_reqs[0].num_computed_tokens, 8);
  EXPECT_EQ(so.num_scheduled_tokens_of("b"), 2);
  outs = s.update_from_output(so, runner.execute(so));
  EXPECT_EQ(outs.scheduler_stats.prefix_cache_queries, 10);
  EXPECT_EQ(outs.scheduler_stats.prefix_cache_hits, 8);
  EXPECT_EQ(outs.scheduler_stats.num_running_reqs, 1);  // "a" finished in this step
  EXPECT_GT(outs.scheduler_stats.kv_cache_usage, 0.0);
  for (const auto& o : outs.outputs) {
    if (o.request_id == "b") {
      EXPECT_EQ(o.num_cached_tokens, 8);
    }
  }
  drain(s, runner);
  EXPECT_EQ(runner.num_corrupt_reads, 0);
}

}  // namespace
}  // namespace llmserve

namespace llmserve {
namespace {

TEST(SchedulerTest, ParallelSamplingChildrenShareThePromptInOneStep) {
  EngineCoreRequest parent = make("p", 37, 4);
  parent.sampling_params.n = 3;
  parent.sampling_params.seed = 100;
  const std::vector<EngineCoreRequest> kids = fan_out_parallel_sampling(parent);
  ASSERT_EQ(kids.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(kids[i].request_id, std::to_string(i) + "_p");
    EXPECT_EQ(kids[i].sampling_params.n, 1);
    EXPECT_EQ(kids[i].sampling_params.seed, 100 + i);
    EXPECT_EQ(kids[i].prompt_token_ids, parent.prompt_token_ids);
  }
  Scheduler s({.max_model_len = 64}, {.num_blocks = 16, .block_size = 8});
  FakeRunner runner(16, 8, 50);
  for (const auto& k : kids) ASSERT_TRUE(s.add_request(k).ok());
  SchedulerOutput so = s.schedule();
  ASSERT_EQ(so.scheduled_new_reqs.size(), 3u);
  EXPECT_EQ(so.scheduled_new_reqs[0].num_computed_tokens, 0);
  EXPECT_EQ(so.scheduled_new_reqs[1].num_computed_tokens, 32);
  EXPECT_EQ(so.scheduled_new_reqs[2].num_computed_tokens, 32);
  for (int b = 0; b < 4; ++b) {
    EXPECT_EQ(so.scheduled_new_reqs[1].block_ids[b], so.scheduled_new_reqs[0].block_ids[b]);
    EXPECT_EQ(s.kv_cache_manager().block_pool().ref_cnt(so.scheduled_new_reqs[0].block_ids[b]), 3);
  }
  EXPECT_NE(so.scheduled_new_reqs[1].block_ids[4], so.scheduled_new_reqs[0].block_ids[4]);
  EXPECT_EQ(so.total_num_scheduled_tokens, 37 + 5 + 5);
  EngineCoreOutputs outs = s.update_from_output(so, runner.execute(so));
  ASSERT_EQ(outs.outputs.size(), 3u);
  // Same prompt, same (fake, deterministic) model: the same first token for every child.
  EXPECT_EQ(outs.outputs[1].new_token_ids, outs.outputs[0].new_token_ids);
  EXPECT_EQ(outs.outputs[2].num_cached_tokens, 32);
  drain(s, runner);
  EXPECT_EQ(runner.num_corrupt_reads, 0);
  EXPECT_EQ(s.kv_cache_manager().block_pool().num_free_blocks(), 16);
}

// Async scheduling: step 2 is planned while step 1 runs, so a request that stops on step 1's token is computed once
// more. That extra token never reaches the output, the blocks it was written into stay allocated until step 2 is
// applied, and a max_tokens limit already owed is not computed past.
TEST(SchedulerTest, AsyncStopIsSeenOneStepLateAndTheExtraTokenIsDropped) {
  constexpr int32_t kVocab = 40;
  Scheduler s({.max_model_len = 32, .async_scheduling = true}, {.num_blocks = 8, .block_size = 4});
  FakeRunner runner(8, 4, kVocab);
  EngineCoreRequest r = make("a", 6, 10);
  const int32_t first = testing::fake_next_token(r.prompt_token_ids, kVocab);
  r.sampling_params.stop_token_ids = {first};  // stops on its first token
  ASSERT_TRUE(s.add_request(r).ok());
  ASSERT_TRUE(s.add_request(make("b", 5, 1)).ok());  // max_tokens 1: owed after step 1, never computed again

  SchedulerOutput step1 = s.schedule();
  const int64_t h1 = runner.execute_async(step1);
  EXPECT_EQ(s.get_request("a")->num_output_placeholders, 1);
  SchedulerOutput step2 = s.schedule();  // planned before step 1's tokens are known
  const int64_t h2 = runner.execute_async(step2);
  EXPECT_EQ(step2.num_scheduled_tokens_of("a"), 1) << "the placeholder is computed";
  EXPECT_EQ(step2.num_scheduled_tokens_of("b"), 0) << "b's owed token reaches max_tokens";
  EXPECT_EQ(s.get_request("a")->num_output_placeholders, 2);

  EngineCoreOutputs out1 = s.update_from_output(step1, runner.wait(h1));
  ASSERT_EQ(out1.outputs.size(), 2u);
  for (const auto& o : out1.outputs) {
    EXPECT_EQ(o.new_token_ids.size(), 1u) << o.request_id;
    ASSERT_TRUE(o.finished()) << o.request_id;
  }
  EXPECT_EQ(out1.outputs[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ(std::get<int32_t>(out1.outputs[0].stop_reason), first);
  EXPECT_EQ(out1.outputs[1].finish_reason, FinishReason::kLength);
  // "a" is still computed by step 2: its blocks are held; "b" is in no step in flight: its blocks are free.
  ASSERT_EQ(s.draining().size(), 1u);
  EXPECT_EQ(s.draining()[0]->request_id(), "a");
  EXPECT_EQ(s.kv_cache_manager().num_requests(), 1);

  ModelRunnerOutput ran2 = runner.wait(h2);
  ASSERT_EQ(ran2.sampled_token_ids.size(), 1u);
  EXPECT_EQ(ran2.sampled_token_ids[0].size(), 1u) << "the runner did compute the extra token";
  EngineCoreOutputs out2 = s.update_from_output(step2, ran2);
  EXPECT_TRUE(out2.outputs.empty()) << "the extra token reached the output";
  EXPECT_TRUE(s.draining().empty());
  EXPECT_EQ(s.kv_cache_manager().num_requests(), 0);
  EXPECT_EQ(s.kv_cache_manager().usage(), 0.0);
  EXPECT_FALSE(s.has_work());
}

}  // namespace
}  // namespace llmserve

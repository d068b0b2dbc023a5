// Property test: random workloads (arrivals over time, chunked prefills, shared prefixes, duplicate prompts,
// aborts at any point, tiny block pools that force preemption) drive the Scheduler with FakeRunner. Every
// request must produce exactly the tokens the fake model defines, finish once with the right reason, and the
// block accounting must hold at every step and return to a full pool at the end. Each workload also runs under
// async scheduling (two steps in flight, as EngineCore's batch queue): same tokens, same reasons, no leaked block.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <random>
#include <set>

#include "engine/engine_core.h"
#include "engine/scheduler.h"
#include "fake_runner.h"

namespace llmserve {
namespace {

using testing::fake_next_token;
using testing::FakeRunner;

constexpr int32_t kVocab = 40;
constexpr int32_t kEos = 3;

struct Expected {
  std::vector<int32_t> outputs;
  FinishReason reason;
  StopReason stop_reason;
};

// Straightforward re-statement of the stop rules, applied to the fake model's continuation.
Expected oracle(const EngineCoreRequest& r, int64_t max_model_len) {
  const SamplingParams& sp = r.sampling_params;
  std::vector<int32_t> seq = r.prompt_token_ids;
  Expected e;
  const int64_t max_tokens = sp.max_tokens.value_or(max_model_len - static_cast<int64_t>(seq.size()));
  while (true) {
    const int32_t t = fake_next_token(seq, kVocab);
    seq.push_back(t);
    e.outputs.push_back(t);
    const int64_t n = static_cast<int64_t>(e.outputs.size());
    if (static_cast<int64_t>(seq.size()) >= max_model_len || n >= max_tokens) {
      e.reason = FinishReason::kLength;
      return e;
    }
    if (n < sp.min_tokens) continue;
    if (!sp.ignore_eos && r.eos_token_id && t == *r.eos_token_id) {
      e.reason = FinishReason::kStop;
      return e;
    }
    if (std::find(sp.stop_token_ids.begin(), sp.stop_token_ids.end(), t) != sp.stop_token_ids.end()) {
      e.reason = FinishReason::kStop;
      e.stop_reason = t;
      return e;
    }
  }
}

struct Totals {
  int64_t preemptions = 0, prefix_hits = 0, chunked = 0, aborted = 0, requests = 0, overlapped = 0;
};

struct Received {
  std::vector<int32_t> tokens;
  int finishes = 0;
  std::optional<FinishReason> reason;
  StopReason stop_reason;
  bool abort_took_effect = false;
};

void check_step_invariants(const Scheduler& s, const SchedulerOutput& so, std::map<std::string, int64_t>& prev) {
  const auto& cfg = s.config();
  const auto& kv = s.kv_cache_manager();
  const int32_t bs = kv.block_size();
  ASSERT_LE(so.total_num_scheduled_tokens, cfg.max_num_batched_tokens);
  int64_t sum = 0;
  for (const auto& t : so.num_scheduled_tokens) {
    EXPECT_GT(t.num_tokens, 0);
    sum += t.num_tokens;
  }
  EXPECT_EQ(sum, so.total_num_scheduled_tokens);
  EXPECT_LE(s.num_running(), cfg.max_num_seqs);
  const std::set<std::string> preempted(so.preempted_req_ids.begin(), so.preempted_req_ids.end());
  std::vector<int32_t> refs(kv.block_pool().num_blocks(), 0);
  std::map<std::string, int64_t> now;
  for (const Request* r : s.running()) {
    const auto& blocks = kv.get_block_ids(*r);
    EXPECT_EQ(static_cast<int64_t>(blocks.size()), (r->num_computed_tokens + bs - 1) / bs) << r->request_id();
    EXPECT_LE(r->num_computed_tokens, r->num_tokens() + r->num_output_placeholders);
    EXPECT_LE(r->num_output_placeholders, cfg.async_scheduling ? 2 : 1) << r->request_id();
    for (int32_t b : blocks) ++refs[b];
    now[r->request_id()] = r->num_computed_tokens;
  }
  // Finished requests whose blocks an in-flight step still writes.
  for (const Request* r : s.draining()) {
    EXPECT_TRUE(is_finished(r->status)) << r->request_id();
    for (int32_t b : kv.get_block_ids(*r)) ++refs[b];
  }
  for (const Request* r : s.waiting().ordered()) {
    EXPECT_TRUE(kv.get_block_ids(*r).empty()) << "waiting " << r->request_id() << " holds blocks";
    EXPECT_EQ(r->num_computed_tokens, 0);
    now[r->request_id()] = 0;
  }
  int32_t num_unreferenced = 0;
  for (int32_t b = 0; b < kv.block_pool().num_blocks(); ++b) {
    EXPECT_EQ(kv.block_pool().ref_cnt(b), refs[b]) << "block " << b;
    num_unreferenced += refs[b] == 0;
  }
  EXPECT_EQ(kv.block_pool().num_free_blocks(), num_unreferenced);
  for (const auto& [id, n] : now) {
    auto it = prev.find(id);
    if (it != prev.end() && n < it->second) {
      EXPECT_TRUE(preempted.count(id)) << id << " lost computed tokens without a preemption";
    }
  }
  prev = std::move(now);
}

void run_workload(uint32_t seed, SchedulingPolicy policy, bool async, Totals& totals) {
  std::mt19937 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int32_t bs = uni(0, 1) ? 4 : 16;
  const int64_t max_model_len = uni(48, 120);
  const int32_t min_blocks = static_cast<int32_t>((max_model_len + bs - 1) / bs);
  KVCacheConfig cache{
      .num_blocks = min_blocks + uni(0, 2 * min_blocks), .block_size = bs, .enable_prefix_caching = uni(0, 5) != 0};
  SchedulerConfig cfg{.max_num_batched_tokens = uni(6, 96),
                      .max_num_seqs = uni(1, 10),
                      .max_model_len = max_model_len,
                      .policy = policy,
                      .enable_chunked_prefill = uni(0, 4) != 0,
                      .async_scheduling = async};
  if (!cfg.enable_chunked_prefill) cfg.max_num_batched_tokens = std::max(cfg.max_num_batched_tokens, max_model_len);
  SCOPED_TRACE(std::string(async ? "async " : "sync ") + "seed " + std::to_string(seed) + " bs " + std::to_string(bs) +
               " blocks " + std::to_string(cache.num_blocks) + " budget " + std::to_string(cfg.max_num_batched_tokens) +
               " seqs " + std::to_string(cfg.max_num_seqs) + " len " + std::to_string(max_model_len));
  Scheduler sched(cfg, cache);
  FakeRunner runner(cache.num_blocks, bs, kVocab);

  // Workload: prompts are a shared prefix (maybe empty) plus a random suffix; some are exact duplicates (n > 1).
  std::vector<std::vector<int32_t>> prefixes(3);
  for (auto& p : prefixes) {
    p.resize(uni(0, 3 * bs));
    for (auto& t : p) t = uni(0, kVocab - 1);
  }
  const int num_requests = uni(4, 24);
  std::vector<EngineCoreRequest> reqs;
  std::vector<int> arrival_step, abort_step, abort_phase;
  for (int i = 0; i < num_requests; ++i) {
    EngineCoreRequest r;
    r.request_id = "req-" + std::to_string(i);
    if (i > 0 && uni(0, 6) == 0) {
      r.prompt_token_ids = reqs[uni(0, i - 1)].prompt_token_ids;
    } else {
      r.prompt_token_ids = prefixes[uni(0, 2)];
      const int suffix = uni(1, 40);
      for (int k = 0; k < suffix; ++k) r.prompt_token_ids.push_back(uni(0, kVocab - 1));
    }
    if (static_cast<int64_t>(r.prompt_token_ids.size()) >= max_model_len - 1) {
      r.prompt_token_ids.resize(max_model_len - 2);
    }
    SamplingParams& sp = r.sampling_params;
    const int64_t room = max_model_len - static_cast<int64_t>(r.prompt_token_ids.size());
    sp.max_tokens =
        uni(0, 5) == 0 ? std::nullopt : std::optional<int64_t>(uni(1, static_cast<int>(std::min<int64_t>(room, 30))));
    sp.min_tokens = uni(0, 3) == 0 ? uni(0, static_cast<int>(sp.max_tokens.value_or(room))) : 0;
    sp.ignore_eos = uni(0, 3) == 0;
    if (uni(0, 3) == 0) sp.stop_token_ids = {uni(0, kVocab - 1), uni(0, kVocab - 1)};
    r.eos_token_id = uni(0, 5) == 0 ? std::nullopt : std::optional<int32_t>(kEos);
    r.priority = uni(0, 3);
    reqs.push_back(r);
    arrival_step.push_back(uni(0, 30));
    abort_step.push_back(uni(0, 12) == 0 ? arrival_step.back() + uni(0, 20) : -1);
    abort_phase.push_back(uni(0, 1));  // 0: before schedule(), 1: between schedule() and update_from_output()
  }

  std::map<std::string, Received> got;
  std::map<std::string, int64_t> prev_computed;
  auto try_abort = [&](int phase, int step) {
    for (int i = 0; i < num_requests; ++i) {
      if (abort_step[i] == step && abort_phase[i] == phase && arrival_step[i] <= step) {
        if (sched.abort_request(reqs[i].request_id)) got[reqs[i].request_id].abort_took_effect = true;
      }
    }
  };
  struct Launched {
    SchedulerOutput so;
    int64_t handle;
  };
  std::deque<Launched> queue;  // async: steps launched and not yet applied, oldest first
  int step = 0;
  for (; step < 20000; ++step) {
    double t = step;
    for (int i = 0; i < num_requests; ++i) {
      if (arrival_step[i] != step) continue;
      reqs[i].arrival_time = (t += 1e-3);
      ASSERT_TRUE(sched.add_request(reqs[i]).ok());
    }
    try_abort(0, step);
    const bool more_arrivals = std::any_of(arrival_step.begin(), arrival_step.end(), [&](int a) { return a > step; });
    if (!sched.has_work() && queue.empty() && !more_arrivals) break;
    // EngineCore's loops: sync = schedule, execute, apply; async = launch while fewer than two steps are in flight
    // (an empty step ends the launching), then apply the oldest.
    do {
      SchedulerOutput so = sched.schedule();
      ASSERT_NO_FATAL_FAILURE(check_step_invariants(sched, so, prev_computed));
      for (const auto& n : so.scheduled_new_reqs) {
        totals.chunked +=
            sched.config().enable_chunked_prefill && n.num_computed_tokens + so.num_scheduled_tokens_of(n.req_id) <
                                                         static_cast<int64_t>(n.prompt_token_ids.size());
      }
      try_abort(1, step);
      const int64_t handle = runner.execute_async(so);
      const bool empty = so.total_num_scheduled_tokens == 0;
      queue.push_back({std::move(so), handle});
      if (empty) break;
    } while (async && queue.size() < 2);
    totals.overlapped += queue.size() == 2;
    Launched oldest = std::move(queue.front());
    queue.pop_front();
    ModelRunnerOutput ro = runner.wait(oldest.handle);
    EngineCoreOutputs outs = sched.update_from_output(oldest.so, ro);
    while (!queue.empty() &&  // as EngineCore does
           (queue.front().so.total_num_scheduled_tokens == 0 || sched.num_unfinished() == 0)) {
      merge_outputs(outs, sched.update_from_output(queue.front().so, runner.wait(queue.front().handle)));
      queue.pop_front();
    }
    totals.preemptions += outs.scheduler_stats.num_preemptions;
    totals.prefix_hits += outs.scheduler_stats.prefix_cache_hits;
    EXPECT_EQ(outs.scheduler_stats.num_running_reqs, sched.num_running());
    for (auto& o : outs.outputs) {
      Received& rec = got[o.request_id];
      EXPECT_EQ(rec.finishes, 0) << o.request_id << " got output after finishing";
      rec.tokens.insert(rec.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (o.finished()) {
        ++rec.finishes;
        rec.reason = o.finish_reason;
        rec.stop_reason = o.stop_reason;
      }
    }
  }
  ASSERT_LT(step, 20000) << "workload did not drain (livelock?)";
  EXPECT_TRUE(sched.draining().empty());
  SchedulerOutput last = sched.schedule();  // delivers the last finished ids to the runner
  runner.execute(last);
  sched.update_from_output(last, {});
  EXPECT_EQ(runner.num_states(), 0u);
  EXPECT_EQ(runner.num_corrupt_reads, 0);

  const auto& kv = sched.kv_cache_manager();
  EXPECT_EQ(kv.block_pool().num_free_blocks(), cache.num_blocks);
  for (int32_t b = 0; b < cache.num_blocks; ++b) EXPECT_EQ(kv.block_pool().ref_cnt(b), 0);
  EXPECT_EQ(kv.num_requests(), 0);
  EXPECT_EQ(sched.num_unfinished(), 0);

  for (const auto& r : reqs) {
    const Received& rec = got[r.request_id];
    const Expected e = oracle(r, max_model_len);
    ++totals.requests;
    EXPECT_EQ(rec.finishes, 1) << r.request_id;
    if (rec.abort_took_effect) {
      ++totals.aborted;
      EXPECT_EQ(rec.reason, FinishReason::kAbort) << r.request_id;
      ASSERT_LE(rec.tokens.size(), e.outputs.size()) << r.request_id;
      EXPECT_TRUE(std::equal(rec.tokens.begin(), rec.tokens.end(), e.outputs.begin())) << r.request_id;
    } else {
      EXPECT_EQ(rec.tokens, e.outputs) << r.request_id;
      EXPECT_EQ(rec.reason, e.reason) << r.request_id;
      EXPECT_EQ(rec.stop_reason, e.stop_reason) << r.request_id;
    }
  }
}

TEST(SchedulerPropertyTest, RandomWorkloadsFcfs) {
  Totals totals;
  for (uint32_t seed = 1; seed <= 150; ++seed) {
    run_workload(seed, SchedulingPolicy::kFcfs, /*async=*/false, totals);
    if (::testing::Test::HasFatalFailure()) return;
  }
  // The workloads must actually exercise the paths whose correctness they check.
  EXPECT_GT(totals.preemptions, 50);
  EXPECT_GT(totals.prefix_hits, 500);
  EXPECT_GT(totals.chunked, 50);
  EXPECT_GT(totals.aborted, 20);
}

TEST(SchedulerPropertyTest, RandomWorkloadsPriority) {
  Totals totals;
  for (uint32_t seed = 1001; seed <= 1150; ++seed) {
    run_workload(seed, SchedulingPolicy::kPriority, /*async=*/false, totals);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(totals.preemptions, 50);
  EXPECT_GT(totals.prefix_hits, 500);
  EXPECT_GT(totals.aborted, 20);
}

TEST(SchedulerPropertyTest, RandomWorkloadsAsyncFcfs) {
  Totals totals;
  for (uint32_t seed = 1; seed <= 150; ++seed) {
    run_workload(seed, SchedulingPolicy::kFcfs, /*async=*/true, totals);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(totals.overlapped, 5000);  // steps planned while the previous one was in flight
  EXPECT_GT(totals.preemptions, 50);
  EXPECT_GT(totals.prefix_hits, 500);
  EXPECT_GT(totals.chunked, 50);
  EXPECT_GT(totals.aborted, 20);
}

TEST(SchedulerPropertyTest, RandomWorkloadsAsyncPriority) {
  Totals totals;
  for (uint32_t seed = 1001; seed <= 1150; ++seed) {
    run_workload(seed, SchedulingPolicy::kPriority, /*async=*/true, totals);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(totals.preemptions, 50);
  EXPECT_GT(totals.aborted, 20);
}

}  // namespace
}  // namespace llmserve

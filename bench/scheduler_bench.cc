// scheduler_bench: CPU cost of Scheduler::schedule() + update_from_output() per decode step with 16, 256 and
// 1024 running requests. The runner is faked (one token per request, never EOS), so the figure is pure
// scheduling overhead; building the fake ModelRunnerOutput is excluded. Bar: <= 50 us of wall time per step (p50)
// at 256; the thread's CPU time is printed beside it (it excludes the slices other processes take).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "core/logging.h"
#include "engine/scheduler.h"

namespace {

using namespace llmserve;
using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

// CPU time of this thread, microseconds: unlike wall time it excludes the slices other processes take on a
// shared machine (their cache pollution still counts).
double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

// Long ids are vLLM-style ("cmpl-" + 32 hex digits, 37 chars: every copy allocates); short ones
// ("req-" + 8 hex digits, 12 chars) fit libstdc++'s small-string buffer (15 chars), so copies never allocate.
std::string request_id(int i, bool long_id) {
  char buf[64];
  if (long_id) {
    std::snprintf(buf, sizeof buf, "cmpl-%08x%08x%08x%08x", i * 2654435761u, i, ~i, i * 40503u);
  } else {
    std::snprintf(buf, sizeof buf, "req-%08x", i * 2654435761u);
  }
  return buf;
}

// One token per request whose known tokens are all computed (a partial prefill samples nothing; in the
// measured decode phase every request samples, so the lookup is skipped).
ModelRunnerOutput fake_output(const Scheduler& sched, const SchedulerOutput& so, int step, bool decoding) {
  ModelRunnerOutput ro;
  ro.req_ids.reserve(so.num_scheduled_tokens.size());
  ro.sampled_token_ids.reserve(so.num_scheduled_tokens.size());
  int k = 0;
  for (const auto& s : so.num_scheduled_tokens) {
    ro.req_ids.push_back(s.req_id);
    auto& sampled = ro.sampled_token_ids.emplace_back();
    const Request* req = decoding ? nullptr : sched.get_request(s.req_id);
    if (decoding || req->num_computed_tokens == req->num_tokens()) sampled.push_back(3 + (step * 31 + k) % 30000);
    ++k;
  }
  return ro;
}

struct Result {
  double schedule_us, update_us, p50_us, p99_us;  // wall time
  double cpu_us;                                  // thread CPU time per step (schedule + update)
  double total() const { return schedule_us + update_us; }
};

Result run(int num_reqs, int prompt_len, int num_steps, bool long_ids) {
  const int block_size = 16;
  const int64_t max_model_len = prompt_len + num_steps + 256;
  const int blocks_per_req = static_cast<int>((max_model_len + block_size - 1) / block_size);
  SchedulerConfig cfg{.max_num_batched_tokens = std::max<int64_t>(8192, num_reqs),
                      .max_num_seqs = num_reqs,
                      .max_model_len = max_model_len};
  KVCacheConfig cache{.num_blocks = num_reqs * blocks_per_req + 64, .block_size = block_size};
  Scheduler sched(cfg, cache);
  for (int i = 0; i < num_reqs; ++i) {
    EngineCoreRequest r;
    r.request_id = request_id(i, long_ids);
    r.prompt_token_ids.resize(prompt_len);
    for (int k = 0; k < prompt_len; ++k) r.prompt_token_ids[k] = 3 + (i * 7919 + k * 104729) % 30000;
    r.sampling_params.max_tokens = num_steps + 128;
    r.eos_token_id = 2;
    r.arrival_time = i;
    CHECK_OK(sched.add_request(std::move(r)));
  }
  // Prefill until every request decodes one token per step.
  int step = 0;
  for (; step < 10000; ++step) {
    SchedulerOutput so = sched.schedule();
    sched.update_from_output(so, fake_output(sched, so, step, false));
    if (sched.num_running() == num_reqs && so.total_num_scheduled_tokens == num_reqs) break;
  }
  std::vector<double> per_step;
  double sched_total = 0, update_total = 0, cpu_total = 0;
  for (int i = 0; i < num_steps; ++i, ++step) {
    const double c0 = thread_cpu_us();
    auto t0 = Clock::now();
    SchedulerOutput so = sched.schedule();
    const double ts = us_since(t0);
    CHECK_EQ(so.total_num_scheduled_tokens, num_reqs);
    const double c1 = thread_cpu_us();
    ModelRunnerOutput ro = fake_output(sched, so, step, true);
    const double c2 = thread_cpu_us();
    auto t1 = Clock::now();
    EngineCoreOutputs outs = sched.update_from_output(so, ro);
    const double tu = us_since(t1);
    cpu_total += (c1 - c0) + (thread_cpu_us() - c2);
    CHECK_EQ(static_cast<int>(outs.outputs.size()), num_reqs);
    sched_total += ts;
    update_total += tu;
    per_step.push_back(ts + tu);
  }
  std::sort(per_step.begin(), per_step.end());
  return {sched_total / num_steps, update_total / num_steps, per_step[per_step.size() / 2],
          per_step[per_step.size() * 99 / 100], cpu_total / num_steps};
}

}  // namespace

// Runs `trials` times and keeps the trial with the median wall p50; also returns the best trial's wall p50. The
// shared CI machine is noisy: the best trial is the closest to the uncontended cost.
Result median_of_trials(int n, int prompt_len, int num_steps, bool long_ids, int trials, double* best_total) {
  std::vector<Result> rs;
  for (int t = 0; t < trials; ++t) rs.push_back(run(n, prompt_len, num_steps, long_ids));
  std::sort(rs.begin(), rs.end(), [](const Result& a, const Result& b) { return a.p50_us < b.p50_us; });
  *best_total = rs.front().p50_us;
  return rs[rs.size() / 2];
}

int main(int argc, char** argv) {
  const int prompt_len = 128, num_steps = 2000;
  const int trials = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  std::printf("scheduler_bench: decode steps, prompt %d tokens, block 16, %d measured steps\n", prompt_len, num_steps);
  std::printf("trial with the median wall p50 of %d; every column from that trial; best = lowest trial's wall p50\n",
              trials);
  std::printf(
      "| running | id chars | wall p50 us | wall p99 us | best wall p50 us | wall mean us | wall schedule() us "
      "| wall update_from_output() us | CPU us/step | CPU ns/request |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  double bar_p50 = 0;
  for (bool long_ids : {true, false}) {
    for (int n : {16, 256, 1024}) {
      double best = 0;
      const Result r = median_of_trials(n, prompt_len, num_steps, long_ids, trials, &best);
      std::printf("| %d | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f |\n", n, long_ids ? 37 : 12,
                  r.p50_us, r.p99_us, best, r.total(), r.schedule_us, r.update_us, r.cpu_us, 1000.0 * r.cpu_us / n);
      if (n == 256 && long_ids) bar_p50 = r.p50_us;
    }
  }
  std::printf("bar: <= 50 us per step (wall p50) at 256 running requests (37-char ids): %.2f us, %s\n", bar_p50,
              bar_p50 <= 50 ? "met" : "NOT met");
  return 0;
}

// scheduler_bench: CPU cost of Scheduler::schedule() + update_from_output() per decode step with 16, 256 and
// 1024 running requests. The runner is faked (one token per request, never EOS), so the figure is pure
// scheduling overhead; building the fake ModelRunnerOutput is excluded. Bar: <= 50 us per step at 256.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/logging.h"
#include "engine/scheduler.h"

namespace {

using namespace llmserve;
using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
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
  double schedule_us, update_us, p50_us, p99_us;
};

Result run(int num_reqs, int prompt_len, int num_steps, bool long_ids) {
  const int block_size = 16;
  const int64_t max_model_len = prompt_len + num_steps + 256;
  const int blocks_per_req = static_cast<int>((max_model_len + block_size - 1) / block_size);
  SchedulerConfig cfg{.max_num_batched_tokens = std::max<int64_t>(8192, num_reqs), .max_num_seqs = num_reqs,
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
  double sched_total = 0, update_total = 0;
  for (int i = 0; i < num_steps; ++i, ++step) {
    auto t0 = Clock::now();
    SchedulerOutput so = sched.schedule();
    const double ts = us_since(t0);
    CHECK_EQ(so.total_num_scheduled_tokens, num_reqs);
    ModelRunnerOutput ro = fake_output(sched, so, step, true);
    auto t1 = Clock::now();
    EngineCoreOutputs outs = sched.update_from_output(so, ro);
    const double tu = us_since(t1);
    CHECK_EQ(static_cast<int>(outs.outputs.size()), num_reqs);
    sched_total += ts;
    update_total += tu;
    per_step.push_back(ts + tu);
  }
  std::sort(per_step.begin(), per_step.end());
  return {sched_total / num_steps, update_total / num_steps, per_step[per_step.size() / 2],
          per_step[per_step.size() * 99 / 100]};
}

}  // namespace

int main() {
  const int prompt_len = 128, num_steps = 2000;
  std::printf("scheduler_bench: decode steps, prompt %d tokens, block 16, %d measured steps\n", prompt_len, num_steps);
  std::printf("| running | id chars | schedule() us | update_from_output() us | mean us/step | p50 | p99 | ns/request |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (bool long_ids : {true, false}) {
    for (int n : {16, 256, 1024}) {
      const Result r = run(n, prompt_len, num_steps, long_ids);
      const double total = r.schedule_us + r.update_us;
      std::printf("| %d | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f |\n", n, long_ids ? 37 : 12, r.schedule_us,
                  r.update_us, total, r.p50_us, r.p99_us, 1000.0 * total / n);
    }
  }
  std::printf("bar: <= 50 us per step at 256 running requests\n");
  return 0;
}

// prefill_schedule_bench: host time of one step's SM90 prefill work-list plan (kernels/prefill_schedule.h), which the
// runner makes for every step with a prefill request, for the step shapes of bench/RESULTS.md: a 2048-token prompt,
// an offline step (8192 tokens: 256 decodes, then 7936 prefill tokens over 8 prompts), a serving step (64 decodes
// and one 2048-token chunk); M's 32 heads at head_dim 128 and S's at 64, 132 CTAs (an H100 / H200). Prints the
// median and best of 200 plans beside the step's GPU time it hides behind under async scheduling.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/prefill_schedule.h"

namespace {

using namespace llmserve;
using Clock = std::chrono::steady_clock;

struct StepShape {
  std::string name;
  int64_t num_decode;
  std::vector<int32_t> prefill_lens;  // query tokens of each prefill request
  int64_t context;                    // keys already cached before each prefill chunk
  int64_t heads, head_dim;
};

void run(const StepShape& s) {
  std::vector<int32_t> qsl{0}, lens;
  for (int64_t r = 0; r < s.num_decode; ++r) {
    qsl.push_back(qsl.back() + 1);
    lens.push_back(1024);
  }
  for (int32_t q : s.prefill_lens) {
    qsl.push_back(qsl.back() + q);
    lens.push_back(static_cast<int32_t>(q + s.context));
  }
  const int64_t reqs = static_cast<int64_t>(lens.size()), ctas = 132;
  const int64_t width = ops::prefill_schedule_width(qsl.back(), reqs, s.heads, s.head_dim, ctas);
  std::vector<int32_t> rows(static_cast<size_t>(ops::kPrefillScheduleRows * width));
  std::vector<double> us;
  int64_t works = 0;
  for (int i = 0; i < 200; ++i) {
    const auto t0 = Clock::now();
    works = ops::plan_prefill_schedule(rows.data(), width, qsl.data(), lens.data(), reqs, s.num_decode, 72, s.heads,
                                       s.head_dim, ctas);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  std::printf("%-44s %6lld works  median %8.1f us  best %8.1f us\n", s.name.c_str(), static_cast<long long>(works),
              us[us.size() / 2], us.front());
}

}  // namespace

int main() {
  std::printf("SM90 prefill work-list planning on the host (132 CTAs), 200 plans each\n");
  run({"M, one 2048-token prompt", 0, {2048}, 0, 32, 128});
  run({"S, one 2048-token prompt (head_dim 64)", 0, {2048}, 0, 32, 64});
  run({"M, offline step: 256 decodes + 8 x 992 tokens", 256, std::vector<int32_t>(8, 992), 32, 32, 128});
  run({"M, serving step: 64 decodes + a 2048 chunk", 64, {2048}, 0, 32, 128});
  run({"M, one 8192-token prompt", 0, {8192}, 0, 32, 128});
  return 0;
}

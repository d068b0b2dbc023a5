// The SM90 prefill kernel's host work lists (kernels/prefill_schedule.h): every (request, tile, head) exactly once
// with its lengths and offsets, balanced over the CTAs, and nothing for decode-only steps.
#include "kernels/prefill_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>
#include <vector>

namespace llmserve::ops {
namespace {

struct Plan {
  std::vector<int32_t> rows;
  int64_t width = 0, works = 0;
  int32_t at(int row, int64_t col) const { return rows[static_cast<size_t>(row * width + col)]; }
};

Plan plan(const std::vector<int32_t>& qsl, const std::vector<int32_t>& lens, int64_t num_decode, int64_t heads,
          int64_t head_dim, int64_t ctas, int64_t stride) {
  Plan p;
  const int64_t num_reqs = static_cast<int64_t>(lens.size());
  p.width = prefill_schedule_width(qsl.back(), num_reqs, heads, head_dim, ctas);
  p.rows.assign(static_cast<size_t>(kPrefillScheduleRows * p.width), -7);  // poison
  p.works = plan_prefill_schedule(p.rows.data(), p.width, qsl.data(), lens.data(), num_reqs, num_decode, stride, heads,
                                  head_dim, ctas);
  return p;
}

TEST(PrefillSchedule, TilesFollowTheKernelsHeadSize) {
  EXPECT_EQ(prefill_schedule_tile(128), 128);
  EXPECT_EQ(prefill_schedule_tile(64), 192);
  EXPECT_EQ(prefill_schedule_tile(96), 0);
  EXPECT_EQ(prefill_schedule_tile(256), 0);
}

TEST(PrefillSchedule, EveryTileOfEveryHeadOfEachPrefillRequestOnce) {
  // Two decode requests, then prefills of 300 (3 tiles of 128), 1 and 128 query tokens, the first over a prefix.
  const std::vector<int32_t> qsl = {0, 1, 2, 302, 303, 431};
  const std::vector<int32_t> lens = {40, 90, 350, 1, 128};
  const int64_t heads = 4, ctas = 5, stride = 37;
  const Plan p = plan(qsl, lens, 2, heads, 128, ctas, stride);
  ASSERT_EQ(p.works, (3 + 1 + 1) * heads);
  EXPECT_EQ(p.at(0, 0), 0);
  EXPECT_EQ(p.at(0, ctas), p.works);
  std::map<std::tuple<int, int, int>, int> seen;  // (request, tile, head) -> times
  for (int64_t c = 0; c < ctas; ++c) {
    ASSERT_LE(p.at(0, c), p.at(0, c + 1));
    for (int64_t j = p.at(0, c); j < p.at(0, c + 1); ++j) {
      const int r = p.at(7, j);
      ASSERT_GE(r, 2);
      ASSERT_LT(r, 5);
      EXPECT_EQ(p.at(2, j), qsl[r]);
      EXPECT_EQ(p.at(3, j), r * stride);
      EXPECT_EQ(p.at(4, j), qsl[r + 1] - qsl[r]);
      EXPECT_EQ(p.at(5, j), lens[r]);
      EXPECT_LT(p.at(1, j) * 128, p.at(4, j));
      EXPECT_GE(p.at(6, j), 0);
      EXPECT_LT(p.at(6, j), heads);
      ++seen[{r, p.at(1, j), p.at(6, j)}];
    }
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), p.works);
  for (const auto& [key, times] : seen) EXPECT_EQ(times, 1);
}

TEST(PrefillSchedule, BalancesTheCausalCostOverTheCtas) {
  // One 4096-token prompt at head_dim 64 (tiles of 192): 22 tiles whose costs grow along the sequence, 32 heads.
  const Plan p = plan({0, 4096}, {4096}, 0, 32, 64, 132, 256);
  ASSERT_EQ(p.works, 22 * 32);
  std::vector<int64_t> load(132, 0);
  for (int64_t c = 0; c < 132; ++c) {
    for (int64_t j = p.at(0, c); j < p.at(0, c + 1); ++j) load[c] += std::min<int64_t>((p.at(1, j) + 1) * 192, 4096);
  }
  const int64_t most = *std::max_element(load.begin(), load.end());
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / 132;
  EXPECT_LT(most, 1.15 * mean) << "most " << most << " vs mean " << mean;  // greedy largest-first: near the mean
}

TEST(PrefillSchedule, DecodeOnlyStepsPlanNothing) {
  const Plan p = plan({0, 1, 2, 3}, {5, 9, 2}, 3, 8, 128, 4, 16);
  EXPECT_EQ(p.works, 0);
  for (int64_t c = 0; c <= 4; ++c) EXPECT_EQ(p.at(0, c), 0);
}

TEST(PrefillSchedule, WidthCoversTheLargestStep) {
  // Every request a prefill of one token more than a tile: two tiles each.
  const int64_t reqs = 10, q = 129;
  std::vector<int32_t> qsl(reqs + 1), lens(reqs, q);
  for (int64_t r = 0; r <= reqs; ++r) qsl[r] = static_cast<int32_t>(r * q);
  const Plan p = plan(qsl, lens, 0, 3, 128, 7, 4);
  EXPECT_EQ(p.works, reqs * 2 * 3);
  EXPECT_GE(p.width, p.works);
}

TEST(PrefillScheduleDeathTest, RefusesAQueryLongerThanItsContext) {
  const std::vector<int32_t> qsl = {0, 10}, lens = {9};
  std::vector<int32_t> rows(static_cast<size_t>(kPrefillScheduleRows * 64));
  EXPECT_DEATH(plan_prefill_schedule(rows.data(), 64, qsl.data(), lens.data(), 1, 0, 4, 2, 128, 8),
               "request 0 has 10 query tokens over 9 keys");
}

TEST(PrefillSchedule, NoCtasOnTheCpu) { EXPECT_EQ(sm90_prefill_ctas(Device::cpu()), 0); }

}  // namespace
}  // namespace llmserve::ops

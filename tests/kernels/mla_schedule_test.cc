// The SM90 MLA kernel's host work lists (kernels/mla_schedule.h): every key of every group tile of every request
// exactly once, in one work or in the chunks of a split tile whose partial rows are merged exactly once, within the
// grid and the partial capacity, balanced over the groups.
#include "kernels/mla_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>
#include <vector>

namespace llmserve::ops {
namespace {

struct Plan {
  std::vector<int32_t> rows;
  int64_t width = 0;
  MlaSchedule s;
  int32_t at(int row, int64_t col) const { return rows[static_cast<size_t>(row * width + col)]; }
};

Plan plan(const std::vector<int32_t>& qsl, const std::vector<int32_t>& lens, int64_t heads, int64_t ctas,
          int64_t stride, int64_t max_partial_rows) {
  Plan p;
  const int64_t num_reqs = static_cast<int64_t>(lens.size());
  p.width = mla_schedule_width(std::max(qsl.back(), 1), std::max<int64_t>(num_reqs, 1), heads, ctas);
  p.rows.assign(static_cast<size_t>(kMlaScheduleRows * p.width), -7);  // poison
  p.s = plan_mla_schedule(p.rows.data(), p.width, qsl.data(), lens.data(), num_reqs, stride, heads, ctas,
                          max_partial_rows);
  return p;
}

// Checks p against the kernel's reading of it; group_keys gets the keys each group visits.
void check_plan(const Plan& p, const std::vector<int32_t>& qsl, const std::vector<int32_t>& lens, int64_t heads,
                int64_t stride, int64_t max_partial_rows, std::vector<int64_t>* group_keys_out = nullptr) {
  const MlaSchedule& s = p.s;
  const int64_t group_rows = s.ctas_per_tile * kMlaTileRows, grid = s.ctas_per_tile * s.num_groups;
  EXPECT_LE(grid, s.num_ctas);
  EXPECT_LE(s.partial_rows, max_partial_rows);
  EXPECT_EQ(p.at(kMlaWorkIndptr, 0), 0);
  EXPECT_EQ(p.at(kMlaWorkIndptr, s.num_groups), s.num_works);
  // (request, tile start) -> the key ranges that cover it, and the partial rows of its chunks.
  std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> ranges;
  std::map<std::pair<int, int>, std::vector<int>> partials;
  std::vector<int64_t> group_keys(static_cast<size_t>(s.num_groups), 0);
  for (int64_t g = 0; g < s.num_groups; ++g) {
    EXPECT_LE(p.at(kMlaWorkIndptr, g), p.at(kMlaWorkIndptr, g + 1));
    for (int64_t j = p.at(kMlaWorkIndptr, g); j < p.at(kMlaWorkIndptr, g + 1); ++j) {
      const int q_indptr = p.at(kMlaQIndptr, j);
      const auto it = std::find(qsl.begin(), qsl.end(), q_indptr);
      EXPECT_NE(it, qsl.end());
      int r = static_cast<int>(it - qsl.begin());
      while (r + 1 < static_cast<int>(qsl.size()) && qsl[r + 1] == q_indptr) ++r;  // empty requests share a start
      EXPECT_EQ(p.at(kMlaKvIndptr, j), r * stride);
      EXPECT_EQ(p.at(kMlaQLen, j), qsl[r + 1] - qsl[r]);
      EXPECT_EQ(p.at(kMlaKvLen, j), lens[r]);
      const int q_start = p.at(kMlaQStart, j);
      EXPECT_EQ(q_start % group_rows, 0);
      EXPECT_LT(q_start, (qsl[r + 1] - qsl[r]) * heads);
      EXPECT_EQ(p.at(kMlaKvStart, j) % kMlaKeyTile, 0);
      EXPECT_LT(p.at(kMlaKvStart, j), p.at(kMlaKvEnd, j));
      ranges[{r, q_start}].push_back({p.at(kMlaKvStart, j), p.at(kMlaKvEnd, j)});
      if (p.at(kMlaPartialIndptr, j) >= 0) partials[{r, q_start}].push_back(p.at(kMlaPartialIndptr, j));
      group_keys[g] += p.at(kMlaKvEnd, j) - p.at(kMlaKvStart, j);
    }
  }
  // Every tile once, its keys [0, causal extent of its last row) covered by disjoint chunks.
  int64_t num_tiles = 0;
  std::vector<int> merged(static_cast<size_t>(std::max<int64_t>(s.partial_rows, 1)), 0);
  for (size_t r = 0; r + 1 < qsl.size(); ++r) {
    const int q = qsl[r + 1] - qsl[r];
    for (int start = 0; start < q * heads; start += static_cast<int>(group_rows), ++num_tiles) {
      const int rows = std::min<int>(static_cast<int>(group_rows), q * heads - start);
      const int keys = lens[r] - q + (start + rows - 1) / static_cast<int>(heads) + 1;
      auto cover = ranges[{static_cast<int>(r), start}];
      std::sort(cover.begin(), cover.end());
      ASSERT_FALSE(cover.empty()) << "request " << r << " tile " << start;
      int next = 0;
      for (auto [a, b] : cover) {
        EXPECT_EQ(a, next) << "request " << r << " tile " << start;
        next = b;
      }
      EXPECT_EQ(next, keys) << "request " << r << " tile " << start;
      const std::vector<int>& part = partials[{static_cast<int>(r), start}];
      if (cover.size() == 1) {
        EXPECT_TRUE(part.empty());
        continue;
      }
      // A split tile: chunk c's rows at base + c * rows, each row merged by exactly one CTA over all chunks.
      ASSERT_EQ(part.size(), cover.size());
      const int base = *std::min_element(part.begin(), part.end());
      for (int c = 0; c < static_cast<int>(cover.size()); ++c) {
        EXPECT_NE(std::find(part.begin(), part.end(), base + c * rows), part.end());
      }
      const int64_t first_row = static_cast<int64_t>(qsl[r]) * heads + start;
      int covered = 0;
      for (int64_t cta = 0; cta < s.num_ctas; ++cta) {
        const int a = p.at(kMlaMergeStart, cta), b = p.at(kMlaMergeEnd, cta);
        if (b <= a || a < first_row || a >= first_row + rows) continue;
        EXPECT_LE(b, first_row + rows);
        EXPECT_LT(cta, grid);
        EXPECT_EQ(p.at(kMlaMergePartialStart, cta), base + (a - first_row));
        EXPECT_EQ(p.at(kMlaMergePartialEnd, cta), base + static_cast<int>(cover.size()) * rows);
        EXPECT_EQ(p.at(kMlaMergePartialStride, cta), rows);
        covered += b - a;
        for (int c = 0; c < static_cast<int>(cover.size()); ++c) {
          for (int i = a; i < b; ++i) ++merged[static_cast<size_t>(base + (i - first_row) + c * rows)];
        }
      }
      EXPECT_EQ(covered, rows) << "request " << r << " tile " << start;
    }
  }
  for (int64_t i = 0; i < s.partial_rows; ++i) EXPECT_EQ(merged[static_cast<size_t>(i)], 1) << "partial row " << i;
  EXPECT_GE(s.num_works, num_tiles);
  if (group_keys_out != nullptr) *group_keys_out = group_keys;
}

TEST(MlaSchedule, DeepSeekDecodeBatch64At4kStaysWholeOnTwoCtasPerTile) {
  // 128 heads: two 64-row CTAs per token. 64 requests of 4096 keys over 66 groups: none is split (a request is
  // about one group's even share), each group runs at most one.
  const int n = 64, heads = 128, ctas = 132, stride = 300;
  std::vector<int32_t> qsl(n + 1), lens(n, 4096);
  std::iota(qsl.begin(), qsl.end(), 0);
  const Plan p = plan(qsl, lens, heads, ctas, stride, 1 << 20);
  EXPECT_EQ(p.s.ctas_per_tile, 2);
  EXPECT_EQ(p.s.num_groups, 66);
  EXPECT_EQ(p.s.num_works, n);
  EXPECT_EQ(p.s.partial_rows, 0);
  EXPECT_EQ(p.s.num_tokens, n);
  std::vector<int64_t> keys;
  check_plan(p, qsl, lens, heads, stride, 1 << 20, &keys);
  EXPECT_EQ(*std::max_element(keys.begin(), keys.end()), 4096);
}

TEST(MlaSchedule, FewLongRequestsAreSplitAcrossTheGroups) {
  // One and sixteen requests at 4k: chunks of an even share, every group busy, the merge within the grid.
  for (int n : {1, 16}) {
    const int heads = 128, ctas = 132, stride = 257;
    std::vector<int32_t> qsl(n + 1), lens(n, 4096);
    std::iota(qsl.begin(), qsl.end(), 0);
    const Plan p = plan(qsl, lens, heads, ctas, stride, 1 << 20);
    EXPECT_GT(p.s.partial_rows, 0) << n;
    std::vector<int64_t> keys;
    check_plan(p, qsl, lens, heads, stride, 1 << 20, &keys);
    const int64_t total = std::accumulate(keys.begin(), keys.end(), int64_t{0});
    EXPECT_EQ(total, int64_t{4096} * n);
    EXPECT_LE(*std::max_element(keys.begin(), keys.end()), n == 1 ? 256 : 1024) << n;
  }
}

TEST(MlaSchedule, PartialCapacityBoundsTheSplits) {
  const int n = 4, heads = 128, ctas = 132;
  std::vector<int32_t> qsl(n + 1), lens(n, 8192);
  std::iota(qsl.begin(), qsl.end(), 0);
  for (int64_t cap : {0, 128 * 40, 1 << 20}) {
    const Plan p = plan(qsl, lens, heads, ctas, 600, cap);
    check_plan(p, qsl, lens, heads, 600, cap);
    if (cap == 0) {
      EXPECT_EQ(p.s.num_works, n);
    } else {
      EXPECT_GT(p.s.partial_rows, 0);
    }
  }
}

TEST(MlaSchedule, SixteenHeadsMixedPrefillAndDecode) {
  // 16 heads (DeepSeek-V3 at tensor parallel 8): one 64-row CTA per tile, four tokens per prefill tile; decodes of
  // random lengths first, then prefill chunks over cached prefixes, and an empty request.
  std::vector<int32_t> qsl = {0}, lens;
  uint32_t x = 12345;
  auto rnd = [&](uint32_t m) {
    x = x * 1664525u + 1013904223u;
    return (x >> 8) % m;
  };
  for (int i = 0; i < 20; ++i) {
    qsl.push_back(qsl.back() + 1);
    lens.push_back(1 + static_cast<int32_t>(rnd(9000)));
  }
  for (int q : {1000, 3, 0, 77}) {
    qsl.push_back(qsl.back() + q);
    lens.push_back(q + static_cast<int32_t>(rnd(3000)));
  }
  const int heads = 16, ctas = 132, stride = 700;
  const Plan p = plan(qsl, lens, heads, ctas, stride, 1 << 16);
  EXPECT_EQ(p.s.ctas_per_tile, 1);
  EXPECT_EQ(p.s.num_groups, 132);
  EXPECT_GT(p.s.partial_rows, 0);  // the long decodes are split
  check_plan(p, qsl, lens, heads, stride, 1 << 16);
}

TEST(MlaSchedule, NothingToPlan) {
  const Plan p = plan({0}, {}, 128, 132, 10, 1 << 20);
  EXPECT_EQ(p.s.num_works, 0);
  EXPECT_EQ(p.at(kMlaWorkIndptr, 66), 0);
}

}  // namespace
}  // namespace llmserve::ops

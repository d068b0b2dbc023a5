// Host planning of the SM90 MLA kernel's work lists (see mla_schedule.h).
#include "kernels/mla_schedule.h"

#include <algorithm>
#include <climits>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

#include "core/env.h"
#include "core/logging.h"
#include "kernels/prefill_schedule.h"

namespace llmserve::ops {
namespace {

// A work costs this many keys' worth of time besides the keys it visits: loading its query tile (64 rows x 576
// bf16, the size of 64 cache rows) and writing its output tile.
constexpr int64_t kWorkOverheadKeys = 128;
// Chunks are never shorter than this (a split pays a partial tile write and read, and the merge).
constexpr int64_t kMinChunkKeys = 256;
// The merge step handles 4 rows per pass (256 threads, 64 per 512-wide row): give each merging CTA at least that.
constexpr int64_t kMergeRowsPerPass = 4;

struct Tile {
  int32_t request, q_start, rows, keys;  // q_start: first packed row within the request; keys: causal extent
  int32_t step = 0;                      // keys per chunk (the last may be shorter); keys when the tile is not split
  int32_t chunks = 1;
  int32_t partial_base = -1;  // first partial row when split
  bool split() const { return chunks > 1; }
};

struct Work {
  int64_t cost;
  int32_t tile, kv_start, kv_end, partial;
};

int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

}  // namespace

int64_t mla_schedule_width(int64_t max_num_tokens, int64_t max_num_reqs, int64_t num_heads, int64_t num_ctas) {
  CHECK(max_num_tokens > 0 && max_num_reqs > 0 && num_heads > 0 && num_ctas > 0)
      << "mla_schedule_width(" << max_num_tokens << ", " << max_num_reqs << ", " << num_heads << ", " << num_ctas
      << ")";
  const int64_t group_rows = (num_heads > kMlaTileRows ? 2 : 1) * kMlaTileRows;
  // Tiles: ceil(q H / group_rows) per request <= q H / group_rows + 1. Splitting adds at most one chunk per group
  // (chunks are at least the even share of all keys over the groups) plus one per tile (the rounding).
  const int64_t tiles =
      (max_num_tokens * num_heads + group_rows - 1) / group_rows + std::min(max_num_reqs, max_num_tokens);
  return std::max(2 * tiles + num_ctas, num_ctas + 1);
}

int64_t sm90_mla_ctas(const Device& device) {
  if (device.is_cpu()) return 0;
  static const bool enabled = switch_from_env_or_die("LLMSERVE_SM90_MLA", true);
  return enabled ? sm90_sm_count(device) : 0;
}

MlaSchedule plan_mla_schedule(int32_t* rows, int64_t width, const int32_t* query_start_loc, const int32_t* seq_lens,
                              int64_t num_reqs, int64_t block_table_stride, int64_t num_heads, int64_t num_ctas,
                              int64_t max_partial_rows) {
  MlaSchedule s;
  s.num_heads = num_heads;
  s.num_ctas = num_ctas;
  s.ctas_per_tile = num_heads > kMlaTileRows ? 2 : 1;
  s.num_groups = num_ctas / s.ctas_per_tile;
  CHECK(num_heads > 0 && s.num_groups > 0 && width >= num_ctas + 1 && num_reqs >= 0 && max_partial_rows >= 0)
      << "plan_mla_schedule: heads " << num_heads << ", ctas " << num_ctas << ", width " << width << ", reqs "
      << num_reqs;
  const int64_t group_rows = s.ctas_per_tile * kMlaTileRows, grid = s.ctas_per_tile * s.num_groups;
  s.num_tokens = num_reqs > 0 ? query_start_loc[num_reqs] : 0;
  // Only the first num_ctas + 1 columns are read whatever the plan (work_indptr, the per-CTA merge rows), so only
  // they start zeroed; the works' columns are all written below, and later columns are never read.
  for (int64_t r = 0; r < kMlaScheduleRows; ++r) std::fill_n(rows + r * width, num_ctas + 1, 0);

  // 1. The group tiles of every request, each with the keys its last row sees.
  std::vector<Tile> tiles;
  int64_t total_keys = 0;
  for (int64_t r = 0; r < num_reqs; ++r) {
    const int64_t q = query_start_loc[r + 1] - query_start_loc[r], k = seq_lens[r];
    CHECK(q >= 0 && k >= q && static_cast<int64_t>(r) * block_table_stride <= INT32_MAX)
        << "plan_mla_schedule: request " << r << " has " << q << " query tokens over " << k << " keys";
    const int64_t packed = q * num_heads;
    for (int64_t start = 0; start < packed; start += group_rows) {
      const int64_t end = std::min(start + group_rows, packed);
      const int64_t keys = k - q + (end - 1) / num_heads + 1;
      tiles.push_back({static_cast<int32_t>(r), static_cast<int32_t>(start), static_cast<int32_t>(end - start),
                       static_cast<int32_t>(keys)});
      total_keys += keys;
    }
  }
  if (tiles.empty()) return s;

  // 2. The chunk: an even share of the step's keys per group, whole key tiles. A tile is cut into the nearest
  // whole number of such chunks (so a tile barely over the share stays whole: its stray tail chunk would only add
  // a merge), equal ones, longest tiles first, while the partial rows fit and each split tile keeps a merging CTA.
  const int64_t chunk = std::max(kMinChunkKeys, round_up((total_keys + s.num_groups - 1) / s.num_groups, kMlaKeyTile));
  for (Tile& t : tiles) t.step = t.keys;
  std::vector<int32_t> by_keys(tiles.size());
  for (size_t i = 0; i < tiles.size(); ++i) by_keys[i] = static_cast<int32_t>(i);
  std::stable_sort(by_keys.begin(), by_keys.end(), [&](int32_t a, int32_t b) { return tiles[a].keys > tiles[b].keys; });
  int64_t partial_rows = 0, num_split = 0;
  for (int32_t i : by_keys) {
    Tile& t = tiles[i];
    const int64_t pieces = (t.keys + chunk / 2) / chunk;
    if (pieces < 2) break;
    const int64_t step = round_up((t.keys + pieces - 1) / pieces, kMlaKeyTile);
    const int64_t chunks = (t.keys + step - 1) / step;
    if (chunks < 2 || num_split == grid || partial_rows + chunks * t.rows > max_partial_rows) continue;
    t.step = static_cast<int32_t>(step);
    t.chunks = static_cast<int32_t>(chunks);
    t.partial_base = static_cast<int32_t>(partial_rows);
    partial_rows += chunks * t.rows;
    ++num_split;
  }
  s.partial_rows = partial_rows;

  // 3. The merge: each split tile's rows in contiguous ranges, one CTA each, the grid's CTAs shared evenly.
  int32_t* merge_start = rows + kMlaMergeStart * width;
  int32_t* merge_end = rows + kMlaMergeEnd * width;
  int32_t* merge_partial_start = rows + kMlaMergePartialStart * width;
  int32_t* merge_partial_end = rows + kMlaMergePartialEnd * width;
  int32_t* merge_stride = rows + kMlaMergePartialStride * width;
  int64_t cta = 0;
  const int64_t per_tile = num_split > 0 ? grid / num_split : 0;
  for (const Tile& t : tiles) {
    if (!t.split()) continue;
    const int64_t pieces =
        std::max<int64_t>(1, std::min(per_tile, (t.rows + kMergeRowsPerPass - 1) / kMergeRowsPerPass));
    const int64_t piece_rows = (t.rows + pieces - 1) / pieces;
    const int64_t first_row = static_cast<int64_t>(query_start_loc[t.request]) * num_heads + t.q_start;
    for (int64_t a = 0; a < t.rows; a += piece_rows, ++cta) {
      CHECK_LT(cta, grid) << "plan_mla_schedule: merge ranges exceed the grid";
      merge_start[cta] = static_cast<int32_t>(first_row + a);
      merge_end[cta] = static_cast<int32_t>(first_row + std::min<int64_t>(a + piece_rows, t.rows));
      merge_partial_start[cta] = static_cast<int32_t>(t.partial_base + a);
      merge_partial_end[cta] = static_cast<int32_t>(t.partial_base + t.chunks * t.rows);
      merge_stride[cta] = t.rows;
    }
  }

  // 4. The works (a split tile's chunks, else the whole tile), largest first, each to the group with the least
  // work so far.
  std::vector<Work> works;
  for (size_t i = 0; i < tiles.size(); ++i) {
    const Tile& t = tiles[i];
    for (int64_t start = 0, c = 0; start < t.keys; start += t.step, ++c) {  // keys >= 1: a token sees itself
      const int64_t end = std::min<int64_t>(start + t.step, t.keys);
      works.push_back({end - start + kWorkOverheadKeys, static_cast<int32_t>(i), static_cast<int32_t>(start),
                       static_cast<int32_t>(end), t.split() ? static_cast<int32_t>(t.partial_base + c * t.rows) : -1});
    }
  }
  const int64_t n = static_cast<int64_t>(works.size());
  CHECK_LE(n, width) << "plan_mla_schedule: " << n << " works exceed the schedule's width";
  std::stable_sort(works.begin(), works.end(), [](const Work& a, const Work& b) { return a.cost > b.cost; });
  using Load = std::pair<int64_t, int64_t>;  // (cost so far, group): the smallest cost, then the lowest group
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> least;
  for (int64_t g = 0; g < s.num_groups; ++g) least.push({0, g});
  int32_t* indptr = rows + kMlaWorkIndptr * width;
  std::vector<int32_t> group_of(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    auto [load, g] = least.top();
    least.pop();
    group_of[i] = static_cast<int32_t>(g);
    ++indptr[g + 1];
    least.push({load + works[i].cost, g});
  }
  for (int64_t g = 0; g < s.num_groups; ++g) indptr[g + 1] += indptr[g];
  std::vector<int32_t> next(indptr, indptr + s.num_groups);
  for (int64_t i = 0; i < n; ++i) {
    const Work& w = works[i];
    const Tile& t = tiles[w.tile];
    int32_t* col = rows + next[group_of[i]]++;
    col[kMlaQIndptr * width] = query_start_loc[t.request];
    col[kMlaKvIndptr * width] = static_cast<int32_t>(t.request * block_table_stride);
    col[kMlaPartialIndptr * width] = w.partial;
    col[kMlaQLen * width] = query_start_loc[t.request + 1] - query_start_loc[t.request];
    col[kMlaKvLen * width] = seq_lens[t.request];
    col[kMlaQStart * width] = t.q_start;
    col[kMlaKvStart * width] = w.kv_start;
    col[kMlaKvEnd * width] = w.kv_end;
  }
  s.num_works = n;
  return s;
}

}  // namespace llmserve::ops

// Host planning of the SM90 prefill attention kernel's work lists (see prefill_schedule.h).
#include "kernels/prefill_schedule.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

#include "core/env.h"
#include "core/logging.h"

#ifdef LLMSERVE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace llmserve::ops {
namespace {

// A CTA pays this many keys' worth of time per tile besides the keys it visits (loading the query tile, the
// epilogue), so many short tiles are not all packed onto one CTA.
constexpr int64_t kTileOverheadKeys = 64;

struct Work {
  int64_t cost;
  int32_t tile, first_row, table_offset, query_len, seq_len, head, request;
};

}  // namespace

int64_t prefill_schedule_tile(int64_t head_dim) {
  // FlashInfer's SM90 tiles (hopper/prefill_sm90.cuh): 192 query rows at head_dim 64, 128 at 128.
  return head_dim == 64 ? 192 : head_dim == 128 ? 128 : 0;
}

int64_t prefill_schedule_width(int64_t max_num_tokens, int64_t max_num_reqs, int64_t num_heads, int64_t head_dim,
                               int64_t num_ctas) {
  const int64_t tile = prefill_schedule_tile(head_dim);
  CHECK(tile > 0 && max_num_tokens > 0 && max_num_reqs > 0 && num_heads > 0 && num_ctas > 0)
      << "prefill_schedule_width(" << max_num_tokens << ", " << max_num_reqs << ", " << num_heads << ", " << head_dim
      << ", " << num_ctas << ")";
  // Each request's tiles number at most ceil(q / tile) <= q / tile + 1.
  const int64_t works = num_heads * ((max_num_tokens + tile - 1) / tile + std::min(max_num_reqs, max_num_tokens));
  return std::max(works, num_ctas + 1);
}

int64_t sm90_sm_count(const Device& device) {
  if (device.is_cpu()) return 0;
#ifdef LLMSERVE_WITH_CUDA
  int major = 0, minor = 0, sms = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device.index) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device.index) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device.index) != cudaSuccess) {
    return 0;
  }
  return major == 9 && minor == 0 ? sms : 0;
#else
  return 0;
#endif
}

int64_t sm90_prefill_ctas(const Device& device) {
  if (device.is_cpu()) return 0;
  static const bool enabled = switch_from_env_or_die("LLMSERVE_SM90_PREFILL", true);
  return enabled ? sm90_sm_count(device) : 0;
}

int64_t plan_prefill_schedule(int32_t* rows, int64_t width, const int32_t* query_start_loc, const int32_t* seq_lens,
                              int64_t num_reqs, int64_t num_decode, int64_t block_table_stride, int64_t num_heads,
                              int64_t head_dim, int64_t num_ctas) {
  const int64_t tile = prefill_schedule_tile(head_dim);
  CHECK(tile > 0 && num_heads > 0 && num_ctas > 0 && width >= num_ctas + 1 && num_decode >= 0 && num_decode <= num_reqs)
      << "plan_prefill_schedule: head_dim " << head_dim << ", heads " << num_heads << ", ctas " << num_ctas
      << ", width " << width << ", decode " << num_decode << " of " << num_reqs;
  std::vector<Work> works;
  for (int64_t r = num_decode; r < num_reqs; ++r) {
    const int64_t q = query_start_loc[r + 1] - query_start_loc[r], k = seq_lens[r];
    CHECK(q >= 0 && k >= q) << "plan_prefill_schedule: request " << r << " has " << q << " query tokens over " << k
                            << " keys";
    for (int64_t t = 0; t * tile < q; ++t) {
      // Causal: the tile's last query row sits at position k - q + min((t + 1) tile, q) - 1.
      const int64_t keys = k - q + std::min((t + 1) * tile, q);
      for (int64_t h = 0; h < num_heads; ++h) {
        works.push_back({keys + kTileOverheadKeys, static_cast<int32_t>(t), query_start_loc[r],
                         static_cast<int32_t>(r * block_table_stride), static_cast<int32_t>(q), static_cast<int32_t>(k),
                         static_cast<int32_t>(h), static_cast<int32_t>(r)});
      }
    }
  }
  const int64_t n = static_cast<int64_t>(works.size());
  CHECK_LE(n, width) << "plan_prefill_schedule: " << n << " works exceed the schedule's width";
  int32_t* indptr = rows;
  std::fill_n(indptr, num_ctas + 1, 0);
  if (n == 0) return 0;
  // Longest processing time first: each work, largest first, to the CTA with the least work so far.
  std::stable_sort(works.begin(), works.end(), [](const Work& a, const Work& b) { return a.cost > b.cost; });
  using Load = std::pair<int64_t, int64_t>;  // (cost so far, cta): the smallest cost, then the lowest cta
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> least;
  for (int64_t c = 0; c < num_ctas; ++c) least.push({0, c});
  std::vector<int32_t> cta_of(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    auto [load, c] = least.top();
    least.pop();
    cta_of[i] = static_cast<int32_t>(c);
    ++indptr[c + 1];
    least.push({load + works[i].cost, c});
  }
  for (int64_t c = 0; c < num_ctas; ++c) indptr[c + 1] += indptr[c];
  std::vector<int32_t> next(indptr, indptr + num_ctas);
  for (int64_t i = 0; i < n; ++i) {
    const Work& w = works[i];
    const int64_t j = next[cta_of[i]]++;
    int32_t* col = rows + j;
    col[1 * width] = w.tile;
    col[2 * width] = w.first_row;
    col[3 * width] = w.table_offset;
    col[4 * width] = w.query_len;
    col[5 * width] = w.seq_len;
    col[6 * width] = w.head;
    col[7 * width] = w.request;
  }
  return n;
}

}  // namespace llmserve::ops

// reshape_and_cache and paged_attention against a double-precision reference that never pages: each request's
// keys/values are kept as plain per-request arrays, written into a NaN-poisoned paged cache through shuffled,
// partly shared block tables; attention is then checked on ragged batches mixing decode, full prefill and
// chunked prefill / prefix hits, for several GQA ratios, head sizes, block sizes and sliding windows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>

#include "kernels/ops.h"
#include "test_util.h"

namespace llmserve {
namespace {

using testing::expect_close;
using testing::random_floats;
using testing::random_tensor;
using testing::to_doubles;

TEST(ReshapeAndCache, WritesSlotsAndSkipsNegativeOnes) {
  const int64_t nb = 4, bs = 3, kv = 2, d = 8;
  Tensor kc = Tensor::empty({nb, bs, kv, d}, DType::kF32), vc = Tensor::empty({nb, bs, kv, d}, DType::kF32);
  kc.fill(NAN);
  vc.fill(NAN);
  Tensor key = random_tensor({5, kv, d}, 1), value = random_tensor({5, kv, d}, 2);
  const std::vector<int64_t> slots = {7, -1, 0, 11, -5};
  ops::reshape_and_cache(key, value, kc, vc, Tensor::from_i64(slots, {5}));
  std::vector<double> ks = to_doubles(key), vs = to_doubles(value), kcs = to_doubles(kc), vcs = to_doubles(vc);
  std::vector<bool> written(nb * bs, false);
  for (size_t t = 0; t < slots.size(); ++t) {
    if (slots[t] < 0) continue;
    written[slots[t]] = true;
    for (int64_t e = 0; e < kv * d; ++e) {
      EXPECT_EQ(kcs[slots[t] * kv * d + e], ks[t * kv * d + e]) << "key slot " << slots[t];
      EXPECT_EQ(vcs[slots[t] * kv * d + e], vs[t * kv * d + e]) << "value slot " << slots[t];
    }
  }
  for (int64_t s = 0; s < nb * bs; ++s) {
    if (written[s]) continue;
    for (int64_t e = 0; e < kv * d; ++e) {
      ASSERT_TRUE(std::isnan(kcs[s * kv * d + e]) && std::isnan(vcs[s * kv * d + e])) << "slot " << s << " touched";
    }
  }
}

TEST(ReshapeAndCache, ReadsRowStridedKeyAndValue) {
  // key and value as head slices of a fused [n, heads + 2 * kv_heads, head_dim] projection.
  const int64_t n = 4, heads = 2, kv = 1, d = 16;
  Tensor qkv = random_tensor({n, heads + 2 * kv, d}, 3);
  Tensor key = qkv.slice(1, heads, heads + kv), value = qkv.slice(1, heads + kv, heads + 2 * kv);
  Tensor kc = Tensor::zeros({2, 2, kv, d}, DType::kF32), vc = Tensor::zeros({2, 2, kv, d}, DType::kF32);
  ops::reshape_and_cache(key, value, kc, vc, Tensor::from_i64({3, 2, 1, 0}, {n}));
  std::vector<double> all = to_doubles(qkv), kcs = to_doubles(kc), vcs = to_doubles(vc);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < d; ++i) {
      EXPECT_EQ(kcs[(3 - t) * d + i], all[(t * (heads + 2 * kv) + heads) * d + i]);
      EXPECT_EQ(vcs[(3 - t) * d + i], all[(t * (heads + 2 * kv) + heads + kv) * d + i]);
    }
  }
}

struct Req {
  int64_t seq_len, query_len;
  int share_from = -1;  // request whose first `shared_blocks` blocks this one reuses (a prefix-cache hit)
  int64_t shared_blocks = 0;
};

struct AttnCase {
  int64_t heads, kv_heads, head_dim, block_size, window;
};

std::string case_name(const AttnCase& c) {
  std::ostringstream os;  // not string operator+: GCC 12 warns falsely there (-Wrestrict, PR 105651)
  os << "H" << c.heads << "_KV" << c.kv_heads << "_D" << c.head_dim << "_BS" << c.block_size << "_W" << c.window;
  return os.str();
}

void PrintTo(const AttnCase& c, std::ostream* os) { *os << case_name(c); }

class PagedAttentionTest : public ::testing::TestWithParam<AttnCase> {};

// Decodes first (the runner's convention), then a full prefill, chunked prefills and prefix hits.
const std::vector<Req>& request_mix() {
  static const std::vector<Req> reqs = {
      {1, 1},         // decode at position 0
      {37, 1, 5, 2},  // decode; shares its first two blocks with request 5
      {16, 1},        // decode, context exactly one block (16) or several (small blocks)
      {20, 20},       // full prefill
      {50, 7},        // chunked prefill: 43 cached tokens + 7 new
      {45, 45},       // full prefill, owner of blocks shared by requests 1 and 6
      {41, 9, 5, 2},  // prefix hit: first two blocks from request 5, 9 new tokens
      {3, 2},         // tiny chunk
  };
  return reqs;
}

// A batch ready for paged_attention plus the unpaged keys/values it was built from.
struct Batch {
  std::vector<std::vector<float>> keys, values;  // per request [seq_len, kv_heads, head_dim]
  std::vector<int32_t> qsl;                      // query_start_loc as a vector
  Tensor key_cache, value_cache, query;
  ops::AttentionMetadata md;
};

// Block tables: fresh blocks drawn from a shuffled pool, except the shared prefixes. [num_reqs, max_blocks + 1]
// (one spare column of -1, never read).
std::vector<int32_t> make_block_table(const AttnCase& c, const std::vector<Req>& reqs, std::mt19937& rng,
                                      int64_t* num_blocks, int64_t* width) {
  int64_t max_blocks = 0, total_blocks = 0;
  for (const Req& r : reqs) {
    max_blocks = std::max(max_blocks, (r.seq_len + c.block_size - 1) / c.block_size);
    total_blocks += (r.seq_len + c.block_size - 1) / c.block_size;
  }
  *num_blocks = total_blocks + 5;
  *width = max_blocks + 1;
  std::vector<int32_t> pool(static_cast<size_t>(*num_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<int32_t> table(reqs.size() * *width, -1);
  size_t next = 0;
  for (bool sharers : {false, true}) {  // owners first: a sharer may come before its source in the batch
    for (size_t r = 0; r < reqs.size(); ++r) {
      if ((reqs[r].share_from >= 0) != sharers) continue;
      for (int64_t b = 0; b < (reqs[r].seq_len + c.block_size - 1) / c.block_size; ++b) {
        table[r * *width + b] = b < reqs[r].shared_blocks ? table[reqs[r].share_from * *width + b] : pool[next++];
      }
    }
  }
  return table;
}

Batch build_batch(const AttnCase& c, const std::vector<Req>& reqs, std::mt19937& rng) {
  Batch batch;
  const int64_t num_reqs = static_cast<int64_t>(reqs.size()), kv_row = c.kv_heads * c.head_dim;
  int64_t num_blocks = 0, width = 0;
  const std::vector<int32_t> table = make_block_table(c, reqs, rng, &num_blocks, &width);
  // Unpaged keys/values; shared prefixes identical to their source (a prefix-cache hit holds the same tokens).
  batch.keys.resize(num_reqs);
  batch.values.resize(num_reqs);
  for (int64_t r = 0; r < num_reqs; ++r) {
    batch.keys[r] = random_floats(reqs[r].seq_len * kv_row, static_cast<uint32_t>(rng()));
    batch.values[r] = random_floats(reqs[r].seq_len * kv_row, static_cast<uint32_t>(rng()));
  }
  for (int64_t r = 0; r < num_reqs; ++r) {
    if (reqs[r].share_from < 0) continue;
    const int64_t n = reqs[r].shared_blocks * c.block_size * kv_row;
    std::copy_n(batch.keys[reqs[r].share_from].begin(), n, batch.keys[r].begin());
    std::copy_n(batch.values[reqs[r].share_from].begin(), n, batch.values[r].begin());
  }
  // Write every position through reshape_and_cache, with padding rows (slot -1, garbage) in between, into
  // NaN-poisoned caches: a read of any slot not written shows up as NaN in the output.
  std::vector<float> k_rows, v_rows;
  std::vector<int64_t> slots;
  for (int64_t r = 0; r < num_reqs; ++r) {
    for (int64_t p = 0; p < reqs[r].seq_len; ++p) {
      k_rows.insert(k_rows.end(), batch.keys[r].begin() + p * kv_row, batch.keys[r].begin() + (p + 1) * kv_row);
      v_rows.insert(v_rows.end(), batch.values[r].begin() + p * kv_row, batch.values[r].begin() + (p + 1) * kv_row);
      slots.push_back(table[r * width + p / c.block_size] * c.block_size + p % c.block_size);
    }
    k_rows.insert(k_rows.end(), kv_row, 1e30f);
    v_rows.insert(v_rows.end(), kv_row, 1e30f);
    slots.push_back(-1);
  }
  const int64_t num_rows = static_cast<int64_t>(slots.size());
  batch.key_cache = Tensor::empty({num_blocks, c.block_size, c.kv_heads, c.head_dim}, DType::kF32);
  batch.value_cache = Tensor::empty(batch.key_cache.shape(), DType::kF32);
  batch.key_cache.fill(NAN);
  batch.value_cache.fill(NAN);
  ops::reshape_and_cache(Tensor::from_f32(k_rows, {num_rows, c.kv_heads, c.head_dim}),
                         Tensor::from_f32(v_rows, {num_rows, c.kv_heads, c.head_dim}), batch.key_cache,
                         batch.value_cache, Tensor::from_i64(slots, {num_rows}));
  // Metadata and queries (plus two padding tokens at the end).
  std::vector<int32_t> seq_lens;
  batch.qsl = {0};
  for (const Req& r : reqs) {
    batch.qsl.push_back(batch.qsl.back() + static_cast<int32_t>(r.query_len));
    seq_lens.push_back(static_cast<int32_t>(r.seq_len));
  }
  batch.query = random_tensor({batch.qsl.back() + 2, c.heads, c.head_dim}, static_cast<uint32_t>(rng()));
  batch.md.query_start_loc = Tensor::from_i32(batch.qsl, {num_reqs + 1});
  batch.md.seq_lens = Tensor::from_i32(seq_lens, {num_reqs});
  batch.md.block_table = Tensor::from_i32(table, {num_reqs, width});
  batch.md.num_reqs = num_reqs;
  batch.md.num_decode_tokens = 3;
  batch.md.max_query_len = 45;
  batch.md.max_seq_len = 50;
  return batch;
}

// Causal (optionally windowed) GQA attention in double over the unpaged arrays; padding tokens stay 0.
std::vector<double> reference_attention(const AttnCase& c, const std::vector<Req>& reqs, const Batch& batch,
                                        double scale) {
  std::vector<double> q = to_doubles(batch.query), want(q.size(), 0.0);
  const int64_t group = c.heads / c.kv_heads;
  for (size_t r = 0; r < reqs.size(); ++r) {
    const std::vector<float>& keys = batch.keys[r];
    const std::vector<float>& values = batch.values[r];
    for (int64_t j = 0; j < reqs[r].query_len; ++j) {
      const int64_t t = batch.qsl[r] + j, pos = reqs[r].seq_len - reqs[r].query_len + j;
      const int64_t lo = c.window > 0 ? std::max<int64_t>(0, pos - c.window + 1) : 0;
      for (int64_t h = 0; h < c.heads; ++h) {
        const double* qv = q.data() + (t * c.heads + h) * c.head_dim;
        const int64_t kvh = h / group;
        std::vector<double> s;
        for (int64_t p = lo; p <= pos; ++p) {
          double dot = 0;
          for (int64_t i = 0; i < c.head_dim; ++i) dot += qv[i] * keys[(p * c.kv_heads + kvh) * c.head_dim + i];
          s.push_back(dot * scale);
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& v : s) sum += (v = std::exp(v - mx));
        double* o = want.data() + (t * c.heads + h) * c.head_dim;
        for (int64_t p = lo; p <= pos; ++p) {
          for (int64_t i = 0; i < c.head_dim; ++i)
            o[i] += s[p - lo] / sum * values[(p * c.kv_heads + kvh) * c.head_dim + i];
        }
      }
    }
  }
  return want;
}

TEST_P(PagedAttentionTest, MatchesUnpagedReference) {
  const AttnCase c = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(c.heads * 131 + c.head_dim * 7 + c.block_size + c.window));
  const Batch batch = build_batch(c, request_mix(), rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  Tensor out = Tensor::empty(batch.query.shape(), DType::kF32);
  out.fill(NAN);
  ops::paged_attention(out, batch.query, batch.key_cache, batch.value_cache, batch.md, scale, c.window);
  expect_close(out, reference_attention(c, request_mix(), batch, scale), 2e-6, 1e-5, case_name(c));
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttentionTest,
                         ::testing::Values(AttnCase{8, 2, 64, 16, 0},    // GQA 4, head_dim 64
                                           AttnCase{4, 4, 128, 16, 0},   // MHA, head_dim 128
                                           AttnCase{6, 1, 16, 5, 0},     // MQA, odd small head_dim and block
                                           AttnCase{8, 2, 64, 4, 5},     // GQA 4 with a sliding window
                                           AttnCase{4, 4, 128, 16, 17},  // window crossing block edges
                                           AttnCase{6, 1, 16, 5, 1}),    // window 1: attends to itself only
                         [](const auto& info) { return case_name(info.param); });

TEST(PagedAttention, QueryAndOutputMayBeRowStrided) {
  // One request of 6 tokens, 3 of them new; query sliced from a fused [n, heads + 2 kv, d] projection and out
  // written into the head slice of a wider buffer. Compared with the same call on contiguous copies.
  const int64_t heads = 2, kv = 1, d = 16;
  Tensor kc = random_tensor({2, 4, kv, d}, 11), vc = random_tensor({2, 4, kv, d}, 12);
  Tensor fused = random_tensor({3, heads + 2 * kv, d}, 13);
  Tensor query = fused.slice(1, 0, heads);
  ops::AttentionMetadata md;
  md.query_start_loc = Tensor::from_i32({0, 3}, {2});
  md.seq_lens = Tensor::from_i32({6}, {1});
  md.block_table = Tensor::from_i32({1, 0}, {1, 2});
  md.num_reqs = 1;
  Tensor wide = Tensor::empty({3, heads + 1, d}, DType::kF32);
  wide.fill(7.f);
  Tensor out = wide.slice(1, 1, heads + 1);
  ops::paged_attention(out, query, kc, vc, md, 0.25f, 0);
  Tensor want = Tensor::empty({3, heads, d}, DType::kF32);
  ops::paged_attention(want, query.contiguous(), kc, vc, md, 0.25f, 0);
  expect_close(out, to_doubles(want), 0, 0);
  std::vector<double> all = to_doubles(wide);
  for (int64_t t = 0; t < 3; ++t) {
    for (int64_t i = 0; i < d; ++i) EXPECT_EQ(all[t * (heads + 1) * d + i], 7.0);
  }
}

// The CUDA split-K scratch size (computed in ops.cc so CPU-only builds can size it too): none for short
// contexts, up to 32 splits of >= 32 keys, at most 64 tokens, head_dim + 2 floats per (token, head, split),
// after the split-K counters.
TEST(PagedAttentionWorkspace, SizesSplitKScratch) {
  EXPECT_EQ(ops::paged_attention_workspace_elems(128, 32, 128, 32), 0);
  EXPECT_EQ(ops::paged_attention_workspace_elems(16, 32, 128, 256),
            ops::kPagedAttentionWorkspaceCounters + 16 * 32 * 8 * 130);
  EXPECT_EQ(ops::paged_attention_workspace_elems(16, 32, 128, 2048),
            ops::kPagedAttentionWorkspaceCounters + 16 * 32 * 32 * 130);
  EXPECT_EQ(ops::paged_attention_workspace_elems(8192, 8, 64, 131072),
            ops::kPagedAttentionWorkspaceCounters + 64 * 8 * 32 * 66);
  EXPECT_EQ(ops::paged_attention_workspace_elems(0, 8, 64, 4096), 0);
}

}  // namespace
}  // namespace llmserve

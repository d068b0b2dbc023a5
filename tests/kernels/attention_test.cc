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

TEST_P(PagedAttentionTest, MatchesUnpagedReference) {
  const AttnCase c = GetParam();
  const std::vector<Req>& reqs = request_mix();
  const int64_t num_reqs = static_cast<int64_t>(reqs.size()), kv_row = c.kv_heads * c.head_dim;
  std::mt19937 rng(static_cast<uint32_t>(c.heads * 131 + c.head_dim * 7 + c.block_size + c.window));

  // Block tables: fresh blocks drawn from a shuffled pool, except the shared prefixes.
  int64_t max_blocks = 0, total_blocks = 0;
  for (const Req& r : reqs) {
    max_blocks = std::max(max_blocks, (r.seq_len + c.block_size - 1) / c.block_size);
    total_blocks += (r.seq_len + c.block_size - 1) / c.block_size;
  }
  const int64_t num_blocks = total_blocks + 5;
  std::vector<int32_t> pool(static_cast<size_t>(num_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<int32_t> table(static_cast<size_t>(num_reqs * (max_blocks + 1)), -1);
  auto tab = [&](int64_t r, int64_t b) -> int32_t& { return table[r * (max_blocks + 1) + b]; };
  size_t next = 0;
  for (bool sharers : {false, true}) {  // owners first: a sharer may come before its source in the batch
    for (int64_t r = 0; r < num_reqs; ++r) {
      if ((reqs[r].share_from >= 0) != sharers) continue;
      for (int64_t b = 0; b < (reqs[r].seq_len + c.block_size - 1) / c.block_size; ++b) {
        tab(r, b) = b < reqs[r].shared_blocks ? tab(reqs[r].share_from, b) : pool[next++];
      }
    }
  }
  // Unpaged keys/values per request [seq_len, kv_heads, head_dim]; shared prefixes identical to their source.
  std::vector<std::vector<float>> keys(num_reqs), values(num_reqs);
  for (int64_t r = 0; r < num_reqs; ++r) {
    keys[r] = random_floats(reqs[r].seq_len * kv_row, static_cast<uint32_t>(rng()));
    values[r] = random_floats(reqs[r].seq_len * kv_row, static_cast<uint32_t>(rng()));
  }
  for (int64_t r = 0; r < num_reqs; ++r) {
    const int64_t n = reqs[r].shared_blocks * c.block_size * kv_row;
    if (reqs[r].share_from < 0) continue;
    std::copy(keys[reqs[r].share_from].begin(), keys[reqs[r].share_from].begin() + n, keys[r].begin());
    std::copy(values[reqs[r].share_from].begin(), values[reqs[r].share_from].begin() + n, values[r].begin());
  }
  // Write every position through reshape_and_cache, with padding rows (slot -1, garbage) in between.
  std::vector<float> k_rows, v_rows;
  std::vector<int64_t> slots;
  for (int64_t r = 0; r < num_reqs; ++r) {
    for (int64_t p = 0; p < reqs[r].seq_len; ++p) {
      k_rows.insert(k_rows.end(), keys[r].begin() + p * kv_row, keys[r].begin() + (p + 1) * kv_row);
      v_rows.insert(v_rows.end(), values[r].begin() + p * kv_row, values[r].begin() + (p + 1) * kv_row);
      slots.push_back(tab(r, p / c.block_size) * c.block_size + p % c.block_size);
    }
    k_rows.insert(k_rows.end(), kv_row, 1e30f);
    v_rows.insert(v_rows.end(), kv_row, 1e30f);
    slots.push_back(-1);
  }
  const int64_t num_rows = static_cast<int64_t>(slots.size());
  Tensor kc = Tensor::empty({num_blocks, c.block_size, c.kv_heads, c.head_dim}, DType::kF32);
  Tensor vc = Tensor::empty(kc.shape(), DType::kF32);
  kc.fill(NAN);
  vc.fill(NAN);
  ops::reshape_and_cache(Tensor::from_f32(k_rows, {num_rows, c.kv_heads, c.head_dim}),
                         Tensor::from_f32(v_rows, {num_rows, c.kv_heads, c.head_dim}), kc, vc,
                         Tensor::from_i64(slots, {num_rows}));

  // Metadata and queries (plus two padding tokens at the end).
  std::vector<int32_t> qsl = {0}, seq_lens;
  for (const Req& r : reqs) {
    qsl.push_back(qsl.back() + static_cast<int32_t>(r.query_len));
    seq_lens.push_back(static_cast<int32_t>(r.seq_len));
  }
  const int64_t num_tokens = qsl.back() + 2;
  Tensor query = random_tensor({num_tokens, c.heads, c.head_dim}, static_cast<uint32_t>(rng()));
  ops::AttentionMetadata md;
  md.query_start_loc = Tensor::from_i32(qsl, {num_reqs + 1});
  md.seq_lens = Tensor::from_i32(seq_lens, {num_reqs});
  md.block_table = Tensor::from_i32(table, {num_reqs, max_blocks + 1});
  md.num_reqs = num_reqs;
  md.num_decode_tokens = 3;
  md.max_query_len = 45;
  md.max_seq_len = 50;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  // Reference in double over the unpaged arrays.
  std::vector<double> q = to_doubles(query), want(q.size(), 0.0);
  const int64_t group = c.heads / c.kv_heads;
  for (int64_t r = 0; r < num_reqs; ++r) {
    for (int64_t j = 0; j < reqs[r].query_len; ++j) {
      const int64_t t = qsl[r] + j, pos = reqs[r].seq_len - reqs[r].query_len + j;
      const int64_t lo = c.window > 0 ? std::max<int64_t>(0, pos - c.window + 1) : 0;
      for (int64_t h = 0; h < c.heads; ++h) {
        const double* qv = q.data() + (t * c.heads + h) * c.head_dim;
        const int64_t kvh = h / group;
        std::vector<double> s;
        for (int64_t p = lo; p <= pos; ++p) {
          double dot = 0;
          for (int64_t i = 0; i < c.head_dim; ++i) dot += qv[i] * keys[r][(p * c.kv_heads + kvh) * c.head_dim + i];
          s.push_back(dot * scale);
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& v : s) sum += (v = std::exp(v - mx));
        double* o = want.data() + (t * c.heads + h) * c.head_dim;
        for (int64_t p = lo; p <= pos; ++p) {
          for (int64_t i = 0; i < c.head_dim; ++i) {
            o[i] += s[p - lo] / sum * values[r][(p * c.kv_heads + kvh) * c.head_dim + i];
          }
        }
      }
    }
  }
  Tensor out = Tensor::empty(query.shape(), DType::kF32);
  out.fill(NAN);
  ops::paged_attention(out, query, kc, vc, md, scale, c.window);
  expect_close(out, want, 2e-6, 1e-5, case_name(c));
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

}  // namespace
}  // namespace llmserve

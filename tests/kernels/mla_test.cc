// The multi-head latent attention ops (batched_linear, mla_rotary_and_cache, mla_attention) against references
// written without them: plain double loops over strided views, rotations from angles computed in double, dense
// causal attention over unpaged per-request rows, and (the end-to-end check) DeepSeek's non-absorbed attention, where
// every head expands its own keys and values from the latent, against the absorbed pipeline the model runs.
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

// Element (i, j, k) of a 3-D float tensor of any strides, as double.
double at3(const Tensor& t, int64_t i, int64_t j, int64_t k) {
  return t.data<float>()[i * t.stride(0) + j * t.stride(1) + k * t.stride(2)];
}

TEST(BatchedLinear, MultipliesEachHeadOfAStridedViewByItsOwnMatrix) {
  const int64_t tokens = 5, heads = 3, k = 24, n = 10;
  for (DType wdtype : {DType::kF32, DType::kBF16}) {
    // x: the first k columns of each head of a [T, H, k + 4] activation, viewed [H, T, k].
    Tensor act = random_tensor({tokens, heads, k + 4}, 1);
    Tensor x = act.slice(2, 0, k).transpose(0, 1);
    Tensor weight = random_tensor({heads, n, k}, 2, wdtype);
    // out: columns [2, 2 + n) of each head of a poisoned [T, H, n + 3] buffer, viewed [H, T, n].
    Tensor wide = Tensor::empty({tokens, heads, n + 3}, DType::kF32);
    wide.fill(NAN);
    Tensor out = wide.slice(2, 2, 2 + n).transpose(0, 1);
    ops::batched_linear(out, x, weight);
    const std::vector<double> w = to_doubles(weight);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t j = 0; j < n; ++j) {
          double want = 0;
          for (int64_t i = 0; i < k; ++i) want += at3(act, t, h, i) * w[(h * n + j) * k + i];
          // bf16 weights: oneDNN may round x to bf16 too (ops.h's linear).
          const double tol = wdtype == DType::kF32 ? 1e-5 : 2e-2;
          ASSERT_NEAR(at3(wide, t, h, 2 + j), want, tol) << dtype_name(wdtype) << " h " << h << " t " << t;
        }
        for (int64_t j : {int64_t{0}, int64_t{1}, 2 + n})
          ASSERT_TRUE(std::isnan(at3(wide, t, h, j))) << "column " << j << " touched";
      }
    }
  }
}

// cos/sin cache [max_position, rope] as the model builds it (rotary_embedding's layout) for base `theta`.
Tensor cos_sin_cache(int64_t max_position, int64_t rope, double theta) {
  std::vector<float> v(static_cast<size_t>(max_position * rope));
  for (int64_t p = 0; p < max_position; ++p) {
    for (int64_t i = 0; i < rope / 2; ++i) {
      const double angle = p * std::pow(theta, -2.0 * i / rope);
      v[p * rope + i] = static_cast<float>(std::cos(angle));
      v[p * rope + rope / 2 + i] = static_cast<float>(std::sin(angle));
    }
  }
  return Tensor::from_f32(v, {max_position, rope});
}

// x rotated to position p, written the way transformers does (deepseek_v3's apply_rotary_pos_emb_interleave:
// de-interleaved output, [x_even cos - x_odd sin, x_odd cos + x_even sin]; rotate-half otherwise). The op keeps
// the pairs in place instead, so results are compared through dot products or by un-permuting.
std::vector<double> hf_rotate(const std::vector<double>& x, int64_t p, double theta, bool interleaved) {
  const int64_t rope = static_cast<int64_t>(x.size()), half = rope / 2;
  std::vector<double> out(x.size());
  for (int64_t i = 0; i < half; ++i) {
    const double angle = p * std::pow(theta, -2.0 * i / rope), c = std::cos(angle), s = std::sin(angle);
    const double a = interleaved ? x[2 * i] : x[i], b = interleaved ? x[2 * i + 1] : x[i + half];
    out[i] = a * c - b * s;
    out[i + half] = b * c + a * s;
  }
  return out;
}

// The op's layout of a rotated vector, given transformers' (de-interleaved) one.
std::vector<double> to_op_layout(const std::vector<double>& hf, bool interleaved) {
  if (!interleaved) return hf;
  const int64_t half = static_cast<int64_t>(hf.size()) / 2;
  std::vector<double> out(hf.size());
  for (int64_t i = 0; i < half; ++i) {
    out[2 * i] = hf[i];
    out[2 * i + 1] = hf[i + half];
  }
  return out;
}

class MlaRotaryAndCacheTest : public ::testing::TestWithParam<bool> {};

TEST_P(MlaRotaryAndCacheTest, RotatesQueryAndKeyAndWritesLatentRows) {
  const bool interleaved = GetParam();
  const int64_t n = 6, heads = 3, nope = 8, rope = 16, latent = 12, num_blocks = 4, block_size = 3;
  const double theta = 50.0;
  Tensor cs = cos_sin_cache(40, rope, theta);
  const std::vector<int64_t> positions = {0, 7, 39, 3, 12, 5}, slots = {4, -1, 11, 0, -3, 7};
  for (bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "q_out aliases q_pe" : "q_out separate");
    // q_pe: the rope columns of a [n, H, nope + rope] projection; kv_c and k_pe: the two parts of [n, L + R].
    Tensor q = random_tensor({n, heads, nope + rope}, 11);
    Tensor kv = random_tensor({n, latent + rope}, 12);
    const Tensor q_before = q.clone(), kv_before = kv.clone();
    Tensor q_pe = q.slice(2, nope, nope + rope);
    Tensor q_full = Tensor::empty({n, heads, latent + rope}, DType::kF32);
    q_full.fill(NAN);
    Tensor q_out = in_place ? q_pe : q_full.slice(2, latent, latent + rope);
    Tensor k_pe = kv.slice(1, latent, latent + rope), kv_c = kv.slice(1, 0, latent);
    Tensor cache = Tensor::empty({num_blocks, block_size, latent + rope}, DType::kF32);
    cache.fill(NAN);
    ops::mla_rotary_and_cache(Tensor::from_i64(positions, {n}), q_pe, q_out, k_pe, kv_c, cs, interleaved, cache,
                              Tensor::from_i64(slots, {n}));
    const std::vector<double> cache_v = to_doubles(cache);
    std::vector<bool> written(num_blocks * block_size, false);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        std::vector<double> x(rope);
        for (int64_t i = 0; i < rope; ++i) x[i] = at3(q_before, t, h, nope + i);
        const std::vector<double> want = to_op_layout(hf_rotate(x, positions[t], theta, interleaved), interleaved);
        for (int64_t i = 0; i < rope; ++i)
          ASSERT_NEAR(q_out.data<float>()[t * q_out.stride(0) + h * q_out.stride(1) + i], want[i], 2e-6);
        if (!in_place) {  // q_pe untouched, q_full's latent columns untouched
          for (int64_t i = 0; i < rope; ++i) ASSERT_EQ(at3(q, t, h, nope + i), at3(q_before, t, h, nope + i));
          for (int64_t i = 0; i < latent; ++i) ASSERT_TRUE(std::isnan(at3(q_full, t, h, i)));
        }
      }
      std::vector<double> k(rope);
      for (int64_t i = 0; i < rope; ++i) k[i] = kv_before.data<float>()[t * (latent + rope) + latent + i];
      const std::vector<double> k_want = to_op_layout(hf_rotate(k, positions[t], theta, interleaved), interleaved);
      for (int64_t i = 0; i < rope; ++i)
        ASSERT_NEAR(kv.data<float>()[t * (latent + rope) + latent + i], k_want[i], 2e-6);
      if (slots[t] < 0) continue;
      written[slots[t]] = true;
      for (int64_t i = 0; i < latent; ++i) {
        ASSERT_EQ(cache_v[slots[t] * (latent + rope) + i], kv_before.data<float>()[t * (latent + rope) + i]);
      }
      for (int64_t i = 0; i < rope; ++i) ASSERT_NEAR(cache_v[slots[t] * (latent + rope) + latent + i], k_want[i], 2e-6);
    }
    for (int64_t s = 0; s < num_blocks * block_size; ++s) {
      if (written[s]) continue;
      for (int64_t i = 0; i < latent + rope; ++i) ASSERT_TRUE(std::isnan(cache_v[s * (latent + rope) + i])) << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, MlaRotaryAndCacheTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Interleaved" : "RotateHalf"; });

struct Req {
  int64_t seq_len, query_len;
  int share_from = -1;  // request whose first `shared_blocks` blocks this one reuses (a prefix-cache hit)
  int64_t shared_blocks = 0;
};

// Decodes first (the runner's convention), then a full prefill, a chunked prefill, a prefix hit and a tiny chunk.
const std::vector<Req>& request_mix() {
  static const std::vector<Req> reqs = {
      {1, 1}, {29, 1, 4, 2}, {17, 1}, {13, 13}, {40, 6}, {33, 33}, {31, 8, 5, 3}, {3, 2},
  };
  return reqs;
}

// A shuffled pool of blocks; sharers take their owner's first blocks. Table [num_reqs, max_blocks + 1].
std::vector<int32_t> make_block_table(const std::vector<Req>& reqs, int64_t block_size, std::mt19937& rng,
                                      int64_t* num_blocks, int64_t* width) {
  int64_t max_blocks = 0, total = 0;
  for (const Req& r : reqs) {
    max_blocks = std::max(max_blocks, (r.seq_len + block_size - 1) / block_size);
    total += (r.seq_len + block_size - 1) / block_size;
  }
  *num_blocks = total + 3;
  *width = max_blocks + 1;
  std::vector<int32_t> pool(static_cast<size_t>(*num_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<int32_t> table(reqs.size() * *width, -1);
  size_t next = 0;
  for (bool sharers : {false, true}) {
    for (size_t r = 0; r < reqs.size(); ++r) {
      if ((reqs[r].share_from >= 0) != sharers) continue;
      for (int64_t b = 0; b < (reqs[r].seq_len + block_size - 1) / block_size; ++b) {
        table[r * *width + b] = b < reqs[r].shared_blocks ? table[reqs[r].share_from * *width + b] : pool[next++];
      }
    }
  }
  return table;
}

ops::AttentionMetadata make_metadata(const std::vector<Req>& reqs, const std::vector<int32_t>& table, int64_t width,
                                     std::vector<int32_t>* qsl) {
  const int64_t num_reqs = static_cast<int64_t>(reqs.size());
  std::vector<int32_t> seq_lens;
  *qsl = {0};
  for (const Req& r : reqs) {
    qsl->push_back(qsl->back() + static_cast<int32_t>(r.query_len));
    seq_lens.push_back(static_cast<int32_t>(r.seq_len));
  }
  ops::AttentionMetadata md;
  md.query_start_loc = Tensor::from_i32(*qsl, {num_reqs + 1});
  md.seq_lens = Tensor::from_i32(seq_lens, {num_reqs});
  md.block_table = Tensor::from_i32(table, {num_reqs, width});
  md.num_reqs = num_reqs;
  md.num_decode_tokens = 3;
  md.max_query_len = 33;
  md.max_seq_len = 40;
  return md;
}

struct MlaCase {
  int64_t heads, latent, rope, block_size;
};

std::string case_name(const MlaCase& c) {
  std::ostringstream os;
  os << "H" << c.heads << "_L" << c.latent << "_R" << c.rope << "_BS" << c.block_size;
  return os.str();
}

class MlaAttentionTest : public ::testing::TestWithParam<MlaCase> {};

// Rows written straight into a NaN-poisoned cache (no op involved); query and out are head slices of wider buffers;
// two padding tokens at the end must come out zero.
TEST_P(MlaAttentionTest, MatchesDenseCausalAttentionOverUnpagedRows) {
  const MlaCase c = GetParam();
  const int64_t row = c.latent + c.rope;
  std::mt19937 rng(static_cast<uint32_t>(c.heads * 31 + c.latent + c.block_size));
  const std::vector<Req>& reqs = request_mix();
  int64_t num_blocks = 0, width = 0;
  const std::vector<int32_t> table = make_block_table(reqs, c.block_size, rng, &num_blocks, &width);
  std::vector<std::vector<float>> rows(reqs.size());
  for (size_t r = 0; r < reqs.size(); ++r) rows[r] = random_floats(reqs[r].seq_len * row, static_cast<uint32_t>(rng()));
  for (size_t r = 0; r < reqs.size(); ++r) {
    if (reqs[r].share_from < 0) continue;
    const int64_t shared = std::min(reqs[r].shared_blocks * c.block_size, reqs[r].seq_len);
    std::copy_n(rows[reqs[r].share_from].begin(), shared * row, rows[r].begin());
  }
  Tensor cache = Tensor::empty({num_blocks, c.block_size, row}, DType::kF32);
  cache.fill(NAN);
  for (size_t r = 0; r < reqs.size(); ++r) {
    for (int64_t p = 0; p < reqs[r].seq_len; ++p) {
      const int64_t slot = table[r * width + p / c.block_size] * c.block_size + p % c.block_size;
      std::copy_n(rows[r].begin() + p * row, row, cache.data<float>() + slot * row);
    }
  }
  std::vector<int32_t> qsl;
  const ops::AttentionMetadata md = make_metadata(reqs, table, width, &qsl);
  const int64_t n = qsl.back() + 2;
  Tensor q_wide = random_tensor({n, c.heads + 1, row}, static_cast<uint32_t>(rng()));
  Tensor query = q_wide.slice(1, 1, c.heads + 1);
  Tensor out_wide = Tensor::empty({n, c.heads + 1, c.latent}, DType::kF32);
  out_wide.fill(NAN);
  Tensor out = out_wide.slice(1, 0, c.heads);
  const float scale = 0.7f / std::sqrt(static_cast<float>(row));
  ops::mla_attention(out, query, cache, md, scale);

  std::vector<double> want(static_cast<size_t>(n * c.heads * c.latent), 0.0);
  for (size_t r = 0; r < reqs.size(); ++r) {
    for (int64_t j = 0; j < reqs[r].query_len; ++j) {
      const int64_t t = qsl[r] + j, pos = reqs[r].seq_len - reqs[r].query_len + j;
      for (int64_t h = 0; h < c.heads; ++h) {
        std::vector<double> s(static_cast<size_t>(pos + 1));
        for (int64_t p = 0; p <= pos; ++p) {
          double dot = 0;
          for (int64_t i = 0; i < row; ++i) dot += at3(query, t, h, i) * rows[r][p * row + i];
          s[p] = dot * scale;
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& v : s) sum += (v = std::exp(v - mx));
        for (int64_t p = 0; p <= pos; ++p) {
          for (int64_t i = 0; i < c.latent; ++i)
            want[(t * c.heads + h) * c.latent + i] += s[p] / sum * rows[r][p * row + i];
        }
      }
    }
  }
  expect_close(out, want, 2e-6, 1e-5, case_name(c));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < c.latent; ++i) ASSERT_TRUE(std::isnan(at3(out_wide, t, c.heads, i))) << "head slot touched";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlaAttentionTest,
                         ::testing::Values(MlaCase{4, 64, 16, 16},  // the fixtures' L and R
                                           MlaCase{3, 32, 8, 5},    // odd heads and block size
                                           MlaCase{1, 16, 16, 1}),  // one head, one token per block
                         [](const auto& info) { return case_name(info.param); });

class MlaPipelineTest : public ::testing::TestWithParam<bool> {};

// The absorbed pipeline of model/layers/mla_attention (batched_linear with W_UK^T, mla_rotary_and_cache,
// mla_attention, batched_linear with W_UV) equals DeepSeek's attention as transformers writes it: every head builds
// keys [W_UK c, rot(k_pe)] and values W_UV c from the latent, then runs dense causal softmax attention. Cached
// tokens were written by an earlier call (a previous step); padding rows (slot -1) sit between the steps' tokens.
TEST_P(MlaPipelineTest, AbsorbedFormEqualsPerHeadAttention) {
  const bool interleaved = GetParam();
  const int64_t heads = 4, latent = 32, rope = 8, nope = 12, vdim = 10, block_size = 4;
  const double theta = 100.0;
  std::mt19937 rng(interleaved ? 7 : 8);
  std::vector<Req> reqs = {{1, 1}, {9, 1}, {11, 11}, {23, 5}, {6, 2}};
  int64_t num_blocks = 0, width = 0;
  const std::vector<int32_t> table = make_block_table(reqs, block_size, rng, &num_blocks, &width);
  Tensor cs = cos_sin_cache(64, rope, theta);
  Tensor w_uk = random_tensor({heads, nope, latent}, 21), w_uv = random_tensor({heads, vdim, latent}, 22);
  // W_UK^T per head [H, L, P], as the layer cuts it from kv_b_proj at load.
  Tensor w_uk_t = w_uk.transpose(1, 2).contiguous();
  // Every position's latent (already normalised) and raw rope key: [seq, L + R] per request.
  std::vector<std::vector<float>> kv(reqs.size());
  for (size_t r = 0; r < reqs.size(); ++r)
    kv[r] = random_floats(reqs[r].seq_len * (latent + rope), static_cast<uint32_t>(rng()));
  Tensor cache = Tensor::empty({num_blocks, block_size, latent + rope}, DType::kF32);
  cache.fill(NAN);
  const auto slot_of = [&](size_t r, int64_t p) {
    return int64_t{table[r * width + p / block_size]} * block_size + p % block_size;
  };
  // Runs mla_rotary_and_cache over the positions [lo(r), hi(r)) of every request, one padding row after each;
  // returns the rotated query rows' tensor q_full [T, H, L + R] with the rope part filled.
  const auto write_step = [&](bool history, const Tensor* q, Tensor* q_full) {
    std::vector<float> kv_rows;
    std::vector<int64_t> pos, slots;
    for (size_t r = 0; r < reqs.size(); ++r) {
      const int64_t start = reqs[r].seq_len - reqs[r].query_len;
      for (int64_t p = history ? 0 : start; p < (history ? start : reqs[r].seq_len); ++p) {
        kv_rows.insert(kv_rows.end(), kv[r].begin() + p * (latent + rope), kv[r].begin() + (p + 1) * (latent + rope));
        pos.push_back(p);
        slots.push_back(slot_of(r, p));
      }
      if (history) {
        kv_rows.insert(kv_rows.end(), latent + rope, 1e30f);
        pos.push_back(0);
        slots.push_back(-1);
      }
    }
    if (!history) {  // the step's two padding tokens at the end
      kv_rows.insert(kv_rows.end(), 2 * (latent + rope), 1e30f);
      pos.insert(pos.end(), {0, 0});
      slots.insert(slots.end(), {-1, -1});
    }
    const int64_t n = static_cast<int64_t>(pos.size());
    Tensor kvt = Tensor::from_f32(kv_rows, {n, latent + rope});
    Tensor k_pe = kvt.slice(1, latent, latent + rope);
    Tensor scratch = random_tensor({n, heads, rope}, 5);
    Tensor q_pe = history ? scratch : q->slice(2, nope, nope + rope);
    Tensor q_out = history ? scratch : q_full->slice(2, latent, latent + rope);
    ops::mla_rotary_and_cache(Tensor::from_i64(pos, {n}), q_pe, q_out, k_pe, kvt.slice(1, 0, latent), cs, interleaved,
                              cache, Tensor::from_i64(slots, {n}));
  };
  write_step(true, nullptr, nullptr);

  std::vector<int32_t> qsl;
  const ops::AttentionMetadata md = make_metadata(reqs, table, width, &qsl);
  const int64_t n = qsl.back() + 2;
  Tensor q = random_tensor({n, heads, nope + rope}, 23);
  Tensor q_full = Tensor::empty({n, heads, latent + rope}, DType::kF32);
  q_full.fill(NAN);
  Tensor q_lat = q_full.slice(2, 0, latent).transpose(0, 1);
  ops::batched_linear(q_lat, q.slice(2, 0, nope).transpose(0, 1), w_uk_t);
  write_step(false, &q, &q_full);
  const double scale = 1.0 / std::sqrt(static_cast<double>(nope + rope));
  Tensor o_lat = Tensor::empty({n, heads, latent}, DType::kF32);
  o_lat.fill(NAN);
  ops::mla_attention(o_lat, q_full, cache, md, static_cast<float>(scale));
  Tensor o = Tensor::empty({n, heads, vdim}, DType::kF32);
  o.fill(NAN);
  Tensor o_heads = o.transpose(0, 1);
  ops::batched_linear(o_heads, o_lat.transpose(0, 1), w_uv);

  const std::vector<double> uk = to_doubles(w_uk), uv = to_doubles(w_uv);
  std::vector<double> want(static_cast<size_t>(n * heads * vdim), 0.0);
  for (size_t r = 0; r < reqs.size(); ++r) {
    const auto latent_at = [&](int64_t p, int64_t i) { return double{kv[r][p * (latent + rope) + i]}; };
    for (int64_t j = 0; j < reqs[r].query_len; ++j) {
      const int64_t t = qsl[r] + j, pos = reqs[r].seq_len - reqs[r].query_len + j;
      for (int64_t h = 0; h < heads; ++h) {
        std::vector<double> q_rot(rope);
        for (int64_t i = 0; i < rope; ++i) q_rot[i] = at3(q, t, h, nope + i);
        q_rot = hf_rotate(q_rot, pos, theta, interleaved);
        std::vector<double> s(static_cast<size_t>(pos + 1));
        for (int64_t p = 0; p <= pos; ++p) {
          std::vector<double> k_rot(rope);
          for (int64_t i = 0; i < rope; ++i) k_rot[i] = latent_at(p, latent + i);
          k_rot = hf_rotate(k_rot, p, theta, interleaved);
          double dot = 0;
          for (int64_t d = 0; d < nope; ++d) {
            double k_nope = 0;
            for (int64_t i = 0; i < latent; ++i) k_nope += uk[(h * nope + d) * latent + i] * latent_at(p, i);
            dot += at3(q, t, h, d) * k_nope;
          }
          for (int64_t i = 0; i < rope; ++i) dot += q_rot[i] * k_rot[i];
          s[p] = dot * scale;
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& v : s) sum += (v = std::exp(v - mx));
        for (int64_t p = 0; p <= pos; ++p) {
          for (int64_t d = 0; d < vdim; ++d) {
            double v = 0;
            for (int64_t i = 0; i < latent; ++i) v += uv[(h * vdim + d) * latent + i] * latent_at(p, i);
            want[(t * heads + h) * vdim + d] += s[p] / sum * v;
          }
        }
      }
    }
  }
  expect_close(o, want, 2e-5, 1e-4, interleaved ? "interleaved" : "rotate-half");
}

INSTANTIATE_TEST_SUITE_P(Layouts, MlaPipelineTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Interleaved" : "RotateHalf"; });

TEST(MlaDeathTest, BadArgumentsAreNamed) {
  Tensor cache = Tensor::zeros({2, 4, 24}, DType::kF32);
  ops::AttentionMetadata md;
  md.query_start_loc = Tensor::from_i32({0, 2}, {2});
  md.seq_lens = Tensor::from_i32({6}, {1});
  md.block_table = Tensor::from_i32({0, 2}, {1, 2});  // block 2 does not exist
  md.num_reqs = 1;
  Tensor query = random_tensor({2, 2, 24}, 1), out = Tensor::empty({2, 2, 16}, DType::kF32);
  EXPECT_DEATH(ops::mla_attention(out, query, cache, md, 1.f), "mla_attention: request 0 block 1 = 2 outside");
  Tensor narrow = random_tensor({2, 2, 20}, 2);
  EXPECT_DEATH(ops::mla_attention(out, narrow, cache, md, 1.f), "mla_attention: query .* vs latent_cache");
  Tensor wide_out = Tensor::empty({2, 2, 24}, DType::kF32);
  EXPECT_DEATH(ops::mla_attention(wide_out, query, cache, md, 1.f), "mla_attention: out .* \\(L\\)");

  Tensor x = random_tensor({3, 5, 8}, 3), w = random_tensor({3, 6, 8}, 4), w_bad = random_tensor({2, 6, 8}, 5);
  Tensor y = Tensor::empty({3, 5, 6}, DType::kF32);
  EXPECT_DEATH(ops::batched_linear(y, x, w_bad), "batched_linear: x .* vs weight");
  Tensor same = x.slice(2, 0, 6);
  EXPECT_DEATH(ops::batched_linear(same, x, w), "batched_linear: out .* must not overlap x");

  Tensor cs = cos_sin_cache(4, 8, 10.0), q_pe = random_tensor({1, 2, 8}, 6), k_pe = random_tensor({1, 8}, 7);
  Tensor kv_c = random_tensor({1, 16}, 8), latent_cache = Tensor::zeros({2, 4, 24}, DType::kF32);
  EXPECT_DEATH(ops::mla_rotary_and_cache(Tensor::from_i64({4}, {1}), q_pe, q_pe, k_pe, kv_c, cs, 1, latent_cache,
                                         Tensor::from_i64({0}, {1})),
               "mla_rotary_and_cache: position 4");
  EXPECT_DEATH(ops::mla_rotary_and_cache(Tensor::from_i64({1}, {1}), q_pe, q_pe, k_pe, kv_c, cs, 1, latent_cache,
                                         Tensor::from_i64({8}, {1})),
               "mla_rotary_and_cache: slot 8");
  Tensor kv_c_bad = random_tensor({1, 15}, 9);
  EXPECT_DEATH(ops::mla_rotary_and_cache(Tensor::from_i64({1}, {1}), q_pe, q_pe, k_pe, kv_c_bad, cs, 1, latent_cache,
                                         Tensor::from_i64({0}, {1})),
               "mla_rotary_and_cache: latent_cache .* for kv_c");
}

}  // namespace
}  // namespace llmserve

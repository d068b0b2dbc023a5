// Elementwise and normalisation ops (embedding, rms_norm, fused_add_rms_norm, silu_and_mul, add, rotary, q/k norm +
// rotary + cache) against double-precision references on seeded random inputs of several shapes and strided views.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/ops.h"
#include "test_util.h"

namespace llmserve {
namespace {

using testing::expect_close;
using testing::random_tensor;
using testing::to_doubles;

TEST(Embedding, MatchesTableRowsForF32AndBf16Tables) {
  for (DType table_dtype : {DType::kF32, DType::kBF16}) {
    Tensor table = random_tensor({50, 24}, 1, table_dtype);
    std::vector<int32_t> id_values = {3, 0, 49, 3, 17, 25, 1};
    Tensor ids = Tensor::from_i32(id_values, {7});
    Tensor out = Tensor::empty({7, 24}, DType::kF32);
    out.fill(NAN);
    ops::embedding(out, ids, table);
    std::vector<double> t = to_doubles(table), want;
    for (int32_t id : id_values) want.insert(want.end(), t.begin() + id * 24, t.begin() + (id + 1) * 24);
    expect_close(out, want, 0, 0, std::string(dtype_name(table_dtype)));
  }
}

// A vocabulary-parallel rank's lookup: its rows for its ids, zeros for the others; the ranks' outputs sum to the
// full lookup.
TEST(MaskedEmbedding, OwnRowsOrZerosAndRanksSumToTheFullLookup) {
  for (DType table_dtype : {DType::kF32, DType::kBF16}) {
    Tensor table = random_tensor({50, 24}, 2, table_dtype);
    std::vector<int32_t> id_values = {3, 0, 49, 3, 17, 25, 1, 26};
    Tensor ids = Tensor::from_i32(id_values, {8});
    std::vector<double> t = to_doubles(table), sum(8 * 24, 0.0);
    for (int64_t start : {0, 13, 26, 39}) {
      const int64_t rows = std::min<int64_t>(13, 50 - start);
      Tensor out = Tensor::empty({8, 24}, DType::kF32);
      out.fill(NAN);
      ops::masked_embedding(out, ids, table.slice(0, start, start + rows), start);
      std::vector<double> want;
      for (int32_t id : id_values) {
        const bool mine = id >= start && id < start + rows;
        for (int64_t j = 0; j < 24; ++j) want.push_back(mine ? t[id * 24 + j] : 0.0);
      }
      expect_close(out, want, 0, 0, std::string(dtype_name(table_dtype)) + " start " + std::to_string(start));
      const std::vector<double> got = to_doubles(out);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += got[i];
    }
    std::vector<double> full;
    for (int32_t id : id_values) full.insert(full.end(), t.begin() + id * 24, t.begin() + (id + 1) * 24);
    for (size_t i = 0; i < sum.size(); ++i) ASSERT_EQ(sum[i], full[i]) << i;
  }
}

// out = x / sqrt(mean(x^2) + eps) * w, in double.
std::vector<double> rms_norm_ref(const std::vector<double>& x, const std::vector<double>& w, int64_t n, int64_t d,
                                 double eps) {
  std::vector<double> out(x.size());
  for (int64_t i = 0; i < n; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += x[i * d + j] * x[i * d + j];
    const double r = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t j = 0; j < d; ++j) out[i * d + j] = x[i * d + j] * r * w[j];
  }
  return out;
}

TEST(RmsNorm, MatchesReferenceOnShapesAndWeightDtypes) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 16}, {7, 768}, {33, 100}, {130, 64}};
  uint32_t seed = 10;
  for (auto [n, d] : shapes) {
    for (DType wd : {DType::kF32, DType::kBF16}) {
      Tensor x = random_tensor({n, d}, seed++, DType::kF32, -3.f, 3.f);
      Tensor w = random_tensor({d}, seed++, wd, 0.5f, 1.5f);
      std::vector<double> want = rms_norm_ref(to_doubles(x), to_doubles(w), n, d, 1e-5);
      Tensor out = Tensor::empty({n, d}, DType::kF32);
      out.fill(NAN);
      ops::rms_norm(out, x, w, 1e-5f);
      expect_close(out, want, 1e-5, 1e-5, "rms_norm " + std::to_string(n) + "x" + std::to_string(d));
      ops::rms_norm(x, x, w, 1e-5f);  // in place
      expect_close(x, want, 1e-5, 1e-5, "rms_norm in place");
    }
  }
}

TEST(RmsNorm, ReadsRowStridedInput) {
  Tensor wide = random_tensor({9, 96}, 3);
  Tensor x = wide.slice(1, 32, 96);  // [9, 64] with row stride 96
  Tensor w = random_tensor({64}, 4, DType::kF32, 0.5f, 1.5f);
  std::vector<double> want = rms_norm_ref(to_doubles(x), to_doubles(w), 9, 64, 1e-6);
  Tensor out = Tensor::empty({9, 64}, DType::kF32);
  ops::rms_norm(out, x, w, 1e-6f);
  expect_close(out, want, 1e-5, 1e-5);
}

TEST(RmsNorm, PerHeadRowsOfAFusedQkvView) {
  // [T, H, D] heads of a [T, (H + 2) * D] fused output (row stride (H + 2) * D): each head normalised as its own
  // row, bit for bit as the 2-D op on a contiguous copy; the columns past the heads untouched.
  constexpr int64_t T = 5, H = 3, D = 32, W = (H + 2) * D;
  Tensor qkv = random_tensor({T, W}, 7, DType::kF32, -2.f, 2.f);
  const std::vector<double> before = to_doubles(qkv);
  Tensor heads = qkv.as_strided({T, H, D}, {W, D, 1});
  Tensor w = random_tensor({D}, 8, DType::kF32, 0.5f, 1.5f);
  Tensor rows = Tensor::empty({T * H, D}, DType::kF32), want = Tensor::empty({T * H, D}, DType::kF32);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < H * D; ++i) rows.data<float>()[t * H * D + i] = qkv.data<float>()[t * W + i];
  }
  ops::rms_norm(want, rows, w, 1e-6f);
  Tensor out = Tensor::empty({T, H, D}, DType::kF32);
  ops::rms_norm(out, heads, w, 1e-6f);
  EXPECT_EQ(std::memcmp(out.data<float>(), want.data<float>(), want.nbytes()), 0);
  ops::rms_norm(heads, heads, w, 1e-6f);  // in place, as the attention layer runs it
  const std::vector<double> after = to_doubles(qkv);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < W; ++i) {
      const double expect = i < H * D ? static_cast<double>(want.data<float>()[t * H * D + i]) : before[t * W + i];
      ASSERT_EQ(after[t * W + i], expect) << "token " << t << " column " << i;
    }
  }
}

TEST(FusedAddRmsNorm, UpdatesResidualAndNormalises) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 16}, {5, 768}, {40, 96}};
  uint32_t seed = 100;
  for (auto [n, d] : shapes) {
    for (DType wd : {DType::kF32, DType::kBF16}) {
      Tensor x = random_tensor({n, d}, seed++, DType::kF32, -2.f, 2.f);
      Tensor res = random_tensor({n, d}, seed++, DType::kF32, -2.f, 2.f);
      Tensor w = random_tensor({d}, seed++, wd, 0.5f, 1.5f);
      std::vector<double> xs = to_doubles(x), rs = to_doubles(res);
      for (size_t i = 0; i < rs.size(); ++i) rs[i] += xs[i];
      std::vector<double> want = rms_norm_ref(rs, to_doubles(w), n, d, 1e-6);
      ops::fused_add_rms_norm(x, res, w, 1e-6f);
      expect_close(res, rs, 1e-6, 1e-6, "residual");
      expect_close(x, want, 1e-5, 1e-5, "x");
    }
  }
}

TEST(SiluAndMul, MatchesReference) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 8}, {6, 2048}, {17, 100}};
  uint32_t seed = 200;
  for (auto [n, d] : shapes) {
    Tensor x = random_tensor({n, 2 * d}, seed++, DType::kF32, -8.f, 8.f);
    std::vector<double> xs = to_doubles(x), want(static_cast<size_t>(n * d));
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < d; ++j) {
        const double g = xs[i * 2 * d + j], u = xs[i * 2 * d + d + j];
        want[i * d + j] = g / (1.0 + std::exp(-g)) * u;
      }
    }
    Tensor out = Tensor::empty({n, d}, DType::kF32);
    out.fill(NAN);
    ops::silu_and_mul(out, x);
    expect_close(out, want, 1e-6, 1e-5, "silu_and_mul d=" + std::to_string(d));
  }
}

TEST(Add, AddsInPlace) {
  Tensor a = random_tensor({13, 77}, 300), b = random_tensor({13, 77}, 301);
  std::vector<double> want = to_doubles(a), bs = to_doubles(b);
  for (size_t i = 0; i < want.size(); ++i) want[i] += bs[i];
  ops::add(a, b);
  expect_close(a, want, 1e-7, 1e-7);
}

// cos_sin_cache [max_pos, head_dim] for RoPE base theta (cos in the first half, sin in the second).
Tensor make_cos_sin_cache(int64_t max_pos, int64_t head_dim, double theta) {
  std::vector<float> v(static_cast<size_t>(max_pos * head_dim));
  const int64_t half = head_dim / 2;
  for (int64_t p = 0; p < max_pos; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = p * std::pow(theta, -2.0 * i / head_dim);
      v[p * head_dim + i] = static_cast<float>(std::cos(angle));
      v[p * head_dim + half + i] = static_cast<float>(std::sin(angle));
    }
  }
  return Tensor::from_f32(v, {max_pos, head_dim});
}

// Rotate-half RoPE of a [n, heads * head_dim] block in double, angles computed directly from theta.
std::vector<double> rope_ref(std::vector<double> x, const std::vector<int64_t>& pos, int64_t heads, int64_t head_dim,
                             double theta) {
  const int64_t half = head_dim / 2;
  for (size_t t = 0; t < pos.size(); ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      double* v = x.data() + (t * heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos[t] * std::pow(theta, -2.0 * i / head_dim);
        const double a = v[i], b = v[i + half];
        v[i] = a * std::cos(angle) - b * std::sin(angle);
        v[i + half] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
  }
  return x;
}

TEST(Rotary, RotatesQueryAndKeySlicesOfFusedQkv) {
  struct Case {
    int64_t heads, kv_heads, head_dim;
  };
  const Case cases[] = {{4, 4, 64}, {8, 2, 128}, {3, 1, 16}};
  const double theta = 10000.0;
  uint32_t seed = 400;
  for (const Case& c : cases) {
    const std::vector<int64_t> pos = {0, 1, 5, 99, 42, 7, 250};
    const int64_t n = static_cast<int64_t>(pos.size());
    const int64_t q_width = c.heads * c.head_dim, kv_width = c.kv_heads * c.head_dim;
    Tensor qkv = random_tensor({n, q_width + 2 * kv_width}, seed++);
    std::vector<double> before = to_doubles(qkv);
    Tensor q = qkv.slice(1, 0, q_width), k = qkv.slice(1, q_width, q_width + kv_width);
    Tensor v = qkv.slice(1, q_width + kv_width, q_width + 2 * kv_width);
    std::vector<double> want_q = rope_ref(to_doubles(q), pos, c.heads, c.head_dim, theta);
    std::vector<double> want_k = rope_ref(to_doubles(k), pos, c.kv_heads, c.head_dim, theta);
    std::vector<double> want_v = to_doubles(v);
    Tensor cache = make_cos_sin_cache(256, c.head_dim, theta);
    ops::rotary_embedding(Tensor::from_i64(pos, {n}), q, k, c.head_dim, cache);
    const std::string what = "head_dim " + std::to_string(c.head_dim);
    expect_close(q, want_q, 2e-5, 2e-5, what + " q");
    expect_close(k, want_k, 2e-5, 2e-5, what + " k");
    expect_close(v, want_v, 0, 0, what + " v untouched");
  }
}

TEST(Rotary, AcceptsThreeDimensionalHeads) {
  Tensor q = random_tensor({3, 2, 32}, 500), k = random_tensor({3, 1, 32}, 501);
  const std::vector<int64_t> pos = {4, 0, 9};
  std::vector<double> want_q = rope_ref(to_doubles(q), pos, 2, 32, 500000.0);
  std::vector<double> want_k = rope_ref(to_doubles(k), pos, 1, 32, 500000.0);
  ops::rotary_embedding(Tensor::from_i64(pos, {3}), q, k, 32, make_cos_sin_cache(16, 32, 500000.0));
  expect_close(q, want_q, 2e-5, 2e-5, "q");
  expect_close(k, want_k, 2e-5, 2e-5, "k");
}

// Qwen3's attention prologue: per-head RMSNorm of q and k (each with its own weight), rotate-half RoPE, rotated k and
// v into their cache slots (a padding token, slot -1, writes nothing; other slots keep their contents).
TEST(QkNormRotaryAndCache, NormsRotatesAndCachesEachHead) {
  const int64_t heads = 4, kv_heads = 2, head_dim = 32, block_size = 4, num_blocks = 3;
  const std::vector<int64_t> pos = {3, 0, 17, 250, 9};
  const std::vector<int64_t> slots = {5, 0, -1, 11, 6};
  const int64_t n = static_cast<int64_t>(pos.size()), q_width = heads * head_dim, kv_width = kv_heads * head_dim;
  const double theta = 1000000.0, eps = 1e-6;
  Tensor qkv = random_tensor({n, q_width + 2 * kv_width}, 600, DType::kF32, -3.f, 3.f);
  Tensor q_weight = random_tensor({head_dim}, 601, DType::kF32, 0.5f, 1.5f);
  Tensor k_weight = random_tensor({head_dim}, 602, DType::kBF16, 0.5f, 1.5f);
  auto view = [&](int64_t col, int64_t h) {
    return qkv.slice(1, col, col + h * head_dim).as_strided({n, h, head_dim}, {qkv.stride(0), head_dim, 1});
  };
  Tensor q = view(0, heads), k = view(q_width, kv_heads), v = view(q_width + kv_width, kv_heads);
  auto normed = [&](std::vector<double> x, const Tensor& weight) {
    const std::vector<double> w = to_doubles(weight);
    for (size_t r = 0; r < x.size() / head_dim; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < head_dim; ++i) ss += x[r * head_dim + i] * x[r * head_dim + i];
      const double scale = 1.0 / std::sqrt(ss / head_dim + eps);
      for (int64_t i = 0; i < head_dim; ++i) x[r * head_dim + i] *= scale * w[i];
    }
    return x;
  };
  const std::vector<double> want_q = rope_ref(normed(to_doubles(q), q_weight), pos, heads, head_dim, theta);
  const std::vector<double> want_k = rope_ref(normed(to_doubles(k), k_weight), pos, kv_heads, head_dim, theta);
  const std::vector<double> v_before = to_doubles(v);
  Tensor key_cache = random_tensor({num_blocks, block_size, kv_heads, head_dim}, 603);
  Tensor value_cache = random_tensor({num_blocks, block_size, kv_heads, head_dim}, 604);
  std::vector<double> want_kc = to_doubles(key_cache), want_vc = to_doubles(value_cache);
  for (int64_t t = 0; t < n; ++t) {
    if (slots[t] < 0) continue;
    std::copy_n(want_k.begin() + t * kv_width, kv_width, want_kc.begin() + slots[t] * kv_width);
    std::copy_n(v_before.begin() + t * kv_width, kv_width, want_vc.begin() + slots[t] * kv_width);
  }
  ops::qk_norm_rotary_embedding_and_cache(
      Tensor::from_i64(pos, {n}), q, k, v, head_dim, make_cos_sin_cache(256, head_dim, theta), q_weight, k_weight,
      static_cast<float>(eps), key_cache, value_cache, Tensor::from_i64(slots, {n}));
  expect_close(q, want_q, 2e-5, 2e-5, "q");
  expect_close(k, want_k, 2e-5, 2e-5, "k");
  expect_close(v, v_before, 0, 0, "v untouched");
  expect_close(key_cache, want_kc, 2e-5, 2e-5, "key cache");
  expect_close(value_cache, want_vc, 0, 0, "value cache");
}

}  // namespace
}  // namespace llmserve

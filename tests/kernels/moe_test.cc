// The mixture-of-experts ops on CPU against plain references written here: routing (softmax / sigmoid, ties to the
// lower expert, renormalisation, NaN), the stable grouping with padding, the grouped GEMM with and without the token
// gather, the combine with a gated shared expert, and the whole chain against a per-token dense loop.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <set>
#include <vector>

#include "kernels/ops.h"
#include "test_util.h"

namespace llmserve {
namespace {

using testing::expect_close;
using testing::random_tensor;

struct Routed {
  Tensor weights, ids;
};

Routed route(const Tensor& logits, int64_t k, int64_t scoring, int64_t renormalize) {
  Routed r{Tensor::empty({logits.size(0), k}, DType::kF32), Tensor::empty({logits.size(0), k}, DType::kI32)};
  ops::moe_route(r.weights, r.ids, logits, scoring, renormalize);
  return r;
}

// The reference router: double-precision scores, a stable sort by descending score (equal scores keep ascending
// expert order), NaN last.
void reference_route(const std::vector<float>& logits, int64_t k, int64_t scoring, bool renormalize,
                     std::vector<int>* ids, std::vector<double>* weights) {
  const size_t n = logits.size();
  std::vector<double> s(n);
  if (scoring == ops::kMoeScoringSoftmax) {
    double max = -INFINITY, sum = 0;
    for (float l : logits) max = std::max(max, static_cast<double>(l));
    for (size_t e = 0; e < n; ++e) sum += s[e] = std::exp(logits[e] - max);
    for (double& v : s) v /= sum;
  } else {
    for (size_t e = 0; e < n; ++e) s[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e])));
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (std::isnan(s[a]) || std::isnan(s[b])) return !std::isnan(s[a]) && std::isnan(s[b]);
    return s[a] > s[b];
  });
  ids->assign(order.begin(), order.begin() + k);
  weights->clear();
  double total = 0;
  for (int64_t j = 0; j < k; ++j) total += s[order[j]];
  for (int64_t j = 0; j < k; ++j) weights->push_back(renormalize ? s[order[j]] / total : s[order[j]]);
}

TEST(MoeRoute, MatchesReferenceOnRandomLogits) {
  for (int64_t scoring : {ops::kMoeScoringSoftmax, ops::kMoeScoringSigmoid}) {
    for (int64_t renorm : {0, 1}) {
      for (auto [E, k] : {std::pair<int64_t, int64_t>{4, 2}, {60, 4}, {128, 8}, {8, 8}}) {
        const int64_t T = 23;
        Tensor logits = random_tensor({T, E}, static_cast<uint32_t>(E + k + 10 * scoring), DType::kF32, -4.f, 4.f);
        const Routed r = route(logits, k, scoring, renorm);
        for (int64_t t = 0; t < T; ++t) {
          std::vector<float> row(logits.data<float>() + t * E, logits.data<float>() + (t + 1) * E);
          std::vector<int> ids;
          std::vector<double> w;
          reference_route(row, k, scoring, renorm != 0, &ids, &w);
          for (int64_t j = 0; j < k; ++j) {
            EXPECT_EQ(r.ids.data<int32_t>()[t * k + j], ids[j]) << "E " << E << " k " << k << " t " << t << " j " << j;
            EXPECT_NEAR(r.weights.data<float>()[t * k + j], w[j], 1e-6) << "E " << E << " t " << t << " j " << j;
          }
        }
      }
    }
  }
}

// Equal logits give equal scores: the lower expert index wins (torch.topk's order), for both scorings.
TEST(MoeRoute, TiesGoToTheLowerExpert) {
  Tensor logits = Tensor::from_f32({1.f, 3.f, 3.f, 0.f, 3.f, -2.f, /**/ 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f}, {2, 6});
  for (int64_t scoring : {ops::kMoeScoringSoftmax, ops::kMoeScoringSigmoid}) {
    const Routed r = route(logits, 3, scoring, 0);
    const std::vector<int32_t> want = {1, 2, 4, 0, 1, 2};
    EXPECT_EQ(std::vector<int32_t>(r.ids.data<int32_t>(), r.ids.data<int32_t>() + 6), want) << "scoring " << scoring;
    EXPECT_EQ(r.weights.data<float>()[0], r.weights.data<float>()[1]);
    EXPECT_EQ(r.weights.data<float>()[3], r.weights.data<float>()[5]);
  }
}

TEST(MoeRoute, RenormalisationEdgeCases) {
  // k == E: renormalised softmax weights are the probabilities again; they sum to 1 either way.
  Tensor logits = random_tensor({5, 6}, 3, DType::kF32, -3.f, 3.f);
  const Routed all = route(logits, 6, ops::kMoeScoringSoftmax, 1), raw = route(logits, 6, ops::kMoeScoringSoftmax, 0);
  for (int64_t t = 0; t < 5; ++t) {
    double sum = 0;
    for (int64_t j = 0; j < 6; ++j) {
      sum += all.weights.data<float>()[t * 6 + j];
      EXPECT_NEAR(all.weights.data<float>()[t * 6 + j], raw.weights.data<float>()[t * 6 + j], 1e-6);
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
  // k == 1 renormalised: weight exactly 1. Sigmoid renormalised: the k scores over their sum.
  const Routed one = route(logits, 1, ops::kMoeScoringSoftmax, 1);
  for (int64_t t = 0; t < 5; ++t) EXPECT_EQ(one.weights.data<float>()[t], 1.0f);
  const Routed sig = route(logits, 2, ops::kMoeScoringSigmoid, 1);
  for (int64_t t = 0; t < 5; ++t) {
    EXPECT_NEAR(sig.weights.data<float>()[2 * t] + sig.weights.data<float>()[2 * t + 1], 1.0, 1e-6);
  }
  // Without renormalisation the top-k softmax weights sum to less than 1 (Qwen2-MoE's norm_topk_prob false).
  const Routed two = route(logits, 2, ops::kMoeScoringSoftmax, 0);
  for (int64_t t = 0; t < 5; ++t) EXPECT_LT(two.weights.data<float>()[2 * t] + two.weights.data<float>()[2 * t + 1], 1);
  // NaN logits rank last under sigmoid (softmax of a row with a NaN is all NaN: then ids in index order).
  Tensor nan_logits = Tensor::from_f32({NAN, 1.f, NAN, 2.f}, {1, 4});
  const Routed n = route(nan_logits, 3, ops::kMoeScoringSigmoid, 0);
  EXPECT_EQ(n.ids.data<int32_t>()[0], 3);
  EXPECT_EQ(n.ids.data<int32_t>()[1], 1);
  EXPECT_EQ(n.ids.data<int32_t>()[2], 0);
}

// DeepSeek-V3's router as transformers writes it, in double: sigmoid scores, bias-corrected choice values, group
// scores = sum of each group's top two, the best topk_groups groups kept (stable order), the others' experts at
// -inf, the top-k choice values (stable order), weights = scores / (sum + 1e-20) * scale.
void reference_route_grouped(const std::vector<float>& logits, const std::vector<float>& bias, int64_t k,
                             int64_t groups, int64_t topk_groups, bool renormalize, double scale, std::vector<int>* ids,
                             std::vector<double>* weights) {
  const int64_t n = static_cast<int64_t>(logits.size()), size = n / groups;
  std::vector<double> s(n), c(n), g(groups);
  for (int64_t e = 0; e < n; ++e) {
    s[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e])));
    c[e] = s[e] + bias[e];
  }
  for (int64_t i = 0; i < groups; ++i) {
    std::vector<double> v(c.begin() + i * size, c.begin() + (i + 1) * size);
    std::sort(v.begin(), v.end(), std::greater<double>());
    g[i] = v[0] + v[1];
  }
  std::vector<int> go(groups);
  std::iota(go.begin(), go.end(), 0);
  std::stable_sort(go.begin(), go.end(), [&](int a, int b) { return g[a] > g[b]; });
  std::vector<double> masked(n, -INFINITY);
  for (int64_t i = 0; i < topk_groups; ++i) {
    for (int64_t e = go[i] * size; e < (go[i] + 1) * size; ++e) masked[e] = c[e];
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return masked[a] > masked[b]; });
  ids->assign(order.begin(), order.begin() + k);
  double total = 0;
  for (int64_t j = 0; j < k; ++j) total += s[order[j]];
  weights->clear();
  for (int64_t j = 0; j < k; ++j)
    weights->push_back((renormalize ? s[order[j]] / (total + 1e-20) : s[order[j]]) * scale);
}

TEST(MoeRouteGrouped, MatchesTransformersRouterWrittenAsLoops) {
  struct Shape3 {
    int64_t E, k, groups, topk_groups;
  };
  for (const Shape3& sh : {Shape3{256, 8, 8, 4}, Shape3{16, 4, 4, 2}, Shape3{8, 2, 4, 1}, Shape3{12, 6, 3, 3}}) {
    for (int64_t renorm : {0, 1}) {
      const int64_t T = 17;
      Tensor logits = random_tensor({T, sh.E}, static_cast<uint32_t>(sh.E + sh.k), DType::kF32, -4.f, 4.f);
      // Biases large enough to reorder groups (DeepSeek's e_score_correction_bias), some negative.
      Tensor bias = random_tensor({sh.E}, 77, DType::kF32, -0.5f, 0.5f);
      Tensor w = Tensor::empty({T, sh.k}, DType::kF32), ids = Tensor::empty({T, sh.k}, DType::kI32);
      ops::moe_route_grouped(w, ids, logits, bias, sh.groups, sh.topk_groups, renorm, 2.5f);
      const std::vector<float> b(bias.data<float>(), bias.data<float>() + sh.E);
      for (int64_t t = 0; t < T; ++t) {
        std::vector<float> row(logits.data<float>() + t * sh.E, logits.data<float>() + (t + 1) * sh.E);
        std::vector<int> want_ids;
        std::vector<double> want_w;
        reference_route_grouped(row, b, sh.k, sh.groups, sh.topk_groups, renorm != 0, 2.5, &want_ids, &want_w);
        for (int64_t j = 0; j < sh.k; ++j) {
          EXPECT_EQ(ids.data<int32_t>()[t * sh.k + j], want_ids[j]) << "E " << sh.E << " t " << t << " j " << j;
          EXPECT_NEAR(w.data<float>()[t * sh.k + j], want_w[j], 1e-5) << "E " << sh.E << " t " << t << " j " << j;
        }
      }
    }
  }
}

// Ties: equal group scores keep the lower group; equal choice values the lower expert. A dropped group's expert
// never wins, even with the best score of all.
TEST(MoeRouteGrouped, TiesAndDroppedGroups) {
  // 4 groups of 2; group 3 holds the single best expert (7) but its pair sums lowest; groups 0 and 1 tie.
  Tensor logits = Tensor::from_f32({1.f, 1.f, 1.f, 1.f, 0.5f, 0.5f, -6.f, 5.f}, {1, 8});
  Tensor bias = Tensor::zeros({8}, DType::kF32);
  Tensor w = Tensor::empty({1, 3}, DType::kF32), ids = Tensor::empty({1, 3}, DType::kI32);
  ops::moe_route_grouped(w, ids, logits, bias, 4, 2, 1, 1.0f);
  EXPECT_EQ(std::vector<int32_t>(ids.data<int32_t>(), ids.data<int32_t>() + 3), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_NEAR(w.data<float>()[0] + w.data<float>()[1] + w.data<float>()[2], 1.0, 1e-6);
  // One group kept: of the tied groups 0 and 1, group 0.
  Tensor w2 = Tensor::empty({1, 2}, DType::kF32), ids2 = Tensor::empty({1, 2}, DType::kI32);
  ops::moe_route_grouped(w2, ids2, logits, bias, 4, 1, 0, 1.0f);
  EXPECT_EQ(std::vector<int32_t>(ids2.data<int32_t>(), ids2.data<int32_t>() + 2), (std::vector<int32_t>{0, 1}));
}

struct Aligned {
  Tensor sorted_pairs, pair_rows, expert_offsets;
  Tensor experts_touched;  // [1] i64, started at kTouchedStart
};

constexpr int64_t kTouchedStart = 1000;  // moe_align adds to the count, it does not set it

Aligned align(const Tensor& ids, int64_t num_experts, int64_t block, int64_t extra_rows = 0) {
  const int64_t num_pairs = ids.numel();
  Aligned a{Tensor::empty({ops::moe_align_capacity(num_pairs, num_experts, block) + extra_rows}, DType::kI32),
            Tensor::empty({num_pairs}, DType::kI32), Tensor::empty({num_experts + 1}, DType::kI32),
            Tensor::from_i64({kTouchedStart}, {1})};
  std::fill(a.sorted_pairs.data<int32_t>(), a.sorted_pairs.data<int32_t>() + a.sorted_pairs.numel(), 12345);
  ops::moe_align(a.sorted_pairs, a.pair_rows, a.expert_offsets, a.experts_touched, ids, block);
  return a;
}

Tensor random_ids(int64_t T, int64_t k, int64_t E, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> all(static_cast<size_t>(E));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    ids.insert(ids.end(), all.begin(), all.begin() + k);  // distinct experts per token, as a router gives
  }
  return Tensor::from_i32(ids, {T, k});
}

TEST(MoeAlign, GroupsStablyAndPadsToTheBlock) {
  for (int64_t block : {1, 4, 64}) {
    const int64_t T = 37, k = 3, E = 7;
    Tensor ids = random_ids(T, k, E, 11);
    const Aligned a = align(ids, E, block, /*extra_rows=*/5);
    const int32_t* off = a.expert_offsets.data<int32_t>();
    const int32_t* sorted = a.sorted_pairs.data<int32_t>();
    EXPECT_EQ(off[0], 0);
    for (int64_t e = 0; e < E; ++e) {
      std::vector<int32_t> want;
      for (int64_t p = 0; p < T * k; ++p) {
        if (ids.data<int32_t>()[p] == e) want.push_back(static_cast<int32_t>(p));
      }
      const int64_t padded = (static_cast<int64_t>(want.size()) + block - 1) / block * block;
      ASSERT_EQ(off[e + 1] - off[e], padded) << "expert " << e << " block " << block;
      for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(sorted[off[e] + i], want[i]) << "expert " << e;
      for (int64_t r = off[e] + static_cast<int64_t>(want.size()); r < off[e + 1]; ++r) EXPECT_EQ(sorted[r], -1);
    }
    for (int64_t r = off[E]; r < a.sorted_pairs.numel(); ++r) EXPECT_EQ(sorted[r], 12345) << "row past the groups";
    for (int64_t p = 0; p < T * k; ++p) EXPECT_EQ(sorted[a.pair_rows.data<int32_t>()[p]], p);
    const std::set<int32_t> distinct(ids.data<int32_t>(), ids.data<int32_t>() + T * k);
    EXPECT_EQ(a.experts_touched.data<int64_t>()[0], kTouchedStart + static_cast<int64_t>(distinct.size()));
  }
}

// The running count adds the experts owning a pair, each once however many pairs it owns, and nothing for the others.
TEST(MoeAlign, CountsTheExpertsTouched) {
  const Tensor ids = Tensor::from_i32({5, 1, 5, 2, 1, 5}, {3, 2});  // experts 1, 2 and 5 of 8
  const Aligned a = align(ids, 8, 1);
  EXPECT_EQ(a.experts_touched.data<int64_t>()[0], kTouchedStart + 3);
  // A second layer's call (another block size) adds its own: experts 0 and 7.
  Tensor sorted = Tensor::empty({ops::moe_align_capacity(2, 8, 16)}, DType::kI32),
         rows = Tensor::empty({2}, DType::kI32);
  Tensor offsets = Tensor::empty({9}, DType::kI32), touched = a.experts_touched;
  ops::moe_align(sorted, rows, offsets, touched, Tensor::from_i32({7, 0}, {1, 2}), 16);
  EXPECT_EQ(touched.data<int64_t>()[0], kTouchedStart + 5);
}

// out[r] = x_r . W[e]^T by plain double loops.
std::vector<double> reference_gemm(const Tensor& x, const Tensor& w, const Aligned& a, int64_t gather_top_k,
                                   int64_t rows) {
  const int64_t E = w.size(0), N = w.size(1), K = w.size(2);
  Tensor wf = w.to(DType::kF32);
  std::vector<double> out(static_cast<size_t>(rows * N), 0.0);
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t r = a.expert_offsets.data<int32_t>()[e]; r < a.expert_offsets.data<int32_t>()[e + 1]; ++r) {
      const int32_t p = a.sorted_pairs.data<int32_t>()[r];
      if (p < 0) continue;
      const float* xr = x.data<float>() + (gather_top_k > 0 ? p / gather_top_k : r) * K;
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t i = 0; i < K; ++i) acc += static_cast<double>(xr[i]) * wf.data<float>()[(e * N + n) * K + i];
        out[r * N + n] = acc;
      }
    }
  }
  return out;
}

TEST(MoeGemm, GatheredAndGroupedRowsMatchReference) {
  for (DType wdtype : {DType::kF32, DType::kBF16}) {
    for (int64_t block : {1, 8}) {
      const int64_t T = 19, k = 2, E = 5, N = 24, K = 40;
      Tensor ids = random_ids(T, k, E, 5);
      const Aligned a = align(ids, E, block);
      const int64_t rows = a.expert_offsets.data<int32_t>()[E];
      const int64_t capacity = a.sorted_pairs.numel();
      Tensor x = random_tensor({T, K}, 1), w = random_tensor({E, N, K}, 2, wdtype, -0.5f, 0.5f);
      Tensor out = Tensor::empty({capacity, N}, DType::kF32);
      out.fill(NAN);
      ops::moe_gemm(out, x, w, a.sorted_pairs, a.expert_offsets, k, block);
      const double tol = wdtype == DType::kF32 ? 1e-5 : 2e-2;  // bf16 weights: oneDNN rounds x to bf16
      expect_close(out.slice(0, 0, rows).contiguous(), reference_gemm(x, w, a, k, rows), tol, tol, "gathered");
      // Grouped input (the down projection): x already in row order, same row count as out.
      Tensor xg = random_tensor({capacity, K}, 3);
      ops::moe_gemm(out, xg, w, a.sorted_pairs, a.expert_offsets, 0, block);
      expect_close(out.slice(0, 0, rows).contiguous(), reference_gemm(xg, w, a, 0, rows), tol, tol, "grouped");
    }
  }
}

TEST(MoeCombine, WeightedSumPlusGatedSharedExpert) {
  const int64_t T = 9, k = 3, E = 4, H = 16;
  Tensor ids = random_ids(T, k, E, 8);
  const Aligned a = align(ids, E, 1);
  Tensor expert_out = random_tensor({T * k, H}, 4), weights = random_tensor({T, k}, 5, DType::kF32, 0.f, 1.f);
  Tensor shared = random_tensor({T, H}, 6), gate = random_tensor({T, 1}, 7, DType::kF32, -3.f, 3.f);
  for (int variant = 0; variant < 3; ++variant) {  // routed only; + shared; + gated shared
    Tensor out = Tensor::empty({T, H}, DType::kF32);
    out.fill(NAN);
    ops::moe_combine(out, expert_out, weights, a.pair_rows, variant >= 1 ? &shared : nullptr,
                     variant == 2 ? &gate : nullptr);
    std::vector<double> want(static_cast<size_t>(T * H));
    for (int64_t t = 0; t < T; ++t) {
      const double g = variant == 2 ? 1.0 / (1.0 + std::exp(-gate.data<float>()[t])) : (variant == 1 ? 1.0 : 0.0);
      for (int64_t h = 0; h < H; ++h) {
        double acc = g * shared.data<float>()[t * H + h];
        for (int64_t j = 0; j < k; ++j) {
          const int32_t row = a.pair_rows.data<int32_t>()[t * k + j];
          acc += weights.data<float>()[t * k + j] * expert_out.data<float>()[row * H + h];
        }
        want[t * H + h] = acc;
      }
    }
    expect_close(out, want, 1e-5, 1e-5, "variant " + std::to_string(variant));
  }
}

// route -> align -> gemm (gate/up) -> silu_and_mul -> gemm (down) -> combine equals, per token, the sum over its
// top-k experts of weight * down(silu(gate x) * up x): transformers' MoE block written as a loop. The down step runs
// as the two ops and as moe_gemm_silu (the layer's path).
TEST(MoeChain, MatchesPerTokenDenseLoop) {
  for (bool fused : {false, true}) {
    const int64_t T = 13, k = 2, E = 6, H = 32, I = 24;
    Tensor x = random_tensor({T, H}, 21), logits = random_tensor({T, E}, 22, DType::kF32, -2.f, 2.f);
    Tensor w13 = random_tensor({E, 2 * I, H}, 23, DType::kF32, -0.3f, 0.3f);
    Tensor w2 = random_tensor({E, H, I}, 24, DType::kF32, -0.3f, 0.3f);
    const Routed r = route(logits, k, ops::kMoeScoringSoftmax, 1);
    const Aligned a = align(r.ids, E, 1);
    const int64_t capacity = a.sorted_pairs.numel();
    Tensor gate_up = Tensor::empty({capacity, 2 * I}, DType::kF32), act = Tensor::empty({capacity, I}, DType::kF32);
    Tensor down = Tensor::empty({capacity, H}, DType::kF32), out = Tensor::empty({T, H}, DType::kF32);
    ops::moe_gemm(gate_up, x, w13, a.sorted_pairs, a.expert_offsets, k, 1);
    if (fused) {
      ops::moe_gemm_silu(down, act, gate_up, w2, a.sorted_pairs, a.expert_offsets, 1);
    } else {
      ops::silu_and_mul(act, gate_up);
      ops::moe_gemm(down, act, w2, a.sorted_pairs, a.expert_offsets, 0, 1);
    }
    ops::moe_combine(out, down, r.weights, a.pair_rows, nullptr, nullptr);
    std::vector<double> want(static_cast<size_t>(T * H), 0.0);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> row(logits.data<float>() + t * E, logits.data<float>() + (t + 1) * E);
      std::vector<int> ids;
      std::vector<double> w;
      reference_route(row, k, ops::kMoeScoringSoftmax, true, &ids, &w);
      for (int64_t j = 0; j < k; ++j) {
        const int e = ids[j];
        std::vector<double> h(static_cast<size_t>(I));
        for (int64_t i = 0; i < I; ++i) {
          double g = 0, u = 0;
          for (int64_t c = 0; c < H; ++c) {
            g += static_cast<double>(w13.data<float>()[(e * 2 * I + i) * H + c]) * x.data<float>()[t * H + c];
            u += static_cast<double>(w13.data<float>()[(e * 2 * I + I + i) * H + c]) * x.data<float>()[t * H + c];
          }
          h[i] = g / (1.0 + std::exp(-g)) * u;
        }
        for (int64_t c = 0; c < H; ++c) {
          double d = 0;
          for (int64_t i = 0; i < I; ++i) d += static_cast<double>(w2.data<float>()[(e * H + c) * I + i]) * h[i];
          want[t * H + c] += w[j] * d;
        }
      }
    }
    expect_close(out, want, 1e-5, 1e-4, fused ? "moe chain (moe_gemm_silu)" : "moe chain");
  }
}

// The fused op's outputs against the two ops' on the same logits (the CPU runs the two; CUDA's one-block kernel is
// held to the same bits in tests/gpu/moe_gpu_test.cc).
TEST(MoeRouteAndAlign, SameOutputsAsRouteThenAlign) {
  const int64_t T = 5, E = 16, k = 4, block = 16;
  Tensor logits = random_tensor({T, E}, 21);
  const int64_t capacity = ops::moe_align_capacity(T * k, E, block);
  auto run = [&](bool fused) {
    Tensor w = Tensor::empty({T, k}, DType::kF32), ids = Tensor::empty({T, k}, DType::kI32);
    Tensor sorted = Tensor::from_i32(std::vector<int32_t>(capacity, -5), {capacity});
    Tensor rows = Tensor::empty({T * k}, DType::kI32);
    Tensor offsets = Tensor::empty({E + 1}, DType::kI32), touched = Tensor::from_i64({kTouchedStart}, {1});
    if (fused) {
      ops::moe_route_and_align(w, ids, logits, ops::kMoeScoringSoftmax, 1, sorted, rows, offsets, touched, block);
    } else {
      ops::moe_route(w, ids, logits, ops::kMoeScoringSoftmax, 1);
      ops::moe_align(sorted, rows, offsets, touched, ids, block);
    }
    return std::vector<Tensor>{w, ids, sorted, rows, offsets, touched};
  };
  const std::vector<Tensor> got = run(true), want = run(false);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::memcmp(got[i].raw_data(), want[i].raw_data(), got[i].nbytes()), 0) << "output " << i;
  }
  EXPECT_GT(got[5].data<int64_t>()[0], kTouchedStart);
}

// The combine folded into the next pre-norm step: residual += the combined row, x = rms_norm(residual) * weight,
// against the three steps written as loops (with and without a gated shared expert).
TEST(MoeCombineAddRmsNorm, MatchesCombineThenResidualNormLoops) {
  const int64_t T = 6, k = 3, E = 5, H = 24;
  const float eps = 1e-5f;
  Tensor ids = random_ids(T, k, E, 31);
  const Aligned a = align(ids, E, 1);
  Tensor expert_out = random_tensor({T * k, H}, 32), weights = random_tensor({T, k}, 33, DType::kF32, 0.f, 1.f);
  Tensor shared = random_tensor({T, H}, 34), gate = random_tensor({T, 1}, 35, DType::kF32, -3.f, 3.f);
  Tensor norm_weight = random_tensor({H}, 36, DType::kF32, 0.5f, 1.5f), residual0 = random_tensor({T, H}, 37);
  for (bool gated_shared : {false, true}) {
    Tensor x = Tensor::empty({T, H}, DType::kF32), residual = residual0.clone();
    x.fill(NAN);  // never read
    ops::moe_combine_add_rms_norm(x, residual, expert_out, weights, a.pair_rows, gated_shared ? &shared : nullptr,
                                  gated_shared ? &gate : nullptr, norm_weight, eps);
    std::vector<double> want_residual(static_cast<size_t>(T * H)), want_x(static_cast<size_t>(T * H));
    for (int64_t t = 0; t < T; ++t) {
      const double g = gated_shared ? 1.0 / (1.0 + std::exp(-gate.data<float>()[t])) : 0.0;
      double ss = 0.0;
      for (int64_t h = 0; h < H; ++h) {
        double acc = g * shared.data<float>()[t * H + h];
        for (int64_t j = 0; j < k; ++j) {
          const int32_t row = a.pair_rows.data<int32_t>()[t * k + j];
          acc += weights.data<float>()[t * k + j] * expert_out.data<float>()[row * H + h];
        }
        const double r = residual0.data<float>()[t * H + h] + acc;
        want_residual[t * H + h] = r;
        ss += r * r;
      }
      const double scale = 1.0 / std::sqrt(ss / static_cast<double>(H) + eps);
      for (int64_t h = 0; h < H; ++h)
        want_x[t * H + h] = want_residual[t * H + h] * scale * norm_weight.data<float>()[h];
    }
    const std::string what = gated_shared ? "gated shared expert" : "routed only";
    expect_close(residual, want_residual, 1e-5, 1e-5, "residual, " + what);
    expect_close(x, want_x, 1e-5, 1e-4, "x, " + what);
  }
}

TEST(MoeOpsDeathTest, BadArgumentsAbortNamingTheOp) {
  Tensor logits = random_tensor({3, 4}, 1);
  Tensor w = Tensor::empty({3, 5}, DType::kF32), ids = Tensor::empty({3, 5}, DType::kI32);
  EXPECT_DEATH(ops::moe_route(w, ids, logits, ops::kMoeScoringSoftmax, 1), "moe_route: top_k 5 for 4 experts");
  Tensor bad_ids = Tensor::from_i32({0, 9}, {1, 2});
  Tensor sorted = Tensor::empty({2}, DType::kI32), rows = Tensor::empty({2}, DType::kI32);
  Tensor offsets = Tensor::empty({5}, DType::kI32), touched = Tensor::zeros({1}, DType::kI64);
  EXPECT_DEATH(ops::moe_align(sorted, rows, offsets, touched, bad_ids, 1), "moe_align: expert id 9");
  Tensor short_sorted = Tensor::empty({1}, DType::kI32);
  Tensor good_ids = Tensor::from_i32({0, 1}, {1, 2});
  EXPECT_DEATH(ops::moe_align(short_sorted, rows, offsets, touched, good_ids, 1), "moe_align: sorted_pairs");
  Tensor touched_i32 = Tensor::zeros({1}, DType::kI32);
  EXPECT_DEATH(ops::moe_align(sorted, rows, offsets, touched_i32, good_ids, 1), "moe_align: experts_touched");
  Tensor w2 = random_tensor({4, 8, 6}, 2), down = Tensor::empty({2, 8}, DType::kF32);
  Tensor gate_up = random_tensor({2, 10}, 3), act = Tensor::empty({2, 6}, DType::kF32);
  EXPECT_DEATH(ops::moe_gemm_silu(down, act, gate_up, w2, sorted, offsets, 1), "moe_gemm_silu: act");
  // Offsets for 4 experts beside logits over 6: every id the router picks fits [0, 6), not the grouping's [0, 4).
  Tensor logits6 = random_tensor({1, 6}, 4), w6 = Tensor::empty({1, 2}, DType::kF32);
  Tensor ids6 = Tensor::empty({1, 2}, DType::kI32);
  EXPECT_DEATH(
      ops::moe_route_and_align(w6, ids6, logits6, ops::kMoeScoringSoftmax, 1, sorted, rows, offsets, touched, 1),
      "moe_route_and_align: expert_offsets");
  Tensor wide_weights = random_tensor({1, 33}, 15, DType::kF32, 0.f, 1.f), out1 = Tensor::empty({1, 8}, DType::kF32);
  Tensor rows33 = Tensor::from_i32(std::vector<int32_t>(33, 0), {33});
  EXPECT_DEATH(ops::moe_combine(out1, random_tensor({1, 8}, 16), wide_weights, rows33, nullptr, nullptr),
               "moe_combine: topk_weights .*top_k past 32");
  // The fused combine + norm refuses what either op would, before it writes x.
  Tensor expert_out = random_tensor({2, 8}, 5), weights = random_tensor({1, 2}, 6, DType::kF32, 0.f, 1.f);
  Tensor pair_rows = Tensor::from_i32({0, 1}, {2}), x = random_tensor({1, 8}, 7), norm_weight = random_tensor({8}, 8);
  Tensor short_residual = random_tensor({1, 4}, 9), residual = random_tensor({1, 8}, 10);
  Tensor short_weight = random_tensor({4}, 11);
  EXPECT_DEATH(ops::moe_combine_add_rms_norm(x, short_residual, expert_out, weights, pair_rows, nullptr, nullptr,
                                             norm_weight, 1e-6f),
               "moe_combine_add_rms_norm: residual");
  EXPECT_DEATH(
      ops::moe_combine_add_rms_norm(x, residual, expert_out, weights, pair_rows, nullptr, nullptr, short_weight, 1e-6f),
      "moe_combine_add_rms_norm: weight");
  EXPECT_DEATH(
      ops::moe_combine_add_rms_norm(x, x, expert_out, weights, pair_rows, nullptr, nullptr, norm_weight, 1e-6f),
      "moe_combine_add_rms_norm: residual must not alias x");
}

}  // namespace
}  // namespace llmserve

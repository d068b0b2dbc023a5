// The mixture-of-experts ops on CPU (ops.h): the router, the stable grouping of (token, choice) pairs by expert,
// the grouped GEMM as one ops::linear per expert over its gathered rows (after ops::silu_and_mul for the down
// projection), and the weighted combine. These are also the reference the CUDA kernels are tested against
// (tests/gpu/moe_gpu_test.cc).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_ops.h"

namespace llmserve::cpu {
namespace {

// Whether score a (expert ia) ranks before score b (expert ib): larger first, NaN last, ties to the lower index.
bool ranks_before(float a, int64_t ia, float b, int64_t ib) {
  const bool a_nan = std::isnan(a), b_nan = std::isnan(b);
  if (a_nan != b_nan) return b_nan;
  if (!a_nan && a != b) return a > b;
  return ia < ib;
}

void moe_route(Tensor& topk_weights, Tensor& topk_ids, const Tensor& router_logits, int64_t scoring,
               int64_t renormalize) {
  const int64_t num_tokens = router_logits.size(0), num_experts = router_logits.size(1), k = topk_ids.size(1);
  parallel_for(num_tokens, std::max<int64_t>(1, 4096 / num_experts), [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(num_experts));
    std::vector<int64_t> order(static_cast<size_t>(num_experts));
    for (int64_t t = begin; t < end; ++t) {
      const float* logits = row_ptr<float>(router_logits, t);
      if (scoring == ops::kMoeScoringSoftmax) {
        float max = -std::numeric_limits<float>::infinity();
        for (int64_t e = 0; e < num_experts; ++e) max = std::max(max, logits[e]);
        float sum = 0.f;
        for (int64_t e = 0; e < num_experts; ++e) sum += scores[e] = std::exp(logits[e] - max);
        for (int64_t e = 0; e < num_experts; ++e) scores[e] /= sum;
      } else {
        for (int64_t e = 0; e < num_experts; ++e) scores[e] = 1.f / (1.f + std::exp(-logits[e]));
      }
      for (int64_t e = 0; e < num_experts; ++e) order[e] = e;
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int64_t a, int64_t b) { return ranks_before(scores[a], a, scores[b], b); });
      float* w = row_ptr<float>(topk_weights, t);
      int32_t* ids = row_ptr<int32_t>(topk_ids, t);
      float total = 0.f;
      for (int64_t j = 0; j < k; ++j) {
        ids[j] = static_cast<int32_t>(order[j]);
        total += w[j] = scores[order[j]];
      }
      if (renormalize != 0) {
        for (int64_t j = 0; j < k; ++j) w[j] /= total;
      }
    }
  });
}

void moe_route_grouped(Tensor& topk_weights, Tensor& topk_ids, const Tensor& router_logits,
                       const Tensor& correction_bias, int64_t num_groups, int64_t topk_groups, int64_t renormalize,
                       float routed_scaling_factor) {
  const int64_t num_tokens = router_logits.size(0), num_experts = router_logits.size(1), k = topk_ids.size(1);
  const int64_t group_size = num_experts / num_groups;
  const float* bias = correction_bias.data<float>();
  parallel_for(num_tokens, std::max<int64_t>(1, 4096 / num_experts), [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(num_experts)), choice(static_cast<size_t>(num_experts));
    std::vector<float> group_scores(static_cast<size_t>(num_groups));
    std::vector<int64_t> order(static_cast<size_t>(std::max(num_experts, num_groups)));
    std::vector<bool> kept(static_cast<size_t>(num_groups));
    for (int64_t t = begin; t < end; ++t) {
      const float* logits = row_ptr<float>(router_logits, t);
      for (int64_t e = 0; e < num_experts; ++e) {
        scores[e] = 1.f / (1.f + std::exp(-logits[e]));
        choice[e] = scores[e] + bias[e];
      }
      // A group's score: the sum of its two best choice values.
      for (int64_t g = 0; g < num_groups; ++g) {
        const float* c = choice.data() + g * group_size;
        float first = c[0], second = c[1];
        if (ranks_before(second, 1, first, 0)) std::swap(first, second);
        for (int64_t i = 2; i < group_size; ++i) {
          if (ranks_before(c[i], i, first, 0)) {
            second = first;
            first = c[i];
          } else if (ranks_before(c[i], i, second, 1)) {
            second = c[i];
          }
        }
        group_scores[g] = first + second;
      }
      for (int64_t g = 0; g < num_groups; ++g) order[g] = g;
      std::partial_sort(order.begin(), order.begin() + topk_groups, order.begin() + num_groups,
                        [&](int64_t a, int64_t b) { return ranks_before(group_scores[a], a, group_scores[b], b); });
      std::fill(kept.begin(), kept.end(), false);
      for (int64_t i = 0; i < topk_groups; ++i) kept[order[i]] = true;
      // Experts of dropped groups rank below every kept one (transformers masks them with -inf).
      int64_t n = 0;
      for (int64_t e = 0; e < num_experts; ++e) {
        if (kept[e / group_size]) order[n++] = e;
      }
      std::partial_sort(order.begin(), order.begin() + k, order.begin() + n,
                        [&](int64_t a, int64_t b) { return ranks_before(choice[a], a, choice[b], b); });
      float* w = row_ptr<float>(topk_weights, t);
      int32_t* ids = row_ptr<int32_t>(topk_ids, t);
      float total = 0.f;
      for (int64_t j = 0; j < k; ++j) {
        ids[j] = static_cast<int32_t>(order[j]);
        total += w[j] = scores[order[j]];
      }
      for (int64_t j = 0; j < k; ++j) {
        if (renormalize != 0) w[j] /= total + 1e-20f;
        w[j] *= routed_scaling_factor;
      }
    }
  });
}

void moe_align(Tensor& sorted_pairs, Tensor& pair_rows, Tensor& expert_offsets, Tensor& experts_touched,
               const Tensor& topk_ids, int64_t block) {
  const int64_t num_pairs = topk_ids.numel(), num_experts = expert_offsets.size(0) - 1;
  const int32_t* ids = topk_ids.data<int32_t>();
  std::vector<int64_t> counts(static_cast<size_t>(num_experts), 0);
  for (int64_t p = 0; p < num_pairs; ++p) {
    CHECK(ids[p] >= 0 && ids[p] < num_experts)
        << "moe_align: expert id " << ids[p] << " at pair " << p << " not in [0, " << num_experts << ")";
    ++counts[ids[p]];
  }
  int32_t* offsets = expert_offsets.data<int32_t>();
  std::vector<int64_t> cursor(static_cast<size_t>(num_experts));
  int64_t row = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    offsets[e] = static_cast<int32_t>(row);
    cursor[e] = row;
    row += (counts[e] + block - 1) / block * block;
  }
  offsets[num_experts] = static_cast<int32_t>(row);
  experts_touched.data<int64_t>()[0] += std::count_if(counts.begin(), counts.end(), [](int64_t c) { return c > 0; });
  int32_t* sorted = sorted_pairs.data<int32_t>();
  std::fill(sorted, sorted + row, -1);
  int32_t* rows = pair_rows.data<int32_t>();
  for (int64_t p = 0; p < num_pairs; ++p) {  // ascending p: each expert's pairs stay in pair order
    const int64_t r = cursor[ids[p]]++;
    sorted[r] = static_cast<int32_t>(p);
    rows[p] = static_cast<int32_t>(r);
  }
}

void moe_gemm(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& sorted_pairs,
              const Tensor& expert_offsets, int64_t gather_top_k, int64_t /*block*/) {
  const int64_t num_experts = weight.size(0), n = weight.size(1), k = weight.size(2), capacity = out.size(0);
  const int32_t* offsets = expert_offsets.data<int32_t>();
  const int32_t* sorted = sorted_pairs.data<int32_t>();
  CHECK(offsets[0] == 0 && offsets[num_experts] <= capacity) << "moe_gemm: expert_offsets span [" << offsets[0] << ", "
                                                             << offsets[num_experts] << ") for " << capacity << " rows";
  const int64_t num_x_rows = x.size(0);
  Tensor gathered;  // the expert's x rows, when they come from token rows
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t begin = offsets[e], end = offsets[e + 1];
    CHECK(begin <= end) << "moe_gemm: expert_offsets decrease at expert " << e;
    if (begin == end) continue;
    // Padding rows (pair -1) sit at the end of the expert's rows: the product covers its pairs only.
    int64_t used = begin;
    while (used < end && sorted[used] >= 0) ++used;
    for (int64_t r = used; r < end; ++r) {
      CHECK_LT(sorted[r], 0) << "moe_gemm: pair after padding in expert " << e;
      std::fill(row_ptr<float>(out, r), row_ptr<float>(out, r) + n, 0.f);
    }
    if (used == begin) continue;
    Tensor rows_out = out.slice(0, begin, used);
    const Tensor w = weight.select(0, e);
    if (gather_top_k == 0) {
      ops::linear(rows_out, x.slice(0, begin, used), w, nullptr);
      continue;
    }
    if (!gathered.defined() || gathered.size(0) < used - begin) gathered = Tensor::empty({capacity, k}, DType::kF32);
    Tensor g = gathered.slice(0, 0, used - begin);
    for (int64_t r = begin; r < used; ++r) {
      const int64_t token = sorted[r] / gather_top_k;
      CHECK_LT(token, num_x_rows) << "moe_gemm: pair " << sorted[r] << " past x " << x.to_string();
      std::copy(row_ptr<float>(x, token), row_ptr<float>(x, token) + k, row_ptr<float>(g, r - begin));
    }
    ops::linear(rows_out, g, w, nullptr);
  }
}

// The reference composition the fused CUDA path must equal: the activation into `act`, then the grouped GEMM.
void moe_gemm_silu(Tensor& out, Tensor& act, const Tensor& gate_up, const Tensor& weight, const Tensor& sorted_pairs,
                   const Tensor& expert_offsets, int64_t block) {
  ops::silu_and_mul(act, gate_up);
  moe_gemm(out, act, weight, sorted_pairs, expert_offsets, /*gather_top_k=*/0, block);
}

void moe_combine(Tensor& out, const Tensor& expert_out, const Tensor& topk_weights, const Tensor& pair_rows,
                 const Tensor* shared_out, const Tensor* shared_gate) {
  const int64_t num_tokens = out.size(0), hidden = out.size(1), k = topk_weights.size(1);
  const int32_t* rows = pair_rows.data<int32_t>();
  for (int64_t p = 0; p < num_tokens * k; ++p) {
    CHECK(rows[p] >= 0 && rows[p] < expert_out.size(0))
        << "moe_combine: pair " << p << " at row " << rows[p] << " of " << expert_out.to_string();
  }
  parallel_for(num_tokens, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, hidden * k)), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* o = row_ptr<float>(out, t);
      const float* w = row_ptr<float>(topk_weights, t);
      float shared_scale = 0.f;
      if (shared_out != nullptr) {
        shared_scale = 1.f;
        if (shared_gate != nullptr) shared_scale = 1.f / (1.f + std::exp(-row_ptr<float>(*shared_gate, t)[0]));
      }
      for (int64_t h = 0; h < hidden; ++h) {
        float acc = 0.f;
        for (int64_t j = 0; j < k; ++j) acc += w[j] * row_ptr<float>(expert_out, rows[t * k + j])[h];
        if (shared_out != nullptr) acc += shared_scale * row_ptr<float>(*shared_out, t)[h];
        o[h] = acc;
      }
    }
  });
}

// The two ops in turn: the reference the fused CUDA kernel matches.
void moe_route_and_align(Tensor& topk_weights, Tensor& topk_ids, const Tensor& router_logits, int64_t scoring,
                         int64_t renormalize, Tensor& sorted_pairs, Tensor& pair_rows, Tensor& expert_offsets,
                         Tensor& experts_touched, int64_t block) {
  moe_route(topk_weights, topk_ids, router_logits, scoring, renormalize);
  moe_align(sorted_pairs, pair_rows, expert_offsets, experts_touched, topk_ids, block);
}

// The two ops in turn: the reference the fused CUDA kernel matches.
void moe_combine_add_rms_norm(Tensor& x, Tensor& residual, const Tensor& expert_out, const Tensor& topk_weights,
                              const Tensor& pair_rows, const Tensor* shared_out, const Tensor* shared_gate,
                              const Tensor& weight, float eps) {
  moe_combine(x, expert_out, topk_weights, pair_rows, shared_out, shared_gate);
  ops::fused_add_rms_norm(x, residual, weight, eps);
}

}  // namespace

void register_moe_kernels() {
  ops::moe_route.register_kernel(DeviceType::kCPU, moe_route);
  ops::moe_route_grouped.register_kernel(DeviceType::kCPU, moe_route_grouped);
  ops::moe_align.register_kernel(DeviceType::kCPU, moe_align);
  ops::moe_route_and_align.register_kernel(DeviceType::kCPU, moe_route_and_align);
  ops::moe_gemm.register_kernel(DeviceType::kCPU, moe_gemm);
  ops::moe_gemm_silu.register_kernel(DeviceType::kCPU, moe_gemm_silu);
  ops::moe_combine.register_kernel(DeviceType::kCPU, moe_combine);
  ops::moe_combine_add_rms_norm.register_kernel(DeviceType::kCPU, moe_combine_add_rms_norm);
}

}  // namespace llmserve::cpu

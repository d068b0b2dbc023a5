// Sampling on CPU, one row of logits at a time (parallel_for over rows): penalties, logit bias, token masks,
// temperature, the min-p / top-k / top-p masks (partial selection, never a full-vocabulary sort unless top-p
// needs it) and the inverse-CDF draw from a Philox stream. Rows never read each other's state, so a row's result
// depends only on its own logits and parameters, whatever the batch around it.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/philox.h"

namespace llmserve::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();

// Rows per parallel_for chunk: about 64k logits of work each.
int64_t rows_per_chunk(int64_t vocab) { return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, vocab)); }

// Row r's ids of a TokenLists, as [begin, end).
struct IdSpan {
  const int32_t* begin;
  const int32_t* end;
};

IdSpan row_ids(const ops::TokenLists& lists, int64_t r) {
  const int32_t* offsets = lists.offsets.data<int32_t>();
  const int32_t* ids = lists.token_ids.data<int32_t>();
  return {ids + offsets[r], ids + offsets[r + 1]};
}

// Offsets well formed and every id inside the vocabulary (content checks, so not in TokenLists::check()).
void check_lists(const ops::TokenLists& lists, int64_t num_rows, int64_t vocab, const char* op, const char* name) {
  const int32_t* offsets = lists.offsets.data<int32_t>();
  const int64_t size = lists.token_ids.size(0);
  CHECK_EQ(offsets[0], 0) << op << ": " << name << ".offsets[0]";
  for (int64_t r = 0; r < num_rows; ++r) {
    CHECK(offsets[r] <= offsets[r + 1] && offsets[r + 1] <= size)
        << op << ": " << name << ".offsets[" << r + 1 << "] = " << offsets[r + 1] << " after " << offsets[r]
        << " (token_ids has " << size << ")";
  }
  const int32_t* ids = lists.token_ids.data<int32_t>();
  for (int64_t j = 0; j < offsets[num_rows]; ++j) {
    CHECK(ids[j] >= 0 && ids[j] < vocab) << op << ": " << name << " token id " << ids[j] << " outside vocab " << vocab;
  }
}

// A finite logit, its token id and its weight exp(logit - max_logit). The ranking every mask keeps a prefix of:
// larger logit first, equal logits by lower id (a strict weak order, so partial sorts select deterministically).
struct Candidate {
  float logit;
  int32_t id;
  float weight;
};

inline bool ranks_before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// The k-th largest finite logit of x (k >= 1, counting repeats), or -inf when fewer than k are finite. A min-heap
// of the best k so far: on a typical row almost every logit is rejected by one comparison with its top.
float kth_largest(const float* x, int64_t vocab, int32_t k, std::vector<float>& heap) {
  heap.clear();
  for (int64_t j = 0; j < vocab; ++j) {
    const float v = x[j];
    if (static_cast<int64_t>(heap.size()) < k) {
      if (v == kNegInf) continue;
      heap.push_back(v);
      std::push_heap(heap.begin(), heap.end(), std::greater<float>());
    } else if (v > heap.front()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<float>());
      heap.back() = v;
      std::push_heap(heap.begin(), heap.end(), std::greater<float>());
    }
  }
  return static_cast<int64_t>(heap.size()) < k ? kNegInf : heap.front();
}

// Top-p over the candidates c (weights renormalised over them): returns the index, after reordering c as far as
// needed, of the last kept candidate in ranking order; c[0, index] are then the kept ones. A weighted quickselect
// (expected O(m), no full sort): it narrows [lo, hi) to the block holding the cut, keeping `before` = the mass of
// c[0, lo), which all rank before c[lo, hi) and are kept (before < target), then sorts and walks that block.
int64_t top_p_last_kept(std::vector<Candidate>& c, float top_p) {
  double total = 0;
  for (const Candidate& a : c) total += a.weight;
  const double target = static_cast<double>(top_p) * total;
  double before = 0;
  int64_t lo = 0, hi = static_cast<int64_t>(c.size());
  while (hi - lo > 64) {
    if (lo > 0 && before >= target) return lo - 1;  // c[lo - 1] (the last pivot) closes the kept prefix
    // Median-of-three pivot, moved to hi - 1, then a partition of [lo, hi - 1) into "ranks before the pivot" and
    // the rest; the pivot lands at mid.
    int64_t a = lo, b = lo + (hi - lo) / 2, z = hi - 1;
    if (ranks_before(c[b], c[a])) std::swap(a, b);
    if (ranks_before(c[z], c[b])) b = ranks_before(c[z], c[a]) ? a : z;
    std::swap(c[b], c[hi - 1]);
    const Candidate pivot = c[hi - 1];
    const int64_t mid = std::partition(c.begin() + lo, c.begin() + (hi - 1),
                                       [&](const Candidate& e) { return ranks_before(e, pivot); }) -
                        c.begin();
    std::swap(c[mid], c[hi - 1]);
    double upper = 0;  // mass of c[lo, mid)
    for (int64_t i = lo; i < mid; ++i) upper += c[i].weight;
    if (before + upper >= target && mid > lo) {
      hi = mid;  // the first dropped candidate is at or before mid, so the last kept is in [lo, mid)
    } else {
      before += upper + pivot.weight;  // c[lo, mid] are all kept (mass before the pivot < target, or it is first)
      lo = mid + 1;
    }
  }
  std::sort(c.begin() + lo, c.begin() + hi, ranks_before);
  for (int64_t i = lo; i < hi; ++i) {
    if (i > 0 && before >= target) return i - 1;
    before += c[i].weight;
  }
  return hi - 1;
}

// min-p, top-k and top-p on one row (see ops.h for the rules); `c` and `heap` are scratch.
void filter_row(float* x, int64_t vocab, int32_t top_k, float top_p, float min_p, std::vector<Candidate>& c,
                std::vector<float>& heap) {
  const bool use_k = top_k > 0 && top_k < vocab;
  const bool use_p = top_p < 1.f;
  const bool use_min_p = min_p > 0.f;
  if (!use_k && !use_p && !use_min_p) return;
  float max_logit = kNegInf;
  for (int64_t j = 0; j < vocab; ++j) {
    if (std::isnan(x[j])) x[j] = kNegInf;
    max_logit = std::max(max_logit, x[j]);
  }
  if (max_logit == kNegInf) return;  // nothing finite to keep
  if (max_logit == kPosInf) {        // all the mass sits on the +inf logits
    for (int64_t j = 0; j < vocab; ++j) x[j] = x[j] == kPosInf ? kPosInf : kNegInf;
    return;
  }
  // Candidates: finite logits at or above the k-th largest (vLLM keeps every tie of it) that pass min-p. Both
  // are prefixes of the ranking (exp is monotone), and the max always passes. The min-p test runs exp only near
  // its threshold: a logit more than 0.01 below max + log(min_p) fails by a margin no rounding can close.
  const float kth = use_k ? kth_largest(x, vocab, top_k, heap) : kNegInf;
  const double min_p_floor = use_min_p ? max_logit + std::log(static_cast<double>(min_p)) - 0.01 : -HUGE_VAL;
  c.clear();
  for (int64_t j = 0; j < vocab; ++j) {
    const float v = x[j];
    if (v == kNegInf || v < kth) continue;
    if (v != max_logit && static_cast<double>(v) < min_p_floor) continue;  // (min_p > 1 still keeps the max)
    const float weight = std::exp(v - max_logit);
    if (use_min_p && v != max_logit && !(weight >= min_p)) continue;
    c.push_back({v, static_cast<int32_t>(j), weight});
  }
  int64_t last = 0;
  if (use_p) {
    last = top_p_last_kept(c, top_p);
  } else {
    for (int64_t i = 1; i < static_cast<int64_t>(c.size()); ++i) {
      if (ranks_before(c[last], c[i])) last = i;
    }
  }
  // The kept set is the ranking's prefix ending at `cut`.
  const float cut_logit = c[last].logit;
  const int64_t cut_id = c[last].id;
#pragma omp simd
  for (int64_t j = 0; j < vocab; ++j) {
    const bool keep = x[j] > cut_logit || (x[j] == cut_logit && j <= cut_id);
    x[j] = keep ? x[j] : kNegInf;
  }
}

// Argmax with the ops::argmax rules: NaN ranks below every number, ties pick the lowest id.
int32_t argmax_row(const float* x, int64_t vocab) {
  int64_t best = 0;
  while (best < vocab - 1 && std::isnan(x[best])) ++best;
  for (int64_t j = best + 1; j < vocab; ++j) {
    if (x[j] > x[best]) best = j;
  }
  return static_cast<int32_t>(best);
}

// Inverse-CDF draw from softmax(x) with uniform u in [0, 1); `w` is scratch. Weights are exp(logit - max) (0 for
// -inf and NaN), accumulated in double in ascending id order; the first id whose running sum exceeds u * total
// wins, so a zero-weight id is never drawn.
int32_t sample_row(const float* x, int64_t vocab, double u, std::vector<float>& w) {
  float max_logit = kNegInf;
  for (int64_t j = 0; j < vocab; ++j) max_logit = x[j] > max_logit ? x[j] : max_logit;  // NaN compares false
  if (max_logit == kNegInf) return argmax_row(x, vocab);
  w.resize(static_cast<size_t>(vocab));
  double total = 0;
  if (max_logit == kPosInf) {  // the limit of softmax: uniform over the +inf logits
    for (int64_t j = 0; j < vocab; ++j) total += w[j] = x[j] == kPosInf ? 1.f : 0.f;
  } else {
    for (int64_t j = 0; j < vocab; ++j) total += w[j] = x[j] > kNegInf ? std::exp(x[j] - max_logit) : 0.f;
  }
  const double target = u * total;
  double cumulative = 0;
  int64_t last_positive = 0;
  for (int64_t j = 0; j < vocab; ++j) {
    if (w[j] == 0.f) continue;
    cumulative += w[j];
    last_positive = j;
    if (cumulative > target) return static_cast<int32_t>(j);
  }
  return static_cast<int32_t>(last_positive);  // rounding left u * total at the very top
}

}  // namespace

void apply_penalties(Tensor& logits, const ops::PenaltyParams& params) {
  const int64_t n = logits.size(0), vocab = logits.size(1);
  check_lists(params.prompt_tokens, n, vocab, "apply_penalties", "prompt_tokens");
  check_lists(params.output_tokens, n, vocab, "apply_penalties", "output_tokens");
  const float* repetition = params.repetition_penalties.data<float>();
  const float* frequency = params.frequency_penalties.data<float>();
  const float* presence = params.presence_penalties.data<float>();
  parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    // Per-thread vocab-sized scratch, all zero between rows: only the touched entries are reset, so a row costs
    // O(prompt + output) rather than O(vocab).
    thread_local std::vector<uint8_t> seen;
    thread_local std::vector<int32_t> counts;
    if (static_cast<int64_t>(seen.size()) < vocab) seen.resize(vocab, 0);
    if (static_cast<int64_t>(counts.size()) < vocab) counts.resize(vocab, 0);
    for (int64_t r = begin; r < end; ++r) {
      float* x = row_ptr<float>(logits, r);
      const IdSpan output = row_ids(params.output_tokens, r);
      if (repetition[r] != 1.f) {
        // vLLM scales by a where(logit > 0, 1 / p, p) factor; the same f32 product here.
        const float penalty = repetition[r], inverse = 1.f / repetition[r];
        const IdSpan prompt = row_ids(params.prompt_tokens, r);
        for (const IdSpan& span : {prompt, output}) {
          for (const int32_t* t = span.begin; t != span.end; ++t) {
            if (seen[*t]) continue;
            seen[*t] = 1;
            x[*t] *= x[*t] > 0.f ? inverse : penalty;
          }
        }
        for (const IdSpan& span : {prompt, output}) {
          for (const int32_t* t = span.begin; t != span.end; ++t) seen[*t] = 0;
        }
      }
      if (frequency[r] != 0.f || presence[r] != 0.f) {
        for (const int32_t* t = output.begin; t != output.end; ++t) ++counts[*t];
        for (const int32_t* t = output.begin; t != output.end; ++t) {
          if (counts[*t] == 0) continue;  // a repeat, already applied
          x[*t] -= frequency[r] * static_cast<float>(counts[*t]);
          x[*t] -= presence[r];
          counts[*t] = 0;
        }
      }
    }
  });
}

void apply_logit_bias(Tensor& logits, const ops::LogitBiasParams& params) {
  const int64_t n = logits.size(0);
  check_lists(params.tokens, n, logits.size(1), "apply_logit_bias", "logit_bias");
  const int32_t* offsets = params.tokens.offsets.data<int32_t>();
  const int32_t* ids = params.tokens.token_ids.data<int32_t>();
  const float* values = params.values.data<float>();
  for (int64_t r = 0; r < n; ++r) {
    float* x = row_ptr<float>(logits, r);
    for (int32_t j = offsets[r]; j < offsets[r + 1]; ++j) x[ids[j]] += values[j];
  }
}

void mask_tokens(Tensor& logits, const ops::TokenLists& tokens) {
  const int64_t n = logits.size(0);
  check_lists(tokens, n, logits.size(1), "mask_tokens", "tokens");
  for (int64_t r = 0; r < n; ++r) {
    float* x = row_ptr<float>(logits, r);
    const IdSpan span = row_ids(tokens, r);
    for (const int32_t* t = span.begin; t != span.end; ++t) x[*t] = kNegInf;
  }
}

void apply_token_bitmask(Tensor& logits, const Tensor& bitmask) {
  const int64_t n = logits.size(0), vocab = logits.size(1), words = bitmask.size(1);
  const int64_t covered = std::min(vocab, words * 32);
  parallel_for(n, rows_per_chunk(vocab), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* x = row_ptr<float>(logits, r);
      const uint32_t* mask = reinterpret_cast<const uint32_t*>(bitmask.data<int32_t>()) + r * words;
      for (int64_t w = 0; w * 32 < covered; ++w) {
        const uint32_t bits = mask[w];
        if (bits == 0xFFFFFFFFu) continue;  // the common case of a wide grammar state: nothing to clear
        const int64_t last = std::min<int64_t>(32, covered - w * 32);
        for (int64_t b = 0; b < last; ++b) {
          if (!((bits >> b) & 1u)) x[w * 32 + b] = kNegInf;
        }
      }
      for (int64_t j = covered; j < vocab; ++j) x[j] = kNegInf;
    }
  });
}

void apply_temperature(Tensor& logits, const Tensor& temperatures) {
  const int64_t n = logits.size(0), vocab = logits.size(1);
  const float* temperature = temperatures.data<float>();
  parallel_for(n, rows_per_chunk(vocab), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float t = temperature[r];
      if (!(t >= ops::kSamplingEps) || t == 1.f) continue;  // greedy (or NaN: treated as greedy), or a no-op
      float* x = row_ptr<float>(logits, r);
#pragma omp simd
      for (int64_t j = 0; j < vocab; ++j) x[j] /= t;  // a division, as vLLM's div_ (not a reciprocal product)
    }
  });
}

void apply_top_k_top_p_min_p(Tensor& logits, const ops::SamplingFilterParams& params) {
  const int64_t n = logits.size(0), vocab = logits.size(1);
  const int32_t* top_k = params.top_k.data<int32_t>();
  const float* top_p = params.top_p.data<float>();
  const float* min_p = params.min_p.data<float>();
  parallel_for(n, rows_per_chunk(vocab), [&](int64_t begin, int64_t end) {
    thread_local std::vector<Candidate> candidates;
    thread_local std::vector<float> heap;
    for (int64_t r = begin; r < end; ++r) {
      filter_row(row_ptr<float>(logits, r), vocab, top_k[r], top_p[r], min_p[r], candidates, heap);
    }
  });
}

void sample(Tensor& out_ids, const Tensor& logits, const ops::SampleParams& params) {
  const int64_t n = logits.size(0), vocab = logits.size(1);
  const float* temperature = params.temperatures.data<float>();
  const int64_t* seeds = params.seeds.data<int64_t>();
  const int64_t* offsets = params.offsets.data<int64_t>();
  int32_t* out = out_ids.data<int32_t>();
  parallel_for(n, rows_per_chunk(vocab), [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> weights;
    for (int64_t r = begin; r < end; ++r) {
      const float* x = row_ptr<float>(logits, r);
      if (!(temperature[r] >= ops::kSamplingEps)) {  // greedy (NaN too, as apply_temperature treats it)
        out[r] = argmax_row(x, vocab);
        continue;
      }
      const double u = philox::uniform(static_cast<uint64_t>(seeds[r]), static_cast<uint64_t>(offsets[r]));
      out[r] = sample_row(x, vocab, u, weights);
    }
  });
}

void gather_token_logprobs(Tensor& out_logprobs, Tensor& out_ranks, const Tensor& logprobs, const Tensor& token_ids) {
  const int64_t n = logprobs.size(0), vocab = logprobs.size(1);
  const int32_t* ids = token_ids.data<int32_t>();
  for (int64_t r = 0; r < n; ++r) {
    CHECK(ids[r] >= 0 && ids[r] < vocab) << "gather_token_logprobs: token id " << ids[r] << " outside vocab " << vocab;
  }
  float* out = out_logprobs.data<float>();
  int32_t* ranks = out_ranks.data<int32_t>();
  parallel_for(n, rows_per_chunk(vocab), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* x = row_ptr<float>(logprobs, r);
      const float value = x[ids[r]];
      int64_t rank = 0;
#pragma omp simd reduction(+ : rank)
      for (int64_t j = 0; j < vocab; ++j) rank += x[j] >= value ? 1 : 0;
      out[r] = value;
      ranks[r] = static_cast<int32_t>(rank);
    }
  });
}

void scatter_sampled_ids(Tensor& input_ids, const Tensor& sampled_ids, const Tensor& index) {
  int32_t* ids = input_ids.data<int32_t>();
  const int32_t* sampled = sampled_ids.data<int32_t>();
  const int32_t* pairs = index.data<int32_t>();
  for (int64_t i = 0; i < index.size(0); ++i) {
    const int32_t dst = pairs[2 * i], src = pairs[2 * i + 1];
    CHECK(dst >= 0 && dst < input_ids.size(0) && src >= 0 && src < sampled_ids.size(0))
        << "scatter_sampled_ids: row " << i << " (" << dst << ", " << src << ") out of range";
    ids[dst] = sampled[src];
  }
}

void register_sampling_kernels() {
  ops::scatter_sampled_ids.register_kernel(DeviceType::kCPU, scatter_sampled_ids);
  ops::apply_penalties.register_kernel(DeviceType::kCPU, apply_penalties);
  ops::apply_logit_bias.register_kernel(DeviceType::kCPU, apply_logit_bias);
  ops::mask_tokens.register_kernel(DeviceType::kCPU, mask_tokens);
  ops::apply_token_bitmask.register_kernel(DeviceType::kCPU, apply_token_bitmask);
  ops::apply_temperature.register_kernel(DeviceType::kCPU, apply_temperature);
  ops::apply_top_k_top_p_min_p.register_kernel(DeviceType::kCPU, apply_top_k_top_p_min_p);
  ops::sample.register_kernel(DeviceType::kCPU, sample);
  ops::gather_token_logprobs.register_kernel(DeviceType::kCPU, gather_token_logprobs);
}

}  // namespace llmserve::cpu

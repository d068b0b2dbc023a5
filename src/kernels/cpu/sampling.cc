// Sampling on CPU, one row of logits at a time (parallel_for over rows): penalties, logit bias, token masks,
// temperature, the min-p / top-k / top-p masks (partial selection, never a full-vocabulary sort unless top-p
// needs it) and the inverse-CDF draw from a Philox stream. Rows never read each other's state, so a row's result
// depends only on its own logits and parameters, whatever the batch around it.
#include "kernels/cpu/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
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

// A finite logit and its token id. The ranking every mask keeps a prefix of: larger logit first, equal logits by
// lower id (a strict weak order, so nth_element / partial_sort are deterministic in what they select).
struct Candidate {
  float logit;
  int32_t id;
};

inline bool ranks_before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Top-p over the candidates c[0, m) (weights exp(logit - max_logit), renormalised over them): returns the index,
// after reordering c into ranking order as far as needed, of the last kept candidate. Sorts in growing chunks,
// so a peaked distribution costs a partial sort of a few dozen candidates rather than a sort of all m.
int64_t top_p_last_kept(std::vector<Candidate>& c, int64_t m, float max_logit, float top_p) {
  double total = 0;
  for (int64_t i = 0; i < m; ++i) total += std::exp(c[i].logit - max_logit);
  const double target = static_cast<double>(top_p) * total;
  double before = 0;  // mass ranked before candidate i
  int64_t sorted = 0, chunk = 64;
  while (sorted < m) {
    const int64_t hi = m - sorted <= 4 * chunk ? m : sorted + chunk;  // a small remainder is sorted whole
    std::partial_sort(c.begin() + sorted, c.begin() + hi, c.begin() + m, ranks_before);
    for (int64_t i = sorted; i < hi; ++i) {
      if (i > 0 && before >= target) return i - 1;
      before += std::exp(c[i].logit - max_logit);
    }
    sorted = hi;
    chunk *= 4;
  }
  return m - 1;
}

// min-p, top-k and top-p on one row (see ops.h for the rules); `c` is scratch.
void filter_row(float* x, int64_t vocab, int32_t top_k, float top_p, float min_p, std::vector<Candidate>& c) {
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
  // Candidates: finite logits passing min-p (a prefix of the ranking, exp being monotone; the max always passes).
  c.clear();
  for (int64_t j = 0; j < vocab; ++j) {
    const float v = x[j];
    if (v == kNegInf || (use_min_p && v != max_logit && !(std::exp(v - max_logit) >= min_p))) continue;
    c.push_back({v, static_cast<int32_t>(j)});
  }
  int64_t m = static_cast<int64_t>(c.size());
  if (use_k && top_k < m) {
    // Partial selection: the k best in ranking order, then every tie of the k-th logit (vLLM keeps them all).
    std::nth_element(c.begin(), c.begin() + (top_k - 1), c.end(), ranks_before);
    const float kth = c[top_k - 1].logit;
    m = std::partition(c.begin() + top_k, c.end(), [kth](const Candidate& a) { return a.logit == kth; }) - c.begin();
  }
  int64_t last = 0;
  if (use_p) {
    last = top_p_last_kept(c, m, max_logit, top_p);
  } else {
    for (int64_t i = 1; i < m; ++i) {
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
    for (int64_t r = begin; r < end; ++r) {
      filter_row(row_ptr<float>(logits, r), vocab, top_k[r], top_p[r], min_p[r], candidates);
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

}  // namespace llmserve::cpu

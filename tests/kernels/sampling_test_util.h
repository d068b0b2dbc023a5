// Oracles for the sampling tests (kernels and runtime): the filter rules of ops.h recomputed from a full stable
// sort in double, the exact filtered softmax, and Pearson's chi-square goodness-of-fit (p-value from the
// regularised incomplete gamma function; bins expecting fewer than 5 draws are pooled).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace llmserve::testing {

// Q(a, x) = Gamma(a, x) / Gamma(a), the regularised upper incomplete gamma function.
inline double gamma_q(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_prefix = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1) {  // series for P(a, x)
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 1000 && std::abs(term) > std::abs(sum) * 1e-15; ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return 1.0 - sum * std::exp(log_prefix);
  }
  // Continued fraction for Q(a, x) (modified Lentz).
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::abs(c) < tiny) c = tiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1) < 1e-15) break;
  }
  return std::exp(log_prefix) * h;
}

struct ChiSquare {
  double statistic = 0;
  int64_t dof = 0;
  double p_value = 1;
  int64_t impossible_draws = 0;  // draws of tokens whose expected probability is 0
};

// counts[i]: observed draws of token i; probs[i]: its exact probability (sums to 1).
inline ChiSquare chi_square(const std::vector<int64_t>& counts, const std::vector<double>& probs) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  ChiSquare out;
  double pooled_expected = 0, pooled_observed = 0;
  int64_t bins = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double expected = probs[i] * static_cast<double>(total);
    if (probs[i] == 0) {
      out.impossible_draws += counts[i];
      continue;
    }
    if (expected < 5) {
      pooled_expected += expected;
      pooled_observed += static_cast<double>(counts[i]);
      continue;
    }
    const double diff = static_cast<double>(counts[i]) - expected;
    out.statistic += diff * diff / expected;
    ++bins;
  }
  if (pooled_expected > 0) {
    const double diff = pooled_observed - pooled_expected;
    out.statistic += diff * diff / pooled_expected;
    ++bins;
  }
  out.dof = bins - 1;
  out.p_value = out.dof > 0 ? gamma_q(out.dof / 2.0, out.statistic / 2.0) : 1.0;
  return out;
}

// Which tokens survive, per the rules in ops.h, from a full stable sort in double (the reference).
inline std::vector<bool> reference_keep(const std::vector<float>& x, int32_t top_k, double top_p, double min_p) {
  const size_t v = x.size();
  std::vector<int32_t> order;
  for (size_t j = 0; j < v; ++j) {
    if (x[j] > -std::numeric_limits<float>::infinity()) order.push_back(static_cast<int32_t>(j));
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  std::vector<bool> keep(v, false);
  if (order.empty()) return keep;
  const double mx = x[order[0]];
  std::vector<int32_t> kept;
  for (int32_t id : order) {
    if (min_p <= 0 || std::exp(x[id] - mx) >= min_p) kept.push_back(id);
  }
  if (top_k > 0 && static_cast<size_t>(top_k) < kept.size()) {
    const float kth = x[kept[top_k - 1]];
    std::vector<int32_t> k_kept;
    for (int32_t id : kept) {
      if (x[id] >= kth) k_kept.push_back(id);
    }
    kept = k_kept;
  }
  if (top_p < 1) {
    double total = 0;
    for (int32_t id : kept) total += std::exp(x[id] - mx);
    double before = 0;
    std::vector<int32_t> p_kept;
    for (size_t i = 0; i < kept.size(); ++i) {
      if (i > 0 && before >= top_p * total) break;
      p_kept.push_back(kept[i]);
      before += std::exp(x[kept[i]] - mx);
    }
    kept = p_kept;
  }
  for (int32_t id : kept) keep[id] = true;
  return keep;
}

// softmax(x / T) restricted to the reference's kept set, in double.
inline std::vector<double> expected_probs(const std::vector<float>& x, float temperature, int32_t top_k, float top_p,
                                          float min_p) {
  std::vector<float> scaled(x.size());
  for (size_t j = 0; j < x.size(); ++j) scaled[j] = x[j] / temperature;
  const std::vector<bool> keep = reference_keep(scaled, top_k, top_p, min_p);
  double mx = -INFINITY, total = 0;
  for (float s : scaled) mx = std::max<double>(mx, s);
  std::vector<double> p(x.size(), 0.0);
  for (size_t j = 0; j < x.size(); ++j) {
    if (keep[j]) total += p[j] = std::exp(static_cast<double>(scaled[j]) - mx);
  }
  for (double& q : p) q /= total;
  return p;
}

}  // namespace llmserve::testing

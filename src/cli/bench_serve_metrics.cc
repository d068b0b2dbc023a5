// Serving-benchmark metrics (see bench_serve_metrics.h); every figure is a pure function of the per-request
// records, so the tests can recompute it independently.
#include "cli/bench_serve_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace llmserve::cli {

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  // numpy's form: a + (b - a) * t, exact at t = 0 and for equal neighbours.
  return values[lo] + (values[hi] - values[lo]) * frac;
}

LatencyStats latency_stats(const std::vector<double>& seconds, const std::vector<double>& percentiles) {
  LatencyStats s;
  if (!seconds.empty()) {
    const double n = static_cast<double>(seconds.size());
    const double mean = std::accumulate(seconds.begin(), seconds.end(), 0.0) / n;
    double sq = 0;
    for (double v : seconds) sq += (v - mean) * (v - mean);
    s.mean_ms = mean * 1000.0;
    s.std_ms = std::sqrt(sq / n) * 1000.0;
    s.median_ms = percentile(seconds, 50.0) * 1000.0;
  }
  for (double p : percentiles) s.percentiles_ms.emplace_back(p, percentile(seconds, p) * 1000.0);
  return s;
}

int64_t output_len_of(const RequestOutput& out, const std::function<int64_t(const std::string&)>& count_tokens) {
  if (out.output_tokens > 0) return out.output_tokens;
  if (count_tokens) return count_tokens(out.generated_text);
  return out.num_chunks;
}

namespace {

// Tokens per whole second since the first successful start (each token timestamped at start + ttft + the
// running sum of its ITLs), and the peak of overlapping [start, start + latency) intervals.
void peak_figures(const std::vector<RequestOutput>& outputs, BenchmarkMetrics* m) {
  double first_start = INFINITY, last_end = -INFINITY;
  for (const RequestOutput& o : outputs) {
    if (!o.success) continue;
    first_start = std::min(first_start, o.start_time);
    last_end = std::max(last_end, o.start_time + o.latency);
  }
  if (first_start == INFINITY) return;
  const size_t num_seconds = static_cast<size_t>(std::ceil(last_end - first_start)) + 1;
  std::vector<double> tokens_per_second(num_seconds, 0.0);
  std::vector<std::pair<double, int>> events;
  for (const RequestOutput& o : outputs) {
    if (!o.success) continue;
    double t = o.start_time + o.ttft;
    for (size_t i = 0; i <= o.itl.size(); ++i) {
      if (i > 0) t += o.itl[i - 1];
      const double bucket = std::floor(t - first_start);
      if (bucket >= 0 && bucket < static_cast<double>(num_seconds)) tokens_per_second[static_cast<size_t>(bucket)]++;
    }
    events.emplace_back(o.start_time, 1);
    events.emplace_back(o.start_time + o.latency, -1);
  }
  std::sort(events.begin(), events.end());  // at equal times -1 sorts first: intervals are half-open
  int64_t current = 0;
  for (const auto& e : events) {
    current += e.second;
    m->max_concurrent_requests = std::max(m->max_concurrent_requests, current);
  }
  m->max_output_tokens_per_s = *std::max_element(tokens_per_second.begin(), tokens_per_second.end());
}

}  // namespace

BenchmarkMetrics calculate_metrics(const std::vector<RequestOutput>& outputs, double duration_s,
                                   const std::vector<double>& percentiles,
                                   const std::function<int64_t(const std::string&)>& count_tokens) {
  BenchmarkMetrics m;
  std::vector<double> ttfts, tpots, itls, e2els;
  for (const RequestOutput& o : outputs) {
    if (!o.success) {
      m.output_lens.push_back(0);
      ++m.failed;
      continue;
    }
    const int64_t output_len = output_len_of(o, count_tokens);
    m.output_lens.push_back(output_len);
    m.total_input += o.prompt_len;
    m.total_output += output_len;
    if (output_len > 1) tpots.push_back((o.latency - o.ttft) / static_cast<double>(output_len - 1));
    itls.insert(itls.end(), o.itl.begin(), o.itl.end());
    ttfts.push_back(o.ttft);
    e2els.push_back(o.latency);
    ++m.completed;
  }
  const double d = duration_s > 0 ? duration_s : 1e-9;
  m.request_throughput = static_cast<double>(m.completed) / d;
  m.output_throughput = static_cast<double>(m.total_output) / d;
  m.total_token_throughput = static_cast<double>(m.total_input + m.total_output) / d;
  m.ttft = latency_stats(ttfts, percentiles);
  m.tpot = latency_stats(tpots, percentiles);
  m.itl = latency_stats(itls, percentiles);
  m.e2el = latency_stats(e2els, percentiles);
  peak_figures(outputs, &m);
  return m;
}

}  // namespace llmserve::cli

// ServerMetrics: vLLM's Prometheus metrics under the `llmserve:` prefix with a model_name label — gauges of the
// scheduler state, token and request counters, and latency histograms with vLLM's buckets — fed from the
// frontend's IterationStats. Invariant: counters only grow; histogram bucket counts are cumulative on output
// and the +Inf bucket equals _count. Thread-safe (one mutex; record() runs on the output thread).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "frontend/async_llm.h"

namespace llmserve::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  const std::vector<double> &upper_bounds() const { return bounds_; }
  // Non-cumulative counts per bucket; one more entry than upper_bounds() (the +Inf bucket).
  const std::vector<uint64_t> &bucket_counts() const { return counts_; }
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

// vLLM's bucket sets.
std::vector<double> ttft_buckets();
std::vector<double> inter_token_buckets();
std::vector<double> request_latency_buckets();
// 1, 2, 5, 10, 20, 50, ... up to `max_value` (vLLM's build_1_2_5_buckets).
std::vector<double> buckets_1_2_5(int64_t max_value);

class ServerMetrics {
 public:
  ServerMetrics(std::string model_name, int64_t max_model_len);

  void record(const IterationStats &stats);
  // The Prometheus text exposition format (version 0.0.4).
  std::string render() const;

  // For tests and the request log.
  struct Gauges {
    int64_t num_requests_running = 0;
    int64_t num_requests_waiting = 0;
    double kv_cache_usage = 0.0;
  };
  Gauges gauges() const;

 private:
  mutable std::mutex mu_;
  std::string label_;  // model_name="..." (escaped)
  Gauges gauges_;
  uint64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  uint64_t prefix_cache_queries_ = 0, prefix_cache_hits_ = 0, num_preemptions_ = 0;
  std::map<std::string, uint64_t> request_success_;  // finished_reason -> count
  Histogram ttft_, itl_, tpot_, e2e_, queue_, prefill_, decode_, inference_;
  Histogram request_prompt_tokens_, request_generation_tokens_, iteration_tokens_;
};

}  // namespace llmserve::server

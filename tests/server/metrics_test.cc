// Metrics: histogram buckets against a direct count, counters and gauges from IterationStats, and the
// Prometheus text parsed back line by line.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <sstream>

namespace llmserve::server {
namespace {

// name{labels} -> value, from the exposition text.
std::map<std::string, double> parse_samples(const std::string &text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

TEST(MetricsTest, HistogramMatchesADirectCount) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> dist(0.0, 3.0);
  Histogram h(ttft_buckets());
  std::vector<double> values;
  for (int i = 0; i < 5000; ++i) {
    values.push_back(dist(rng));
    h.observe(values.back());
  }
  h.observe(0.5);  // exactly on a bound: counted in that bucket (le)
  values.push_back(0.5);
  uint64_t cumulative = 0;
  for (size_t b = 0; b < h.upper_bounds().size(); ++b) {
    cumulative += h.bucket_counts()[b];
    uint64_t expected = 0;
    for (double v : values) expected += v <= h.upper_bounds()[b];
    EXPECT_EQ(cumulative, expected) << "le=" << h.upper_bounds()[b];
  }
  EXPECT_EQ(h.count(), values.size());
}

TEST(MetricsTest, Buckets125) {
  EXPECT_EQ(buckets_1_2_5(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(buckets_1_2_5(7), (std::vector<double>{1, 2, 5}));
}

TEST(MetricsTest, RecordAndRender) {
  ServerMetrics m("my \"model\"", 512);
  IterationStats s;
  s.num_prompt_tokens = 10;
  s.num_generation_tokens = 3;
  s.time_to_first_tokens = {0.003, 0.2};
  s.inter_token_latencies = {0.02};
  FinishedRequestStats f;
  f.finish_reason = FinishReason::kLength;
  f.e2e_latency = 1.2;
  f.num_prompt_tokens = 10;
  f.num_generation_tokens = 4;
  f.decode_time = 0.3;
  s.finished_requests = {f};
  s.scheduler_stats.num_running_reqs = 2;
  s.scheduler_stats.num_waiting_reqs = 1;
  s.scheduler_stats.kv_cache_usage = 0.25;
  s.scheduler_stats.prefix_cache_queries = 32;
  s.scheduler_stats.prefix_cache_hits = 16;
  m.record(s);
  m.record(s);
  s.scheduler_stats.num_running_reqs = 0;
  s.scheduler_stats.kv_cache_usage = 0.0;
  m.record(s);
  const auto samples = parse_samples(m.render());
  const std::string l = "{model_name=\"my \\\"model\\\"\"}";
  EXPECT_EQ(samples.at("llmserve:num_requests_running" + l), 0);
  EXPECT_EQ(samples.at("llmserve:num_requests_waiting" + l), 1);
  EXPECT_EQ(samples.at("llmserve:kv_cache_usage_perc" + l), 0);
  EXPECT_EQ(samples.at("llmserve:prompt_tokens_total" + l), 30);
  EXPECT_EQ(samples.at("llmserve:generation_tokens_total" + l), 9);
  EXPECT_EQ(samples.at("llmserve:prefix_cache_queries_total" + l), 96);
  EXPECT_EQ(samples.at("llmserve:prefix_cache_hits_total" + l), 48);
  EXPECT_EQ(samples.at("llmserve:request_success_total{model_name=\"my \\\"model\\\"\",finished_reason=\"length\"}"),
            3);
  EXPECT_EQ(samples.at("llmserve:request_success_total{model_name=\"my \\\"model\\\"\",finished_reason=\"stop\"}"), 0);
  const std::string lb = "{model_name=\"my \\\"model\\\"\",le=";
  EXPECT_EQ(samples.at("llmserve:time_to_first_token_seconds_bucket" + lb + "\"0.005\"}"), 3);
  EXPECT_EQ(samples.at("llmserve:time_to_first_token_seconds_bucket" + lb + "\"+Inf\"}"), 6);
  EXPECT_EQ(samples.at("llmserve:time_to_first_token_seconds_count" + l), 6);
  EXPECT_NEAR(samples.at("llmserve:time_to_first_token_seconds_sum" + l), 3 * 0.203, 1e-12);
  EXPECT_EQ(samples.at("llmserve:e2e_request_latency_seconds_bucket" + lb + "\"1\"}"), 0);
  EXPECT_EQ(samples.at("llmserve:e2e_request_latency_seconds_bucket" + lb + "\"1.5\"}"), 3);
  EXPECT_EQ(samples.at("llmserve:inter_token_latency_seconds_count" + l), 3);
  EXPECT_NEAR(samples.at("llmserve:request_time_per_output_token_seconds_sum" + l), 3 * 0.1, 1e-12);
  for (const char *h : {"request_queue_time_seconds", "request_prompt_tokens", "request_generation_tokens"}) {
    EXPECT_EQ(samples.at(std::string("llmserve:") + h + "_count" + l), 3) << h;
  }
}

}  // namespace
}  // namespace llmserve::server

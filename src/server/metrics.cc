// Prometheus metrics: recording from IterationStats and rendering the text format.
#include "server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

namespace llmserve::server {
namespace {

std::string escape_label(const std::string &v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Shortest text that reads back as the same double ("0.005", not "0.0050000000000000001").
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

void header(std::ostringstream &os, const std::string &name, const char *type, const char *help) {
  os << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
}

void render_histogram(std::ostringstream &os, const std::string &name, const char *help, const std::string &label,
                      const Histogram &h) {
  header(os, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.upper_bounds().size(); ++i) {
    cumulative += h.bucket_counts()[i];
    os << name << "_bucket{" << label << ",le=\"" << num(h.upper_bounds()[i]) << "\"} " << cumulative << "\n";
  }
  os << name << "_bucket{" << label << ",le=\"+Inf\"} " << h.count() << "\n";
  os << name << "_sum{" << label << "} " << num(h.sum()) << "\n";
  os << name << "_count{" << label << "} " << h.count() << "\n";
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  // Prometheus buckets are "less than or equal": the first bound >= v.
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[i];
  sum_ += v;
  ++count_;
}

std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}

std::vector<double> inter_token_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}

std::vector<double> request_latency_buckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

std::vector<double> buckets_1_2_5(int64_t max_value) {
  std::vector<double> out;
  for (double exponent = 1;; exponent *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = m * exponent;
      if (v > static_cast<double>(max_value)) return out;
      out.push_back(v);
    }
  }
}

ServerMetrics::ServerMetrics(std::string model_name, int64_t max_model_len)
    : label_("model_name=\"" + escape_label(model_name) + "\""),
      ttft_(ttft_buckets()),
      itl_(inter_token_buckets()),
      tpot_(inter_token_buckets()),
      e2e_(request_latency_buckets()),
      queue_(request_latency_buckets()),
      prefill_(request_latency_buckets()),
      decode_(request_latency_buckets()),
      inference_(request_latency_buckets()),
      request_prompt_tokens_(buckets_1_2_5(std::max<int64_t>(1, max_model_len))),
      request_generation_tokens_(buckets_1_2_5(std::max<int64_t>(1, max_model_len))),
      iteration_tokens_({1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}) {}

void ServerMetrics::record(const IterationStats &s) {
  std::lock_guard<std::mutex> lock(mu_);
  const SchedulerStats &sch = s.scheduler_stats;
  gauges_.num_requests_running = sch.num_running_reqs;
  gauges_.num_requests_waiting = sch.num_waiting_reqs;
  gauges_.kv_cache_usage = sch.kv_cache_usage;
  prefix_cache_queries_ += static_cast<uint64_t>(std::max<int64_t>(0, sch.prefix_cache_queries));
  prefix_cache_hits_ += static_cast<uint64_t>(std::max<int64_t>(0, sch.prefix_cache_hits));
  num_preemptions_ += static_cast<uint64_t>(std::max<int64_t>(0, sch.num_preemptions));
  prompt_tokens_ += static_cast<uint64_t>(std::max<int64_t>(0, s.num_prompt_tokens));
  generation_tokens_ += static_cast<uint64_t>(std::max<int64_t>(0, s.num_generation_tokens));
  if (s.num_prompt_tokens + s.num_generation_tokens > 0) {
    iteration_tokens_.observe(static_cast<double>(s.num_prompt_tokens + s.num_generation_tokens));
  }
  for (double t : s.time_to_first_tokens) ttft_.observe(t);
  for (double t : s.inter_token_latencies) itl_.observe(t);
  for (const FinishedRequestStats &f : s.finished_requests) {
    ++request_success_[finish_reason_name(f.finish_reason)];
    e2e_.observe(f.e2e_latency);
    queue_.observe(f.queued_time);
    prefill_.observe(f.prefill_time);
    decode_.observe(f.decode_time);
    inference_.observe(f.prefill_time + f.decode_time);
    request_prompt_tokens_.observe(static_cast<double>(f.num_prompt_tokens));
    request_generation_tokens_.observe(static_cast<double>(f.num_generation_tokens));
    if (f.num_generation_tokens > 1) tpot_.observe(f.decode_time / static_cast<double>(f.num_generation_tokens - 1));
  }
}

ServerMetrics::Gauges ServerMetrics::gauges() const {
  std::lock_guard<std::mutex> lock(mu_);
  return gauges_;
}

std::string ServerMetrics::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream os;
  const std::string p = "llmserve:";
  auto gauge = [&](const char *name, const char *help, double v) {
    header(os, p + name, "gauge", help);
    os << p << name << "{" << label_ << "} " << num(v) << "\n";
  };
  auto counter = [&](const char *name, const char *help, uint64_t v) {
    header(os, p + name + "_total", "counter", help);
    os << p << name << "_total{" << label_ << "} " << v << "\n";
  };
  gauge("num_requests_running", "Number of requests in model execution batches.",
        static_cast<double>(gauges_.num_requests_running));
  gauge("num_requests_waiting", "Number of requests waiting to be processed.",
        static_cast<double>(gauges_.num_requests_waiting));
  gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", gauges_.kv_cache_usage);
  counter("prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", prefix_cache_queries_);
  counter("prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", prefix_cache_hits_);
  counter("num_preemptions", "Cumulative number of preemptions from the engine.", num_preemptions_);
  counter("prompt_tokens", "Number of prefill tokens processed.", prompt_tokens_);
  counter("generation_tokens", "Number of generation tokens processed.", generation_tokens_);
  header(os, p + "request_success_total", "counter", "Count of successfully processed requests.");
  for (const char *reason : {"stop", "length", "abort"}) {
    auto it = request_success_.find(reason);
    os << p << "request_success_total{" << label_ << ",finished_reason=\"" << reason << "\"} "
       << (it == request_success_.end() ? 0 : it->second) << "\n";
  }
  render_histogram(os, p + "request_prompt_tokens", "Number of prefill tokens processed.", label_,
                   request_prompt_tokens_);
  render_histogram(os, p + "request_generation_tokens", "Number of generation tokens processed.", label_,
                   request_generation_tokens_);
  render_histogram(os, p + "iteration_tokens_total", "Histogram of number of tokens per engine_step.", label_,
                   iteration_tokens_);
  render_histogram(os, p + "time_to_first_token_seconds", "Histogram of time to first token in seconds.", label_,
                   ttft_);
  render_histogram(os, p + "inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", label_, itl_);
  render_histogram(os, p + "request_time_per_output_token_seconds",
                   "Histogram of time_per_output_token_seconds per request.", label_, tpot_);
  render_histogram(os, p + "e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", label_, e2e_);
  render_histogram(os, p + "request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                   label_, queue_);
  render_histogram(os, p + "request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
                   label_, inference_);
  render_histogram(os, p + "request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
                   label_, prefill_);
  render_histogram(os, p + "request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
                   label_, decode_);
  return os.str();
}

}  // namespace llmserve::server

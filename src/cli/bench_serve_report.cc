// Serving-benchmark report (see bench_serve_report.h): the layout follows vLLM's so results compare line by line.
#include "cli/bench_serve_report.h"

#include <cmath>
#include <cstdio>
#include <ctime>

namespace llmserve::cli {
namespace {

struct MetricName {
  const char* key;     // ttft
  const char* label;   // TTFT
  const char* header;  // Time to First Token
};
constexpr MetricName kMetricNames[] = {{"ttft", "TTFT", "Time to First Token"},
                                       {"tpot", "TPOT", "Time per Output Token (excl. 1st token)"},
                                       {"itl", "ITL", "Inter-token Latency"},
                                       {"e2el", "E2EL", "End-to-end Latency"}};

const LatencyStats& stats_of(const BenchmarkMetrics& m, const std::string& key) {
  if (key == "ttft") return m.ttft;
  if (key == "tpot") return m.tpot;
  if (key == "itl") return m.itl;
  return m.e2el;
}

// Python's "{s:{c}^{n}}": centred, the odd fill character on the right.
std::string centred(const std::string& s, char fill, size_t width = 50) {
  if (s.size() >= width) return s;
  const size_t left = (width - s.size()) / 2;
  return std::string(left, fill) + s + std::string(width - s.size() - left, fill);
}

std::string row(const std::string& label, const std::string& value) {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "%-40s %-10s\n", label.c_str(), value.c_str());
  return buf;
}
std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

}  // namespace

std::string percentile_word(double p) {
  if (p == std::floor(p)) return std::to_string(static_cast<int64_t>(p));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", p);
  return buf;
}

std::string format_summary(const BenchmarkMetrics& m, const BenchRun& run, const ReportInfo& info) {
  std::string s;
  const std::vector<RequestOutput>& outs = run.outputs;
  int num_shown = 0;
  for (size_t i = 0; i < outs.size() && num_shown < 10; ++i) {
    if (outs[i].success) continue;
    if (num_shown == 0) s += "Failed requests during benchmark run detected (capping to 10):\n";
    s += "Error " + std::to_string(num_shown++) + " (request " + std::to_string(i) + "): " + outs[i].error + "\n";
  }
  s += centred(" Serving Benchmark Result ", '=') + "\n";
  s += row("Successful requests:", std::to_string(m.completed));
  s += row("Failed requests:", std::to_string(m.failed));
  if (info.max_concurrency > 0) s += row("Maximum request concurrency:", std::to_string(info.max_concurrency));
  if (!std::isinf(info.request_rate)) s += row("Request rate configured (RPS):", num(info.request_rate));
  s += row("Benchmark duration (s):", num(run.duration_s));
  s += row("Total input tokens:", std::to_string(m.total_input));
  s += row("Total generated tokens:", std::to_string(m.total_output));
  s += row("Request throughput (req/s):", num(m.request_throughput));
  s += row("Output token throughput (tok/s):", num(m.output_throughput));
  s += row("Peak output token throughput (tok/s):", num(m.max_output_tokens_per_s));
  s += row("Peak concurrent requests:", num(static_cast<double>(m.max_concurrent_requests)));
  s += row("Total Token throughput (tok/s):", num(m.total_token_throughput));
  for (const MetricName& name : kMetricNames) {
    bool selected = false;
    for (const std::string& k : info.percentile_metrics) selected |= k == name.key;
    if (!selected) continue;
    const LatencyStats& st = stats_of(m, name.key);
    s += centred(name.header, '-') + "\n";
    s += row(std::string("Mean ") + name.label + " (ms):", num(st.mean_ms));
    s += row(std::string("Median ") + name.label + " (ms):", num(st.median_ms));
    for (const auto& [p, v] : st.percentiles_ms) {
      std::string label = "P";  // built in steps: GCC 12 warns (-Wrestrict, falsely) on one long concatenation
      label += percentile_word(p);
      label += std::string(" ") + name.label + " (ms):";
      s += row(label, num(v));
    }
  }
  s += std::string(50, '=') + "\n";
  return s;
}

nlohmann::ordered_json result_json(const BenchmarkMetrics& m, const BenchRun& run, const ReportInfo& info) {
  nlohmann::ordered_json j;
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::strftime(date, sizeof(date), "%Y%m%d-%H%M%S", &tm);
  j["date"] = date;
  j["endpoint_type"] = info.backend;
  j["backend"] = info.backend;
  j["label"] = nullptr;
  j["model_id"] = run.model;
  j["tokenizer_id"] = info.tokenizer.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(info.tokenizer);
  j["base_url"] = info.base_url;
  j["endpoint"] = info.endpoint;
  j["num_prompts"] = info.num_prompts;
  // vLLM writes an infinite rate as the string "inf" (JSON has no infinity).
  if (std::isinf(info.request_rate)) {
    j["request_rate"] = "inf";
  } else {
    j["request_rate"] = info.request_rate;
  }
  j["burstiness"] = info.burstiness;
  j["max_concurrency"] = info.max_concurrency > 0 ? nlohmann::ordered_json(info.max_concurrency) : nullptr;
  j["duration"] = run.duration_s;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["total_input_tokens"] = m.total_input;
  j["total_output_tokens"] = m.total_output;
  j["request_throughput"] = m.request_throughput;
  j["request_goodput"] = nullptr;
  j["output_throughput"] = m.output_throughput;
  j["total_token_throughput"] = m.total_token_throughput;
  auto& input_lens = j["input_lens"] = nlohmann::ordered_json::array();
  j["output_lens"] = m.output_lens;
  auto& ttfts = j["ttfts"] = nlohmann::ordered_json::array();
  auto& itls = j["itls"] = nlohmann::ordered_json::array();
  auto& latencies = j["latencies"] = nlohmann::ordered_json::array();
  auto& start_times = j["start_times"] = nlohmann::ordered_json::array();
  auto& queue_times = j["queue_times"] = nlohmann::ordered_json::array();
  auto& texts = j["generated_texts"] = nlohmann::ordered_json::array();
  auto& errors = j["errors"] = nlohmann::ordered_json::array();
  for (const RequestOutput& o : run.outputs) {
    input_lens.push_back(o.prompt_len);
    ttfts.push_back(o.ttft);
    itls.push_back(o.itl);
    latencies.push_back(o.latency);
    start_times.push_back(o.start_time);
    queue_times.push_back(o.queue_time);
    texts.push_back(o.generated_text);
    errors.push_back(o.error);
  }
  j["max_output_tokens_per_s"] = m.max_output_tokens_per_s;
  j["max_concurrent_requests"] = m.max_concurrent_requests;
  for (const MetricName& name : kMetricNames) {
    bool selected = false;
    for (const std::string& k : info.percentile_metrics) selected |= k == name.key;
    if (!selected) continue;
    const LatencyStats& st = stats_of(m, name.key);
    const std::string key = name.key;
    j["mean_" + key + "_ms"] = st.mean_ms;
    j["median_" + key + "_ms"] = st.median_ms;
    j["std_" + key + "_ms"] = st.std_ms;
    for (const auto& [p, v] : st.percentiles_ms) {
      std::string name_p = "p";
      name_p += percentile_word(p);
      j[name_p + "_" + key + "_ms"] = v;
    }
  }
  return j;
}

}  // namespace llmserve::cli

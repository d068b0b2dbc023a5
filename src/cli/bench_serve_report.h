// What `llmserve bench serve` prints and saves: vLLM's "Serving Benchmark Result" block and its result JSON
// (the same key names, so vLLM's tooling reads our files), built from the metrics and the per-request records.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/bench_serve_metrics.h"
#include "cli/bench_serve_runner.h"

namespace llmserve::cli {

struct ReportInfo {
  std::string backend;  // "openai" or "openai-chat", as vLLM names them
  std::string base_url, endpoint, tokenizer;
  int64_t num_prompts = 0;
  double request_rate = 0;  // inf allowed
  double burstiness = 1.0;
  int64_t max_concurrency = 0;                  // 0: none
  std::vector<std::string> percentile_metrics;  // subset of ttft, tpot, itl, e2el, in print order
  std::vector<double> percentiles;              // e.g. {99}
};

// The key suffix vLLM uses for percentile p: "99" for 99.0, "99.9" for 99.9.
std::string percentile_word(double p);

std::string format_summary(const BenchmarkMetrics& m, const BenchRun& run, const ReportInfo& info);

// Every figure of the summary plus the per-request lists (input_lens, output_lens, ttfts, itls, latencies,
// start_times, generated_texts, errors) and the run's settings; seconds in lists, ms in statistics.
nlohmann::ordered_json result_json(const BenchmarkMetrics& m, const BenchRun& run, const ReportInfo& info);

}  // namespace llmserve::cli

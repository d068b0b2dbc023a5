// Serving-benchmark metrics with vLLM's definitions (vllm bench serve): what one streamed request measured, and
// the aggregate over a run. Times are seconds here and milliseconds only in the reported statistics.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace llmserve::cli {

// One request as the client saw it. On failure only `error` (never empty), `start_time` and `prompt_len` count.
struct RequestOutput {
  bool success = false;
  std::string error;           // "" when success
  double start_time = 0;       // s since the benchmark started, when the request was sent (after the semaphore)
  double queue_time = 0;       // s spent waiting for the --max-concurrency semaphore
  double ttft = 0;             // s from send to the first chunk carrying choices
  double latency = 0;          // s from send to the last chunk carrying choices (E2EL)
  std::vector<double> itl;     // s between consecutive choice chunks: one entry per chunk after the first
  int64_t prompt_len = 0;      // the server's usage.prompt_tokens when reported, else the dataset's length
  int64_t output_tokens = 0;   // usage.completion_tokens; 0 when the server sent no usage
  int64_t num_chunks = 0;      // chunks carrying choices
  std::string generated_text;  // concatenated text / delta.content
};

// mean / median / std (population, ddof 0) / percentiles of one latency family, all in ms.
struct LatencyStats {
  double mean_ms = 0, median_ms = 0, std_ms = 0;
  std::vector<std::pair<double, double>> percentiles_ms;  // (p, value)
};

struct BenchmarkMetrics {
  int64_t completed = 0, failed = 0;
  int64_t total_input = 0, total_output = 0;
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;  // per s of duration
  LatencyStats ttft, tpot, itl, e2el;
  double max_output_tokens_per_s = 0;   // busiest whole second of the run, by token arrival times
  int64_t max_concurrent_requests = 0;  // peak number of successful requests in flight at once
  std::vector<int64_t> output_lens;     // per request, 0 for failed ones (vLLM's actual_output_lens)
};

// numpy.percentile with its default linear interpolation: rank p/100 * (n-1) between the sorted neighbours.
// p in [0, 100]; an empty list gives 0 (vLLM passes `values or 0`).
double percentile(std::vector<double> values, double p);
LatencyStats latency_stats(const std::vector<double>& seconds, const std::vector<double>& percentiles);

// Output tokens of a successful request: usage.completion_tokens when the server reported it; else the
// tokenizer's count of the generated text when `count_tokens` is set; else the number of chunks with choices
// (vLLM falls back to 1 there; a chunk per token is what every OpenAI-style server streams).
int64_t output_len_of(const RequestOutput& out, const std::function<int64_t(const std::string&)>& count_tokens);

// Per successful request: TPOT = (latency - ttft) / (output_len - 1), counted only when output_len > 1; every
// ITL entry of every request joins one list. `duration_s` > 0 is the wall time of the whole run.
BenchmarkMetrics calculate_metrics(const std::vector<RequestOutput>& outputs, double duration_s,
                                   const std::vector<double>& percentiles,
                                   const std::function<int64_t(const std::string&)>& count_tokens);

}  // namespace llmserve::cli

// Runs one serving benchmark against an OpenAI-compatible server: every request is its own coroutine on one
// io_context, released at its arrival time and gated by a FIFO semaphore of --max-concurrency slots, as vLLM's
// benchmark does with asyncio. Request failures are recorded per request; only setup failures are a Status.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/bench_serve_metrics.h"
#include "cli/bench_serve_workload.h"
#include "core/status.h"

namespace llmserve::cli {

struct BenchRunConfig {
  std::string base_url;                      // http://host:port
  std::string endpoint = "/v1/completions";  // or /v1/chat/completions (text prompts only)
  std::string model;                         // empty: the first id of GET /v1/models
  std::string api_key;                       // sent as "Authorization: Bearer ..." when not empty
  std::vector<double> arrival_times;         // s after the start, one per request (bench_serve_workload.h)
  int64_t max_concurrency = 0;               // 0: unlimited
  double temperature = 0.0;
  bool ignore_eos = false;
  int64_t timeout_s = 6 * 3600;  // per network operation
  // The first request is sent once before the run (not measured); its failure aborts the benchmark, after
  // retrying every second for up to this many seconds (a server still loading its model).
  int64_t ready_check_timeout_s = 0;
};

struct BenchRun {
  std::string model;                   // the model name sent
  std::vector<RequestOutput> outputs;  // in dataset order
  double duration_s = 0;               // first arrival slot to the end of the last request
};

bool is_chat_endpoint(const std::string& endpoint);

// The JSON body of one streamed request, as vLLM's openai / openai-chat backends send it.
std::string make_payload(const SampleRequest& request, const std::string& model, bool chat, double temperature,
                         bool ignore_eos);

// Unavailable when the server cannot be reached or the initial test request fails (the message says why);
// InvalidArgument for a bad URL or configuration.
StatusOr<BenchRun> run_benchmark(const BenchRunConfig& config, const std::vector<SampleRequest>& requests);

}  // namespace llmserve::cli

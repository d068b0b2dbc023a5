// `llmserve bench serve`: vLLM's `vllm bench serve` for any OpenAI-compatible server — random prompts sent as
// streamed completions at a Poisson (or gamma) request rate under a concurrency cap; prints vLLM's summary and
// saves its result JSON. A failed request is reported with its error; only setup failures end the run early.
#include "cli/bench_serve.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include "cli/bench_floors.h"
#include "cli/bench_serve_report.h"
#include "cli/bench_serve_runner.h"
#include "cli/bench_serve_workload.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "core/thread_pool.h"
#include "kernels/op_registry.h"
#include "model/model_config.h"
#include "model/model_registry.h"
#include "tokenizer/tokenizer.h"

namespace llmserve::cli {
namespace {

struct ServeFlags {
  std::string base_url, host = "127.0.0.1", endpoint = "/v1/completions", model, api_key, tokenizer;
  std::string dataset = "random", save_result, percentile_metrics = "ttft,tpot,itl,e2el", metric_percentiles = "99";
  int64_t port = 8000, input_len = 1024, output_len = 128, vocab_size = 256, num_prompts = 1000;
  int64_t max_concurrency = 0, seed = 0, timeout_s = 6 * 3600, ready_check_timeout_s = 0;
  double range_ratio = 0.0, request_rate = INFINITY, burstiness = 1.0, temperature = 0.0;
  bool ignore_eos = false;
  // The floor (bench_floors.h): the served model's config.json and where and in which dtype it runs.
  std::string floor_config, floor_device = "cpu", floor_dtype = "auto";
  int64_t floor_num_threads = 0;
};

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream ss(text);
  for (std::string p; std::getline(ss, p, ',');) {
    if (!p.empty()) parts.push_back(p);
  }
  return parts;
}

Status validate(const ServeFlags& f, ReportInfo* info) {
  if (f.dataset != "random") return invalid_argument("--dataset-name '" + f.dataset + "': only 'random' is supported");
  if (!(f.request_rate > 0)) return invalid_argument("--request-rate must be > 0 or inf");
  if (!(f.burstiness > 0) || std::isinf(f.burstiness))
    return invalid_argument("--burstiness must be a positive number");
  if (f.max_concurrency < 0) return invalid_argument("--max-concurrency must be >= 0 (0: unlimited)");
  if (f.timeout_s < 1) return invalid_argument("--request-timeout must be at least 1 s");
  if (f.ready_check_timeout_s < 0) return invalid_argument("--ready-check-timeout-sec must be >= 0");
  info->percentile_metrics = split_commas(f.percentile_metrics);
  for (const std::string& m : info->percentile_metrics) {
    if (m != "ttft" && m != "tpot" && m != "itl" && m != "e2el") {
      return invalid_argument("--percentile-metrics: unknown metric '" + m + "' (expected ttft, tpot, itl, e2el)");
    }
  }
  for (const std::string& p : split_commas(f.metric_percentiles)) {
    char* end = nullptr;
    const double v = std::strtod(p.c_str(), &end);
    if (*end != '\0' || !(v >= 0 && v <= 100)) {
      return invalid_argument("--metric-percentiles: '" + p + "' is not a number in [0, 100]");
    }
    info->percentiles.push_back(v);
  }
  Device device;
  std::optional<DType> dtype;
  if (!parse_device_flag(f.floor_device, &device)) {
    return invalid_argument("--floor-device '" + f.floor_device + "': expected cpu, cuda or cuda:N");
  }
  if (!parse_dtype_flag(f.floor_dtype, &dtype)) {
    return invalid_argument("--floor-dtype '" + f.floor_dtype + "': expected auto, float32, bfloat16 or float16");
  }
  if (f.floor_num_threads < 0) return invalid_argument("--floor-num-threads must be >= 0 (0: every core)");
  if (f.floor_config.empty() && (f.floor_device != "cpu" || f.floor_dtype != "auto" || f.floor_num_threads != 0)) {
    return invalid_argument("--floor-device, --floor-dtype and --floor-num-threads need --floor-config");
  }
  if (is_chat_endpoint(f.endpoint) && f.tokenizer.empty()) {
    return invalid_argument("--endpoint " + f.endpoint + " takes text prompts: give --tokenizer DIR to build them");
  }
  return ok_status();
}

// The run's floor for the model the server runs (--floor-config): the completed requests' prompts and output
// tokens at the rates this machine measures now, after the run (the server idle); decode rows per step are at most
// the client's --max-concurrency (else every request). The mean TPOT floor spreads the whole floor over those
// decode steps: a request's tokens wait for the other requests' prefills too.
Status print_floor(const ServeFlags& f, const BenchmarkMetrics& m, const BenchRun& run, double elapsed_s) {
  ASSIGN_OR_RETURN(ModelConfig config, load_model_config(f.floor_config));
  ModelLoadOptions options;
  parse_device_flag(f.floor_device, &options.device);  // both checked by validate()
  parse_dtype_flag(f.floor_dtype, &options.weight_dtype);
  if (!options.device.is_cpu() && !ops::backend_built(DeviceType::kCUDA)) {
    return invalid_argument("--floor-device " + f.floor_device + ": this build has no CUDA backend");
  }
  if (f.floor_num_threads > 0) ThreadPool::set_global_num_threads(static_cast<int>(f.floor_num_threads));
  const DType weight_dtype = resolve_weight_dtype(config, options);
  // Activations and the KV cache: f32 on the CPU, the weight dtype on CUDA (as the model runs them).
  const DType kv_dtype = options.device.is_cpu() ? DType::kF32 : weight_dtype;
  RunWork work;
  for (const RequestOutput& out : run.outputs) {
    if (out.success) work.prompt_lens.push_back(out.prompt_len);
  }
  work.output_tokens = m.total_output;
  work.max_concurrent = f.max_concurrency > 0 ? f.max_concurrency : static_cast<int64_t>(work.prompt_lens.size());
  int64_t prompt_tokens = 0;
  for (int64_t len : work.prompt_lens) prompt_tokens += len;
  const MeasuredRates rates = measure_rates(options.device, weight_dtype, config, std::max<int64_t>(1, prompt_tokens));
  const RunFloor floor = run_floor(config, weight_dtype, kv_dtype, rates, work);
  std::printf("measured: %s\n", rates.description.c_str());
  std::printf("%s\n", describe_run_floor(floor, work, options.device.is_cpu(), elapsed_s).c_str());
  if (floor.decode_steps > 0) {
    std::printf("mean TPOT floor: %.2f ms (the floor over its %lld decode steps); mean TPOT %.2f ms\n",
                1e3 * floor.seconds / floor.decode_steps, static_cast<long long>(floor.decode_steps), m.tpot.mean_ms);
  }
  return ok_status();
}

int run_bench_serve_impl(const std::vector<std::string>& args) {
  ServeFlags f;
  ArgParser parser("bench serve",
                   "Benchmarks an OpenAI-compatible server with streamed requests (vLLM's `vllm bench serve`):\n"
                   "request / token throughput and TTFT, TPOT, ITL, E2EL statistics.");
  parser.add_string("base-url", &f.base_url, "server URL, http://HOST:PORT (default: http://--host:--port)");
  parser.add_string("host", &f.host, "server host when no --base-url (default 127.0.0.1)");
  parser.add_int("port", &f.port, "server port when no --base-url (default 8000)");
  parser.add_string("endpoint", &f.endpoint, "/v1/completions (default) or /v1/chat/completions");
  parser.add_string("model", &f.model, "model name to request (default: the first of GET /v1/models)");
  parser.add_string("api-key", &f.api_key, "Bearer token (default: $OPENAI_API_KEY)");
  parser.add_string("dataset-name", &f.dataset, "random (the only dataset)");
  parser.add_string("dataset", &f.dataset, "alias of --dataset-name");
  parser.add_int("random-input-len", &f.input_len, "prompt tokens per request (default 1024)");
  parser.add_int("random-output-len", &f.output_len, "max_tokens per request (default 128)");
  parser.add_float("random-range-ratio", &f.range_ratio, "lengths uniform in len*[1-r, 1+r], r in [0, 1) (default 0)");
  parser.add_int("random-vocab-size", &f.vocab_size, "without --tokenizer: prompt ids from [0, N) (default 256)");
  parser.add_string("tokenizer", &f.tokenizer,
                    "tokenizer directory: prompts become text of exactly the input length; counts output tokens\n"
                    "when the server sends no usage (without it prompts are token-id lists)");
  parser.add_int("num-prompts", &f.num_prompts, "requests to send (default 1000)");
  parser.add_float("request-rate", &f.request_rate, "requests per second, or inf to send all at once (default inf)");
  parser.add_float("burstiness", &f.burstiness, "gamma shape of the arrival gaps; 1 = Poisson (default 1)");
  parser.add_int("max-concurrency", &f.max_concurrency, "most requests in flight at once (default 0: unlimited)");
  parser.add_int("seed", &f.seed, "seed of prompts, lengths and arrivals (default 0)");
  parser.add_float("temperature", &f.temperature, "sampling temperature sent (default 0)");
  parser.add_bool("ignore-eos", &f.ignore_eos, "ask the server to ignore EOS (vLLM extension), for exact lengths");
  parser.add_string("save-result", &f.save_result, "write the result JSON (vLLM's keys) to this file");
  parser.add_string("percentile-metrics", &f.percentile_metrics, "metrics to report (default ttft,tpot,itl,e2el)");
  parser.add_string("metric-percentiles", &f.metric_percentiles, "percentiles to report (default 99)");
  parser.add_int("request-timeout", &f.timeout_s, "seconds to wait for any one network operation (default 21600)");
  parser.add_int("ready-check-timeout-sec", &f.ready_check_timeout_s,
                 "retry the initial test request for up to this many seconds (default 0: one try)");
  parser.add_string("floor-config", &f.floor_config,
                    "config.json (or model folder) of the served model: print the run's floor and its ratio, from "
                    "rates measured here after the run (default: no floor)");
  parser.add_string("floor-device", &f.floor_device, "where the server runs the model: cpu (default) | cuda[:N]");
  parser.add_string("floor-dtype", &f.floor_dtype, "the server's --dtype (default auto)");
  parser.add_int("floor-num-threads", &f.floor_num_threads, "CPU threads of the server (default 0: every core)");
  if (int code = parse_or_exit_code(parser, args); code >= 0) return code;
  ReportInfo info;
  if (Status s = validate(f, &info); !s.ok()) return fail(s);
  if (f.base_url.empty()) f.base_url = "http://" + f.host + ":" + std::to_string(f.port);
  if (f.api_key.empty()) {
    if (const char* key = std::getenv("OPENAI_API_KEY")) f.api_key = key;
  }

  std::unique_ptr<Tokenizer> tokenizer;
  if (!f.tokenizer.empty()) {
    StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::from_dir(f.tokenizer);
    if (!t.ok()) return fail(t.status().with_context("--tokenizer"));
    tokenizer = std::move(*t);
  }
  std::mt19937_64 rng(static_cast<uint64_t>(f.seed));
  RandomDatasetOptions d{f.num_prompts, f.input_len, f.output_len, f.range_ratio, f.vocab_size};
  StatusOr<std::vector<SampleRequest>> requests = make_random_dataset(d, tokenizer.get(), rng);
  if (!requests.ok()) return fail(requests.status());

  BenchRunConfig c;
  c.base_url = f.base_url;
  c.endpoint = f.endpoint;
  c.model = f.model;
  c.api_key = f.api_key;
  c.arrival_times = arrival_times(f.num_prompts, f.request_rate, f.burstiness, rng);
  c.max_concurrency = f.max_concurrency;
  c.temperature = f.temperature;
  c.ignore_eos = f.ignore_eos;
  c.timeout_s = f.timeout_s;
  c.ready_check_timeout_s = f.ready_check_timeout_s;
  std::printf("Traffic request rate: %s\n",
              std::isinf(f.request_rate) ? "inf" : std::to_string(f.request_rate).c_str());
  std::printf(
      f.burstiness == std::floor(f.burstiness) ? "Burstiness factor: %.1f (%s)\n" : "Burstiness factor: %g (%s)\n",
      f.burstiness, f.burstiness == 1.0 ? "Poisson process" : "Gamma distribution");
  std::printf("Maximum request concurrency: %s\n",
              f.max_concurrency > 0 ? std::to_string(f.max_concurrency).c_str() : "None");
  std::fflush(stdout);
  StatusOr<BenchRun> run = run_benchmark(c, *requests);
  if (!run.ok()) return fail(run.status());

  std::function<int64_t(const std::string&)> count_tokens;
  if (tokenizer) {
    count_tokens = [&](const std::string& text) { return static_cast<int64_t>(tokenizer->encode(text, false).size()); };
  }
  const BenchmarkMetrics m = calculate_metrics(run->outputs, run->duration_s, info.percentiles, count_tokens);
  info.backend = is_chat_endpoint(f.endpoint) ? "openai-chat" : "openai";
  info.base_url = f.base_url;
  info.endpoint = f.endpoint;
  info.tokenizer = f.tokenizer;
  info.num_prompts = f.num_prompts;
  info.request_rate = f.request_rate;
  info.burstiness = f.burstiness;
  info.max_concurrency = f.max_concurrency;
  std::fputs(format_summary(m, *run, info).c_str(), stdout);
  std::fflush(stdout);
  if (!f.floor_config.empty()) {
    if (Status s = print_floor(f, m, *run, run->duration_s); !s.ok()) return fail(s.with_context("--floor-config"));
  }
  if (!f.save_result.empty()) {
    std::ofstream out(f.save_result);
    out << result_json(m, *run, info).dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    out.close();
    if (!out) return fail(invalid_argument("--save-result '" + f.save_result + "': cannot write the file"));
  }
  return 0;
}

}  // namespace

int run_bench_serve(const std::vector<std::string>& args) { return run_bench_serve_impl(args); }

}  // namespace llmserve::cli

// `llmserve bench latency`: prefill and decode throughput of one batch through the engine's ModelRunner (fed
// hand-made SchedulerOutputs, so no scheduler cost is timed), each printed beside its physical floor measured on
// the same machine in the same run (read bandwidth, GEMM rate) and the ratio.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include "cli/bench_serve.h"
#include "cli/bench_throughput.h"
#include "cli/command.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "model/model_registry.h"
#include "runtime/model_runner.h"

namespace llmserve::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Bytes read per second by the pool summing a buffer far larger than the caches: decode streams weights and KV
// the same way (reads only), so this, not memcpy, bounds it.
double measure_read_bandwidth() {
  const int64_t n = int64_t{128} << 20;  // floats: 512 MiB
  Tensor buf = Tensor::empty({n}, DType::kF32);
  buf.fill(1.0f);
  std::vector<double> sums(64, 0.0);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    auto start = Clock::now();
    parallel_for(n, int64_t{1} << 20, [&](int64_t b, int64_t e) {
      const float* p = buf.data<float>();
      float acc[8] = {};
      for (int64_t i = b; i + 8 <= e; i += 8) {
        for (int j = 0; j < 8; ++j) acc[j] += p[i + j];
      }
      sums[(b >> 20) % 64] += acc[0] + acc[7];  // keeps the loop alive
    });
    best = std::min(best, seconds_since(start));
  }
  return static_cast<double>(n) * sizeof(float) / best;
}

// FLOP/s of ops::linear with `weight_dtype` weights on a shape that reaches the GEMM library's peak.
double measure_gemm_rate(DType weight_dtype) {
  const int64_t m = 512, k = 2048, n = 2048;
  Tensor x = Tensor::empty({m, k}, DType::kF32), w = Tensor::empty({n, k}, weight_dtype);
  Tensor out = Tensor::empty({m, n}, DType::kF32);
  x.fill(0.5f);
  w.fill(0.25f);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    auto start = Clock::now();
    ops::linear(out, x, w, nullptr);
    best = std::min(best, seconds_since(start));
  }
  return 2.0 * m * k * n / best;
}

// Parameters read by every decode step: all projection matrices and the LM head (embedding rows are gathered).
double matmul_params(const ModelConfig& c) {
  const double h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  const double per_layer = h * q + 2 * h * kv + q * h + 3 * h * c.intermediate_size;
  return c.num_hidden_layers * per_layer + static_cast<double>(c.vocab_size) * h;
}

struct BenchFlags {
  std::string model, config_file, load_format = "auto", dtype = "auto";
  int64_t batch_size = 1, input_len = 128, output_len = 32, num_threads = 0, num_iters = 3, seed = 0;
};

int fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.message().c_str());
  return 1;
}

int run_latency(const std::vector<std::string>& args) {
  BenchFlags f;
  ArgParser parser("bench latency",
                   "Times one batch through the ModelRunner: prefill of batch-size x input-len\n"
                   "tokens, then output-len decode steps (greedy sampling included); prints tok/s\n"
                   "beside the memory-bandwidth / GEMM-rate floor.");
  parser.add_string("model", &f.model, "model directory");
  parser.add_string("config", &f.config_file, "config.json to use with --load-format dummy (no weights needed)");
  parser.add_string("dtype", &f.dtype, "weight dtype: auto (the checkpoint's) | float32 | bfloat16");
  parser.add_string("load-format", &f.load_format, "auto | safetensors | dummy");
  parser.add_int("batch-size", &f.batch_size, "sequences in the batch (default 1)");
  parser.add_int("input-len", &f.input_len, "prompt tokens per sequence (default 128)");
  parser.add_int("output-len", &f.output_len, "decode steps (default 32)");
  parser.add_int("num-threads", &f.num_threads, "CPU threads (default: all)");
  parser.add_int("num-iters", &f.num_iters, "timed repetitions; the best is reported (default 3)");
  parser.add_int("seed", &f.seed, "seed for dummy weights and prompts");
  if (int code = parse_or_exit_code(parser, args); code >= 0) return code;
  if (f.batch_size <= 0 || f.input_len <= 0 || f.output_len <= 0 || f.num_iters <= 0) {
    return fail(invalid_argument("--batch-size, --input-len, --output-len and --num-iters must be positive"));
  }
  if (f.num_threads > 0) ThreadPool::set_global_num_threads(static_cast<int>(f.num_threads));
  ModelLoadOptions options;
  if (!parse_load_format(f.load_format, &options.load_format)) {
    return fail(invalid_argument("--load-format '" + f.load_format + "': expected auto, safetensors or dummy"));
  }
  options.seed = static_cast<uint64_t>(f.seed);
  if (!parse_dtype_flag(f.dtype, &options.weight_dtype)) {
    return fail(invalid_argument("--dtype '" + f.dtype + "': expected auto, float32 or bfloat16"));
  }
  StatusOr<std::unique_ptr<CausalLM>> model = internal_error("model not loaded");
  if (!f.config_file.empty()) {
    StatusOr<ModelConfig> config = load_model_config(f.config_file);
    if (!config.ok()) return fail(config.status());
    model = load_model(f.model, options, &*config);
  } else if (!f.model.empty()) {
    model = load_model(f.model, options);
  } else {
    return fail(invalid_argument("give --model DIR, or --load-format dummy --config FILE"));
  }
  if (!model.ok()) return fail(model.status());
  const ModelConfig& c = (*model)->config();
  if (f.input_len + f.output_len > c.max_position_embeddings) {
    return fail(invalid_argument("input-len + output-len exceeds max_position_embeddings"));
  }

  // Every sequence gets its own blocks up front, enough for the prompt, the output and the last sampled token.
  ModelRunnerConfig runner_config;
  const int64_t blocks_per_seq =
      (f.input_len + f.output_len + 1 + runner_config.block_size - 1) / runner_config.block_size;
  if (f.batch_size * blocks_per_seq > INT32_MAX) return fail(invalid_argument("--batch-size x lengths too large"));
  runner_config.num_blocks = static_cast<int32_t>(f.batch_size * blocks_per_seq);
  ModelRunner runner(**model, runner_config);
  std::mt19937 rng(static_cast<uint32_t>(f.seed));
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(c.vocab_size - 1));
  SamplingParams greedy;
  greedy.temperature = 0.0;
  double best_prefill = 1e30, best_decode = 1e30;
  for (int64_t iter = 0; iter <= f.num_iters; ++iter) {  // iteration 0 warms up
    SchedulerOutput prefill;
    for (int64_t r = 0; r < f.batch_size; ++r) {
      NewRequestData& req = prefill.scheduled_new_reqs.emplace_back();
      req.req_id = std::to_string(r);
      for (int64_t i = 0; i < f.input_len; ++i) req.prompt_token_ids.push_back(token(rng));
      req.sampling_params = greedy;
      for (int64_t b = 0; b < blocks_per_seq; ++b)
        req.block_ids.push_back(static_cast<int32_t>(r * blocks_per_seq + b));
      prefill.num_scheduled_tokens.push_back({req.req_id, f.input_len});
      prefill.total_num_scheduled_tokens += f.input_len;
    }
    // The decode steps' inputs are built before the clock starts: each step computes one token per sequence.
    std::vector<SchedulerOutput> decode_steps(static_cast<size_t>(f.output_len));
    for (int64_t step = 0; step < f.output_len; ++step) {
      SchedulerOutput& d = decode_steps[static_cast<size_t>(step)];
      for (const NewRequestData& req : prefill.scheduled_new_reqs) {
        d.scheduled_cached_reqs.push_back({req.req_id, false, {}, f.input_len + step});
        d.num_scheduled_tokens.push_back({req.req_id, 1});
      }
      d.total_num_scheduled_tokens = f.batch_size;
    }
    auto start = Clock::now();
    StatusOr<ModelRunnerOutput> out = runner.execute(prefill);
    if (!out.ok()) return fail(out.status());
    const double prefill_s = seconds_since(start);
    start = Clock::now();
    for (const SchedulerOutput& d : decode_steps) {
      out = runner.execute(d);
      if (!out.ok()) return fail(out.status());
    }
    const double decode_s = seconds_since(start);
    SchedulerOutput finish;
    for (const NewRequestData& req : prefill.scheduled_new_reqs) finish.finished_req_ids.push_back(req.req_id);
    if (StatusOr<ModelRunnerOutput> done = runner.execute(finish); !done.ok()) return fail(done.status());
    if (iter > 0) {
      best_prefill = std::min(best_prefill, prefill_s);
      best_decode = std::min(best_decode, decode_s);
    }
  }

  const DType weight_dtype = resolve_weight_dtype(c, options);
  const double bandwidth = measure_read_bandwidth(), gemm_rate = measure_gemm_rate(weight_dtype);
  const double params = matmul_params(c);
  const double weight_bytes = params * dtype_size(weight_dtype);
  const double kv_bytes_per_token = 2.0 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * sizeof(float);
  const double avg_context = f.input_len + (f.output_len + 1) / 2.0;
  const double decode_step_bytes = weight_bytes + f.batch_size * avg_context * kv_bytes_per_token;
  const double decode_floor = f.output_len * decode_step_bytes / bandwidth;
  const double prefill_floor = 2.0 * params * f.batch_size * f.input_len / gemm_rate;
  const double prefill_tps = f.batch_size * f.input_len / best_prefill;
  const double decode_tps = f.batch_size * f.output_len / best_decode;

  std::printf("model: %s, %.1fM matmul params (%s weights), batch %lld, input %lld, output %lld, %d threads\n",
              c.architecture.c_str(), params / 1e6, std::string(dtype_name(weight_dtype)).c_str(),
              static_cast<long long>(f.batch_size), static_cast<long long>(f.input_len),
              static_cast<long long>(f.output_len), ThreadPool::global().num_threads());
  std::printf("measured: read bandwidth %.2f GB/s, GEMM (%s weights) %.1f GFLOP/s\n", bandwidth / 1e9,
              std::string(dtype_name(weight_dtype)).c_str(), gemm_rate / 1e9);
  std::printf("%-8s %12s %12s %14s %8s\n", "phase", "tok/s", "time (ms)", "floor (ms)", "ratio");
  std::printf("%-8s %12.1f %12.2f %14.2f %7.1f%%\n", "prefill", prefill_tps, best_prefill * 1e3, prefill_floor * 1e3,
              100.0 * prefill_floor / best_prefill);
  std::printf("%-8s %12.1f %12.2f %14.2f %7.1f%%\n", "decode", decode_tps, best_decode * 1e3, decode_floor * 1e3,
              100.0 * decode_floor / best_decode);
  std::printf(
      "floors: prefill = 2 x params x tokens / GEMM rate; decode = (weights %.1f MB + KV) per step / read "
      "bandwidth\n",
      weight_bytes / 1e6);
  return 0;
}

int run_bench(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] == "latency") return run_latency({args.begin() + 1, args.end()});
  if (!args.empty() && args[0] == "throughput") return run_bench_throughput({args.begin() + 1, args.end()});
  if (!args.empty() && args[0] == "serve") {
#ifdef LLMSERVE_WITH_BENCH_SERVE
    return run_bench_serve({args.begin() + 1, args.end()});
#else
    std::fprintf(stderr, "error: this llmserve was built without Boost (Beast/Asio): bench serve is unavailable\n");
    return 1;
#endif
  }
  std::fprintf(stderr, "usage: llmserve bench latency|throughput|serve [options]   (llmserve bench serve --help)\n");
  return args.size() == 1 && (args[0] == "--help" || args[0] == "-h") ? 0 : 2;
}

}  // namespace

LLMSERVE_REGISTER_COMMAND("bench",
                          "benchmarks: bench latency (prefill/decode tok/s vs floor), bench throughput, "
                          "bench serve (an OpenAI-compatible server)",
                          run_bench);

}  // namespace llmserve::cli

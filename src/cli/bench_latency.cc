// `llmserve bench latency`: prefill and decode throughput of one batch through the engine's ModelRunner (CPU or
// CUDA), each printed beside its physical floor measured on the same machine in the same run and the ratio. CPU:
// read bandwidth and the GEMM rate of ops::linear. CUDA: device-to-device copy bandwidth and the cuBLASLt GEMM rate
// (ops::linear) at the prefill's own shape, both timed with events.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include "cli/bench_serve.h"
#include "cli/bench_throughput.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "model/model_registry.h"
#include "runtime/model_runner.h"

#ifdef LLMSERVE_WITH_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>

#include "core/cuda_allocator.h"
#include "core/cuda_stream.h"
#include "model/device_weights.h"
#endif

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

#ifdef LLMSERVE_WITH_CUDA
// Median milliseconds of `fn` on the current stream over `reps` runs, timed with events, after one warm-up.
template <typename Fn>
double median_ms(int reps, Fn fn) {
  cudaStream_t stream = cuda::current_stream();
  cudaEvent_t start, stop;
  cuda::check_cuda(cudaEventCreate(&start), "cudaEventCreate");
  cuda::check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  fn();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    cuda::check_cuda(cudaEventRecord(start, stream), "cudaEventRecord");
    fn();
    cuda::check_cuda(cudaEventRecord(stop, stream), "cudaEventRecord");
    cuda::check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float t = 0;
    cuda::check_cuda(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Device memory bandwidth from a 2 GiB device-to-device copy, counting bytes read plus bytes written.
double measure_device_copy_bandwidth(Device device) {
  const size_t bytes = size_t{1} << 31;
  Tensor a = Tensor::empty({static_cast<int64_t>(bytes)}, DType::kU8, device);
  Tensor b = Tensor::empty({static_cast<int64_t>(bytes)}, DType::kU8, device);
  cuda::check_cuda(cudaMemsetAsync(a.raw_data(), 1, bytes, cuda::current_stream()), "cudaMemsetAsync");
  const double ms = median_ms(10, [&] {
    cuda::check_cuda(
        cudaMemcpyAsync(b.raw_data(), a.raw_data(), bytes, cudaMemcpyDeviceToDevice, cuda::current_stream()),
        "cudaMemcpyAsync");
  });
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3);
}

// A device tensor of uniform random values in [-1, 1) (never zeros: they run faster than real data).
Tensor random_device_tensor(Shape shape, DType dtype, Device device, uint32_t seed) {
  Tensor host = Tensor::empty(shape, DType::kF32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t i = 0; i < host.numel(); ++i) host.data<float>()[i] = u(rng);
  return upload_to_device(host.to(dtype), device);
}

// FLOP/s of ops::linear (cuBLASLt) for x [m, k] @ w [n, k]^T in `dtype`, on random data.
double measure_device_gemm_rate(Device device, DType dtype, int64_t m, int64_t n, int64_t k) {
  Tensor x = random_device_tensor({m, k}, dtype, device, 1), w = random_device_tensor({n, k}, dtype, device, 2);
  Tensor out = Tensor::empty({m, n}, dtype, device);
  const double ms = median_ms(10, [&] { ops::linear(out, x, w, nullptr); });
  return 2.0 * m * n * k / (ms * 1e-3);
}
#endif

// Parameters read by every decode step: all projection matrices and the LM head (embedding rows are gathered).
double matmul_params(const ModelConfig& c) {
  const double h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  const double per_layer = h * q + 2 * h * kv + q * h + 3 * h * c.intermediate_size;
  return c.num_hidden_layers * per_layer + static_cast<double>(c.vocab_size) * h;
}

struct BenchFlags {
  std::string model, config_file, load_format = "auto", dtype = "auto", device = "cpu";
  int64_t batch_size = 1, input_len = 128, output_len = 32, num_threads = 0, num_iters = 3, seed = 0;
};

int fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.message().c_str());
  return 1;
}

int run_latency(const std::vector<std::string>& args) {
  BenchFlags f;
  ArgParser parser("bench latency",
                   "Times one batch: prefill of batch-size x input-len tokens, then output-len\n"
                   "decode steps; prints tok/s beside the memory-bandwidth / GEMM-rate floor.");
  parser.add_string("model", &f.model, "model directory");
  parser.add_string("config", &f.config_file, "config.json to use with --load-format dummy (no weights needed)");
  parser.add_string("dtype", &f.dtype, "weight dtype: auto (the checkpoint's) | float32 | bfloat16 | float16");
  parser.add_string("load-format", &f.load_format, "auto | safetensors | dummy");
  parser.add_string("device", &f.device, "cpu (default) | cuda | cuda:N");
  parser.add_int("batch-size", &f.batch_size, "sequences in the batch (default 1)");
  parser.add_int("input-len", &f.input_len, "prompt tokens per sequence (default 128)");
  parser.add_int("output-len", &f.output_len, "decode steps (default 32)");
  parser.add_int("num-threads", &f.num_threads, "CPU threads (default: all)");
  parser.add_int("num-iters", &f.num_iters, "timed repetitions; the best is reported (default 3)");
  parser.add_int("seed", &f.seed, "seed for dummy weights and prompts");
  EngineFlags graph_flags;  // only the CUDA-graph flags are registered
  add_cuda_graph_flags(parser, &graph_flags);
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
    return fail(invalid_argument("--dtype '" + f.dtype + "': expected auto, float32, bfloat16 or float16"));
  }
  if (!parse_device_flag(f.device, &options.device)) {
    return fail(invalid_argument("--device '" + f.device + "': expected cpu, cuda or cuda:N"));
  }
  StatusOr<std::unique_ptr<CausalLM>> model = internal_error("model not loaded");
  const auto load_start = Clock::now();
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
  const double load_s = seconds_since(load_start);
  const ModelConfig& c = (*model)->config();
  if (f.input_len + f.output_len > c.max_position_embeddings) {
    return fail(invalid_argument("input-len + output-len exceeds max_position_embeddings"));
  }

  // The engine's ModelRunner, driven by hand-made SchedulerOutputs: one prefill step of every prompt, then
  // output-len decode steps; each step ends when its sampled ids are on the host.
  const int32_t block_size = 16;
  const int64_t blocks_per_seq = (f.input_len + f.output_len + 1 + block_size - 1) / block_size;
  ModelRunnerConfig rc;
  rc.block_size = block_size;
  rc.num_blocks = static_cast<int32_t>(f.batch_size * blocks_per_seq);
  rc.max_num_tokens = f.batch_size * f.input_len;
  rc.max_num_reqs = f.batch_size;
  rc.max_model_len = f.input_len + f.output_len + 1;
  StatusOr<CudaGraphFlags> graphs = resolve_cuda_graph_flags(graph_flags);
  if (!graphs.ok()) return fail(graphs.status());
  rc.cuda_graph_mode = graphs->mode;
  rc.cuda_graph_capture_sizes = graphs->capture_sizes;
  ModelRunner runner(**model, rc);
  std::mt19937 rng(static_cast<uint32_t>(f.seed));
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(c.vocab_size - 1));
  SamplingParams greedy;
  greedy.temperature = 0.0;
  greedy.ignore_eos = true;
  greedy.max_tokens = f.output_len + 1;
  double best_prefill = 1e30, best_decode = 1e30;
  for (int64_t iter = 0; iter <= f.num_iters; ++iter) {  // iteration 0 warms up
    SchedulerOutput prefill;
    std::vector<RequestId> ids;
    for (int64_t r = 0; r < f.batch_size; ++r) {
      NewRequestData n;
      n.req_id = std::to_string(iter) + "-" + std::to_string(r);
      for (int64_t i = 0; i < f.input_len; ++i) n.prompt_token_ids.push_back(token(rng));
      n.sampling_params = greedy;
      for (int64_t b = 0; b < blocks_per_seq; ++b) n.block_ids.push_back(static_cast<int32_t>(r * blocks_per_seq + b));
      prefill.num_scheduled_tokens.push_back({n.req_id, f.input_len});
      prefill.total_num_scheduled_tokens += f.input_len;
      ids.push_back(n.req_id);
      prefill.scheduled_new_reqs.push_back(std::move(n));
    }
    auto start = Clock::now();
    StatusOr<ModelRunnerOutput> out = runner.execute(prefill);
    if (!out.ok()) return fail(out.status());
    const double prefill_s = seconds_since(start);
    start = Clock::now();
    for (int64_t step = 0; step < f.output_len; ++step) {
      SchedulerOutput decode;
      for (int64_t r = 0; r < f.batch_size; ++r) {
        CachedRequestData cr;
        cr.req_id = ids[r];
        cr.num_computed_tokens = f.input_len + step;
        decode.scheduled_cached_reqs.push_back(std::move(cr));
        decode.num_scheduled_tokens.push_back({ids[r], 1});
      }
      decode.total_num_scheduled_tokens = f.batch_size;
      out = runner.execute(decode);
      if (!out.ok()) return fail(out.status());
    }
    const double decode_s = seconds_since(start);
    SchedulerOutput finish;
    finish.finished_req_ids = ids;
    if (StatusOr<ModelRunnerOutput> done = runner.execute(finish); !done.ok()) return fail(done.status());
    if (iter > 0) {
      best_prefill = std::min(best_prefill, prefill_s);
      best_decode = std::min(best_decode, decode_s);
    }
  }

  const DType weight_dtype = resolve_weight_dtype(c, options);
  const bool on_cuda = !options.device.is_cpu();
  double bandwidth = 0, gemm_rate = 0;
  if (on_cuda) {
#ifdef LLMSERVE_WITH_CUDA
    bandwidth = measure_device_copy_bandwidth(options.device);
    // The prefill's largest GEMM shape (gate_up: tokens x hidden -> 2 x intermediate) in the model's dtype.
    gemm_rate = measure_device_gemm_rate(options.device, weight_dtype, f.batch_size * f.input_len,
                                         2 * c.intermediate_size, c.hidden_size);
#endif
  } else {
    bandwidth = measure_read_bandwidth();
    gemm_rate = measure_gemm_rate(weight_dtype);
  }
  const double params = matmul_params(c);
  const double weight_bytes = params * dtype_size(weight_dtype);
  const double kv_bytes_per_token =
      2.0 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * dtype_size((*model)->activation_dtype());
  const double avg_context = f.input_len + (f.output_len + 1) / 2.0;
  const double decode_step_bytes = weight_bytes + f.batch_size * avg_context * kv_bytes_per_token;
  const double decode_floor = f.output_len * decode_step_bytes / bandwidth;
  const double prefill_floor = 2.0 * params * f.batch_size * f.input_len / gemm_rate;
  const double prefill_tps = f.batch_size * f.input_len / best_prefill;
  const double decode_tps = f.batch_size * f.output_len / best_decode;

  std::printf("model: %s, %.1fM matmul params (%s weights), batch %lld, input %lld, output %lld, %s\n",
              c.architecture.c_str(), params / 1e6, std::string(dtype_name(weight_dtype)).c_str(),
              static_cast<long long>(f.batch_size), static_cast<long long>(f.input_len),
              static_cast<long long>(f.output_len),
              on_cuda ? options.device.to_string().c_str()
                      : ("cpu, " + std::to_string(ThreadPool::global().num_threads()) + " threads").c_str());
  const std::vector<int64_t> graph_sizes = runner.cuda_graph_sizes();
  std::printf("cuda graphs: %s\n", graph_sizes.empty() ? "none (eager)"
                                                       : ("FULL decode, " + std::to_string(graph_sizes.size()) +
                                                          " sizes up to " + std::to_string(graph_sizes.back()) + ", " +
                                                          std::to_string(runner.cuda_graph_bytes() >> 20) + " MiB")
                                                             .c_str());
  std::printf("model load: %.2f s (%s)\n", load_s,
              f.load_format == "dummy" ? "dummy weights generated on the host" : "safetensors");
  if (on_cuda) {
    std::printf(
        "measured: device copy bandwidth %.1f GB/s (read + write), cuBLASLt GEMM (%s, %lld x %lld x %lld) "
        "%.1f TFLOP/s\n",
        bandwidth / 1e9, std::string(dtype_name(weight_dtype)).c_str(),
        static_cast<long long>(f.batch_size * f.input_len), static_cast<long long>(2 * c.intermediate_size),
        static_cast<long long>(c.hidden_size), gemm_rate / 1e12);
  } else {
    std::printf("measured: read bandwidth %.2f GB/s, GEMM (%s weights) %.1f GFLOP/s\n", bandwidth / 1e9,
                std::string(dtype_name(weight_dtype)).c_str(), gemm_rate / 1e9);
  }
  std::printf("%-8s %12s %12s %14s %8s\n", "phase", "tok/s", "time (ms)", "floor (ms)", "ratio");
  std::printf("%-8s %12.1f %12.2f %14.2f %7.1f%%\n", "prefill", prefill_tps, best_prefill * 1e3, prefill_floor * 1e3,
              100.0 * prefill_floor / best_prefill);
  std::printf("%-8s %12.1f %12.2f %14.2f %7.1f%%\n", "decode", decode_tps, best_decode * 1e3, decode_floor * 1e3,
              100.0 * decode_floor / best_decode);
  std::printf(
      "floors: prefill = 2 x params x tokens / GEMM rate; decode = (weights %.1f MB + KV %.1f MB) read per "
      "step / %s bandwidth\n",
      weight_bytes / 1e6, f.batch_size * avg_context * kv_bytes_per_token / 1e6, on_cuda ? "copy" : "read");
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

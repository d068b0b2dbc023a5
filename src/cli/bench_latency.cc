// `llmserve bench latency`: prefill and decode throughput of one batch through the engine's ModelRunner (CPU or
// CUDA), each printed beside its physical floor measured on the same machine in the same run and the ratio
// (bench_floors.h: the FLOPs actually executed, the weight-read floor where larger, the decode bytes).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>

#include "cli/bench_floors.h"
#include "cli/bench_serve.h"
#include "cli/bench_throughput.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/gpu_busy_meter.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "model/model_registry.h"
#include "runtime/model_runner.h"

namespace llmserve::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct BenchFlags {
  std::string model, config_file, load_format = "auto", dtype = "auto", device = "cpu", quantization;
  int64_t batch_size = 1, input_len = 128, output_len = 32, num_threads = 0, num_iters = 3, seed = 0;
  int64_t kernel_breakdown = 0;          // CUDA: print the decode phase's N kernels with the most time
  std::optional<bool> async_scheduling;  // unset: on for cuda, off for cpu (as the engine)
  int64_t tensor_parallel_size = 1;
  int64_t max_num_batched_tokens = 0;  // prefill tokens per step; 0: the whole batch's prompts in one step
};

// The copies of a metered phase and the CUDA API calls in it that stalled the host (total over all of them).
void print_copies_and_slow_calls(const char* phase, const GpuBusyMeter& meter) {
  for (const GpuBusyMeter::KernelTime& t : meter.copy_times()) {
    std::printf("  %s copies %9.1f us %5lld calls  %s\n", phase, t.total_us, static_cast<long long>(t.count),
                t.name.c_str());
  }
  for (const GpuBusyMeter::KernelTime& t : meter.slow_host_calls()) {
    std::printf("  %s host call >= %.0f us: %9.1f us %5lld calls  %s\n", phase, GpuBusyMeter::kSlowHostCallNs / 1e3,
                t.total_us, static_cast<long long>(t.count), t.name.c_str());
  }
}

int run_latency(const std::vector<std::string>& args) {
  BenchFlags f;
  ArgParser parser("bench latency",
                   "Times one batch: prefill of batch-size x input-len tokens, then output-len\n"
                   "decode steps; prints tok/s beside the memory-bandwidth / GEMM-rate floor.");
  std::vector<std::string> positional;
  parser.set_positional("[MODEL]", &positional);
  parser.add_string("model", &f.model, "model folder or Hugging Face model id");
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
  parser.add_bool("async-scheduling", &f.async_scheduling,
                  "queue decode step N+1 before waiting for step N's ids, as the engine's batch queue does "
                  "(default: on for cuda, off for cpu; --no-async-scheduling)");
  parser.add_int("kernel-breakdown", &f.kernel_breakdown,
                 "cuda: print the N kernels with the most time in the last prefill and decode phases, per step "
                 "(CUPTI)");
  parser.add_int("max-num-batched-tokens", &f.max_num_batched_tokens,
                 "token budget of a prefill step: the prompts are prefilled in chunks of this many tokens, as the "
                 "engine's chunked prefill does (default: batch-size x input-len, one step); at least batch-size");
  add_quantization_flag(parser, &f.quantization);
  parser.add_int("tensor-parallel-size", &f.tensor_parallel_size,
                 "ranks the model is sharded over (-tp; default 1; cuda: one device each, NCCL)");
  parser.add_short("-tp", "tensor-parallel-size");
  EngineFlags graph_flags;  // only the CUDA-graph flags are registered
  add_cuda_graph_flags(parser, &graph_flags);
  if (int code = parse_or_exit_code(parser, args); code >= 0) return code;
  ModelFlags model_flags;
  model_flags.model = f.model;
  if (Status s = take_positional_model(positional, "bench latency", &model_flags); !s.ok()) return usage_error(s);
  if (Status s = resolve_model_flags(&model_flags); !s.ok()) return fail(s);  // an id: from the cache or the Hub
  f.model = model_flags.model;
  if (f.batch_size <= 0 || f.input_len <= 0 || f.output_len <= 0 || f.num_iters <= 0) {
    return usage_error(invalid_argument("--batch-size, --input-len, --output-len and --num-iters must be positive"));
  }
  if (f.kernel_breakdown < 0) return usage_error(invalid_argument("--kernel-breakdown must be >= 0"));
  if (f.max_num_batched_tokens == 0) f.max_num_batched_tokens = f.batch_size * f.input_len;
  if (f.max_num_batched_tokens < f.batch_size) {
    return usage_error(
        invalid_argument("--max-num-batched-tokens must be at least --batch-size (a decode step "
                         "schedules one token per sequence)"));
  }
  model_flags.load_format = f.load_format;
  model_flags.dtype = f.dtype;
  model_flags.device = f.device;
  model_flags.num_threads = f.num_threads;
  model_flags.quantization = f.quantization;
  model_flags.tensor_parallel_size = f.tensor_parallel_size;
  if (Status s = check_model_flags(model_flags); !s.ok()) return usage_error(s);
  if (f.num_threads > 0) ThreadPool::set_global_num_threads(static_cast<int>(f.num_threads));
  ModelLoadOptions options;
  parse_load_format(f.load_format, &options.load_format);  // the three checked by check_model_flags
  parse_dtype_flag(f.dtype, &options.weight_dtype);
  parse_device_flag(f.device, &options.device);
  options.seed = static_cast<uint64_t>(f.seed);
  if (f.kernel_breakdown > 0 && options.device.is_cpu()) {
    return usage_error(invalid_argument("--kernel-breakdown needs --device cuda (it reads CUPTI's kernel records)"));
  }
  options.quantization = f.quantization;
  StatusOr<std::unique_ptr<CausalLM>> model = internal_error("model not loaded");
  const auto load_start = Clock::now();
  if (!f.config_file.empty()) {
    StatusOr<ModelConfig> config = load_model_config(f.config_file);
    if (!config.ok()) return fail(config.status());
    model = load_parallel_model(f.model, options, to_parallel_config(model_flags), &*config);
  } else if (!f.model.empty()) {
    model = load_parallel_model(f.model, options, to_parallel_config(model_flags));
  } else {
    return fail(invalid_argument("give MODEL (or --model), or --load-format dummy --config FILE"));
  }
  if (!model.ok()) return fail(model.status());
  const double load_s = seconds_since(load_start);
  const ModelConfig& c = (*model)->config();
  if (f.input_len + f.output_len > c.max_position_embeddings) {
    return fail(invalid_argument("input-len + output-len exceeds max_position_embeddings"));
  }

  // The engine's ModelRunner, driven by hand-made SchedulerOutputs as the engine core drives it: the prefill of every
  // prompt (one step, or chunks of --max-num-batched-tokens; timed until its sampled ids are on the host), then
  // output-len decode steps; with async scheduling each decode step is queued before the previous one's ids are
  // waited for (EngineCore's batch queue of depth 2: the ids stay on the device and the runner scatters them into the
  // next step's inputs).
  const int32_t block_size = 16;
  const int64_t blocks_per_seq = (f.input_len + f.output_len + 1 + block_size - 1) / block_size;
  ModelRunnerConfig rc;
  rc.block_size = block_size;
  rc.num_blocks = static_cast<int32_t>(f.batch_size * blocks_per_seq);
  rc.max_num_tokens = std::min(f.max_num_batched_tokens, f.batch_size * f.input_len);
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
  const bool on_cuda = !options.device.is_cpu();
  const bool async_scheduling = f.async_scheduling.value_or(on_cuda);
  GpuBusyMeter busy_meter;
  bool busy_available = false;
  std::string busy_why_not;
  std::optional<double> decode_busy;
  GpuBusyMeter prefill_meter;  // --kernel-breakdown: the last iteration's prefill, kernel by kernel
  std::optional<double> prefill_busy;
  // The metered iteration's own wall times, beside the best ones (CUPTI's records slow the host a little).
  double metered_prefill_s = 0, metered_decode_s = 0;
  // MoE: the experts the decode steps read, counted by the model's moe_align calls (zeroed before each decode
  // phase; read after it, outside the timed span); the fastest iteration's count sets the decode floor.
  Tensor experts_touched = (*model)->moe_experts_touched();
  int64_t best_decode_experts = -1;
  for (int64_t iter = 0; iter <= f.num_iters; ++iter) {  // iteration 0 warms up
    // The prefill's steps: each takes the next max-num-batched-tokens prompt tokens in request order (a request's
    // first chunk brings its data and all its blocks, later chunks continue from its computed tokens).
    std::vector<SchedulerOutput> prefill_steps;
    std::vector<RequestId> ids;
    std::vector<int64_t> computed(static_cast<size_t>(f.batch_size), 0);
    for (int64_t r = 0; r < f.batch_size; ++r) ids.push_back(std::to_string(iter) + "-" + std::to_string(r));
    for (int64_t r = 0; r < f.batch_size;) {
      SchedulerOutput& step = prefill_steps.emplace_back();
      for (; r < f.batch_size && step.total_num_scheduled_tokens < f.max_num_batched_tokens;) {
        const int64_t n =
            std::min(f.input_len - computed[r], f.max_num_batched_tokens - step.total_num_scheduled_tokens);
        if (computed[r] == 0) {
          NewRequestData d;
          d.req_id = ids[r];
          for (int64_t i = 0; i < f.input_len; ++i) d.prompt_token_ids.push_back(token(rng));
          d.sampling_params = greedy;
          for (int64_t b = r * blocks_per_seq; b < (r + 1) * blocks_per_seq; ++b) d.block_ids.push_back(b);
          step.scheduled_new_reqs.push_back(std::move(d));
        } else {
          CachedRequestData cr;
          cr.req_id = ids[r];
          cr.num_computed_tokens = computed[r];
          step.scheduled_cached_reqs.push_back(std::move(cr));
        }
        step.num_scheduled_tokens.push_back({ids[r], n});
        step.total_num_scheduled_tokens += n;
        computed[r] += n;
        if (computed[r] == f.input_len) ++r;
      }
    }
    // Only the last iteration is metered: each CUPTI window delays its first kernel by ~5 ms (H200, 2026-11-26:
    // metering the warm-up too did not remove it), so the metered prefill's idle before its first kernel is the
    // meter's, not the engine's; the timed figures are the best of all iterations, the metered one's wall time is
    // printed beside its breakdown.
    const bool metered_iter = iter == f.num_iters;
    const bool meter_prefill = metered_iter && on_cuda && f.kernel_breakdown > 0;
    const bool prefill_metered = meter_prefill && prefill_meter.start(&busy_why_not, /*api_calls=*/true);
    auto start = Clock::now();
    StatusOr<ModelRunnerOutput> out = internal_error("no prefill step");
    for (const SchedulerOutput& step : prefill_steps) {
      out = runner.execute(step);
      if (!out.ok()) return fail(out.status());
    }
    const double prefill_s = seconds_since(start);
    if (prefill_metered) {
      prefill_busy = prefill_meter.stop();  // execute returned the sampled ids: the GPU is done
      metered_prefill_s = prefill_s;
    }
    if (experts_touched.defined()) experts_touched.copy_from(Tensor::zeros({1}, DType::kI64));
    // The last iteration's decode phase also measures how much of its wall time the GPU spent in kernels.
    const bool meter_this = metered_iter && on_cuda;
    // The CUDA call records only with a breakdown: the plain GPU-busy figure is measured without their host cost.
    if (meter_this) busy_available = busy_meter.start(&busy_why_not, /*api_calls=*/f.kernel_breakdown > 0);
    start = Clock::now();
    std::optional<ModelExecutor::StepHandle> in_flight;  // async: the queued step not yet waited for
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
      if (!async_scheduling) {
        out = runner.execute(decode);
        if (!out.ok()) return fail(out.status());
        continue;
      }
      StatusOr<ModelExecutor::StepHandle> queued = runner.execute_async(decode);
      if (!queued.ok()) return fail(queued.status());
      if (in_flight) {
        out = runner.wait(*in_flight);
        if (!out.ok()) return fail(out.status());
      }
      in_flight = *queued;
    }
    if (in_flight) {
      out = runner.wait(*in_flight);
      if (!out.ok()) return fail(out.status());
    }
    const double decode_s = seconds_since(start);
    if (meter_this && busy_available) {
      decode_busy = busy_meter.stop();  // each step ended with its ids on the host
      metered_decode_s = decode_s;
    }
    SchedulerOutput finish;
    finish.finished_req_ids = ids;
    if (StatusOr<ModelRunnerOutput> done = runner.execute(finish); !done.ok()) return fail(done.status());
    if (iter > 0) {
      best_prefill = std::min(best_prefill, prefill_s);
      if (decode_s < best_decode && experts_touched.defined()) {
        Tensor count = Tensor::empty({1}, DType::kI64);
        count.copy_from(experts_touched);  // on the runner's stream (this thread's), waited for
        best_decode_experts = count.data<int64_t>()[0];
      }
      best_decode = std::min(best_decode, decode_s);
    }
  }

  const DType weight_dtype = resolve_weight_dtype(c, options);
  // The GEMM rate at a prefill step's tokens: what the chunks' GEMMs run at (and a buffer that fits beside the model).
  const MeasuredRates rates = measure_rates(options.device, weight_dtype, c, rc.max_num_tokens);
  const double params = matmul_params(c);
  // Tensor parallelism on CUDA: each GPU reads its shard over its own memory bus in parallel, so the floor is one
  // GPU's share (its weights, its kv heads, its FLOPs). On the CPU the ranks share one memory system: no division.
  const double shards = on_cuda ? static_cast<double>(f.tensor_parallel_size) : 1.0;
  // Bytes a decode step reads: every weight as its linear method holds it; of an MoE model's expert weights only the
  // experts the batch's rows touch: as counted in the fastest decode phase (its MoE layers' moe_align calls), else
  // the expected value of uniform routing (bench_floors.h: exact at batch 1).
  const int64_t moe_layers = moe_layer_count(c);
  const std::optional<double> measured_experts =
      best_decode_experts >= 0 && moe_layers > 0
          ? std::optional<double>(static_cast<double>(best_decode_experts) /
                                  (static_cast<double>(moe_layers) * f.output_len))
          : std::nullopt;
  const double weight_bytes =
      (measured_experts ? step_read_params_with_experts(c, *measured_experts) * dtype_size(weight_dtype)
                        : step_weight_bytes(c, weight_dtype, f.batch_size)) /
      shards;
  const double kv_bytes =
      kv_bytes_per_token(c, (*model)->activation_dtype()) *
      (on_cuda ? static_cast<double>((*model)->num_kv_heads_per_rank()) / c.num_key_value_heads : 1.0);
  const double avg_context = f.input_len + (f.output_len + 1) / 2.0;
  const double decode_step_bytes = weight_bytes + f.batch_size * avg_context * kv_bytes;
  const double decode_floor = f.output_len * decode_step_bytes / rates.bandwidth;
  // The prefill samples one token per sequence: the LM head runs on batch_size rows, not on every prompt token.
  const PrefillFloor prefill =
      prefill_floor(prefill_flops(c, f.batch_size, f.input_len, f.batch_size) / shards,
                    step_weight_bytes(c, weight_dtype, f.batch_size * f.input_len) / shards, rates);
  const double prefill_tps = f.batch_size * f.input_len / best_prefill;
  const double decode_tps = f.batch_size * f.output_len / best_decode;

  const std::string weight_kind = c.quantization
                                      ? c.quantization->quant_method + (c.quantization->online ? " (online)" : "") +
                                            " linears, " + std::string(dtype_name(weight_dtype)) + " lm_head"
                                      : std::string(dtype_name(weight_dtype));
  std::printf("model: %s, %.1fM matmul params (%s weights), batch %lld, input %lld, output %lld, %s\n",
              c.architecture.c_str(), params / 1e6, weight_kind.c_str(), static_cast<long long>(f.batch_size),
              static_cast<long long>(f.input_len), static_cast<long long>(f.output_len),
              on_cuda ? options.device.to_string().c_str()
                      : ("cpu, " + std::to_string(ThreadPool::global().num_threads()) + " threads").c_str());
  if (c.moe) {
    const MoeConfig& m = *c.moe;
    std::printf(
        "moe: %lld experts, top-%lld, expert intermediate %lld%s; matmul params above are the active ones per token; "
        "a decode step reads attention + router%s + the experts touched + LM head: %.2f of %lld experts per MoE layer "
        "(%s) = %.1f MB\n",
        static_cast<long long>(m.num_experts), static_cast<long long>(m.num_experts_per_tok),
        static_cast<long long>(m.moe_intermediate_size), m.shared_expert_intermediate_size > 0 ? ", shared expert" : "",
        m.shared_expert_intermediate_size > 0 ? " + shared expert" : "",
        measured_experts.value_or(expected_experts_touched(m, f.batch_size)), static_cast<long long>(m.num_experts),
        measured_experts ? "measured: the fastest decode phase's moe_align counts over its steps and MoE layers"
                         : "expected value for uniform independent routing, E (1 - (1 - k/E)^batch)",
        weight_bytes / 1e6);
    if (measured_experts) {
      std::printf("moe: uniform independent routing would touch %.2f experts per MoE layer at batch %lld\n",
                  expected_experts_touched(m, f.batch_size), static_cast<long long>(f.batch_size));
    }
  }
  if (c.mla) {
    const MlaConfig& m = *c.mla;
    std::printf(
        "mla: latent KV cache of %lld values per token and layer (kv_lora_rank %lld + qk_rope_head_dim %lld, shared by "
        "%lld heads) = %.1f KB per token; %lld dense layers (first_k_dense_replace) before the MoE ones\n",
        static_cast<long long>(m.latent_size()), static_cast<long long>(m.kv_lora_rank),
        static_cast<long long>(m.qk_rope_head_dim), static_cast<long long>(c.num_attention_heads), kv_bytes / 1e3,
        static_cast<long long>(c.moe ? std::min(c.moe->first_k_dense_replace, c.num_hidden_layers) : 0));
  }
  const std::vector<int64_t> graph_sizes = runner.cuda_graph_sizes();
  std::printf("cuda graphs: %s\n", graph_sizes.empty() ? "none (eager)"
                                                       : ("FULL decode, " + std::to_string(graph_sizes.size()) +
                                                          " sizes up to " + std::to_string(graph_sizes.back()) + ", " +
                                                          std::to_string(runner.cuda_graph_bytes() >> 20) + " MiB")
                                                             .c_str());
  std::printf("async scheduling: %s\n", async_scheduling ? "on (decode steps queued one ahead)" : "off");
  const int64_t prefill_tokens = f.batch_size * f.input_len;
  if (f.max_num_batched_tokens < prefill_tokens) {
    std::printf("prefill: %lld steps of up to %lld tokens (--max-num-batched-tokens)\n",
                static_cast<long long>((prefill_tokens + f.max_num_batched_tokens - 1) / f.max_num_batched_tokens),
                static_cast<long long>(f.max_num_batched_tokens));
  }
  if (f.tensor_parallel_size > 1) {
    std::printf("tensor parallel: %lld ranks%s\n", static_cast<long long>(f.tensor_parallel_size),
                on_cuda ? " (floors: one GPU's shard of weights, kv heads and FLOPs)" : " (threads sharing the CPU)");
  }
  std::printf("model load: %.2f s (%s)\n", load_s,
              f.load_format == "dummy" ? "dummy weights generated on the host" : "safetensors");
  std::printf("measured: %s\n", rates.description.c_str());
  std::printf("%-8s %12s %12s %14s %8s\n", "phase", "tok/s", "time (ms)", "floor (ms)", "ratio");
  std::printf("%-8s %12.1f %12.2f %14.2f %7.1f%%\n", "prefill", prefill_tps, best_prefill * 1e3, prefill.seconds * 1e3,
              100.0 * prefill.seconds / best_prefill);
  std::printf("%-8s %12.1f %12.2f %14.2f %7.1f%%\n", "decode", decode_tps, best_decode * 1e3, decode_floor * 1e3,
              100.0 * decode_floor / best_decode);
  std::printf(
      "floors: prefill = max(FLOPs executed %.3g at the GEMM rate: %.2f ms, one read of the weights: %.2f ms), "
      "bound by %s (FLOPs: projections on every token, causal attention, LM head on the %lld sampled rows); "
      "decode = (weights %.1f MB + KV %.1f MB) read per step / %s bandwidth\n",
      prefill_flops(c, f.batch_size, f.input_len, f.batch_size), prefill.compute_s * 1e3, prefill.weight_read_s * 1e3,
      prefill.bound, static_cast<long long>(f.batch_size), weight_bytes / 1e6,
      f.batch_size * avg_context * kv_bytes / 1e6, on_cuda ? "copy" : "read");
  if (on_cuda && prefill_busy) {
    std::printf(
        "prefill GPU busy: %.1f%% of the last iteration's prefill wall time (%.2f ms, metered) in kernels; idle %.1f "
        "us in %lld stretches (%.1f us before the first kernel, most of it CUPTI's start of the window; %.1f us "
        "after the last)\n",
        100.0 * *prefill_busy, metered_prefill_s * 1e3, prefill_meter.idle_us(),
        static_cast<long long>(prefill_meter.idle_gaps()),
        prefill_meter.leading_idle_us(), prefill_meter.trailing_idle_us());
    const auto& kernels = prefill_meter.kernel_times();
    for (size_t i = 0; i < kernels.size() && static_cast<int64_t>(i) < f.kernel_breakdown; ++i) {
      std::printf("  prefill kernel %9.1f us (wall share %9.1f) %5lld calls  %s\n", kernels[i].total_us,
                  kernels[i].wall_us, static_cast<long long>(kernels[i].count),
                  kernels[i].name.substr(0, 110).c_str());
    }
    const auto& waits = prefill_meter.idle_before();
    for (size_t i = 0; i < waits.size() && static_cast<int64_t>(i) < f.kernel_breakdown; ++i) {
      std::printf("  prefill idle before %9.1f us %5lld gaps  %s\n", waits[i].total_us,
                  static_cast<long long>(waits[i].count), waits[i].name.substr(0, 110).c_str());
    }
    print_copies_and_slow_calls("prefill", prefill_meter);
  }
  if (on_cuda) {
    if (decode_busy) {
      std::printf(
          "decode GPU busy: %.1f%% of the last iteration's decode wall time (%.2f ms, metered) in kernels (CUPTI "
          "kernel activity; the rest is launch gaps and host time between steps)\n",
          100.0 * *decode_busy, metered_decode_s * 1e3);
      std::printf("decode idle: %lld stretches, %.1f us per step\n", static_cast<long long>(busy_meter.idle_gaps()),
                  busy_meter.idle_us() / static_cast<double>(f.output_len));
      // CUPTI's tracing slows the host's graph launches in the metered iteration (measured: >= 200 us per
      // cudaGraphLaunch there, ~2-6 us untraced), which lengthens that iteration's steps when they are short. The
      // same kernel time against the fastest untraced iteration estimates the busy fraction without the meter,
      // assuming tracing leaves the kernels' own durations alone.
      if (best_decode < metered_decode_s) {
        const double kernel_s = *decode_busy * metered_decode_s;
        std::printf(
            "decode GPU busy without the meter (estimate): %.1f%% = the metered kernel time %.2f ms / the fastest "
            "untraced iteration's decode %.2f ms (the metered one took %.2f ms)\n",
            100.0 * kernel_s / best_decode, kernel_s * 1e3, best_decode * 1e3, metered_decode_s * 1e3);
      }
      const auto& kernels = busy_meter.kernel_times();
      for (size_t i = 0; i < kernels.size() && static_cast<int64_t>(i) < f.kernel_breakdown; ++i) {
        std::printf("  kernel %6.1f us/step (wall share %6.1f) %6.2f per step  %s\n",
                    kernels[i].total_us / static_cast<double>(f.output_len),
                    kernels[i].wall_us / static_cast<double>(f.output_len),
                    static_cast<double>(kernels[i].count) / static_cast<double>(f.output_len),
                    kernels[i].name.substr(0, 110).c_str());
      }
      print_copies_and_slow_calls("decode", busy_meter);
    } else {
      std::printf("decode GPU busy: not measured (%s)\n", busy_why_not.c_str());
    }
  }
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

// Measured rates and work counts for the bench commands' floors (see bench_floors.h). The rates are measured the
// way the engine uses the hardware: reads only on CPU (decode streams weights and KV), ops::linear for GEMMs.
#include "cli/bench_floors.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/ops.h"

#ifdef LLMSERVE_WITH_CUDA
#include <cuda_runtime_api.h>

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

// A device tensor of uniform random values in [-range, range) (never zeros: they run faster than real data).
Tensor random_device_tensor(Shape shape, DType dtype, Device device, uint32_t seed, float range = 1.f) {
  Tensor host = Tensor::empty(shape, DType::kF32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-range, range);
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

// FLOP/s of ops::scaled_mm as an fp8 / int8 model's linears run it (bf16 out): x [m, k] with per-token scales (per
// token and 128-column group for block weights) @ w [n, k]^T with the model's weight scales, on random data.
double measure_device_scaled_mm_rate(Device device, const QuantizationConfig& q, int64_t m, int64_t n, int64_t k) {
  const bool int8 = q.scheme == QuantScheme::kInt8, block = q.weight_scale == WeightScaleKind::kBlock;
  const DType dtype = int8 ? DType::kI8 : DType::kFP8E4M3;
  auto scales = [&](Shape shape) {
    Tensor host = Tensor::empty(shape, DType::kF32);
    host.fill(1e-4f);
    return upload_to_device(host, device);
  };
  // Values in [-100, 100): int8 rounds them to integers, e4m3 keeps 3 mantissa bits.
  Tensor x = random_device_tensor({m, k}, dtype, device, 1, 100.f),
         w = random_device_tensor({n, k}, dtype, device, 2, 100.f);
  Tensor x_scales = block ? scales({m, (k + 127) / 128}) : scales({m, 1});
  Tensor w_scales = block ? scales({(n + 127) / 128, (k + 127) / 128}) : scales({n});
  Tensor out = Tensor::empty({m, n}, DType::kBF16, device);
  const double ms = median_ms(10, [&] { ops::scaled_mm(out, x, x_scales, w, w_scales, nullptr); });
  return 2.0 * m * n * k / (ms * 1e-3);
}
#endif

}  // namespace

MeasuredRates measure_rates(Device device, DType weight_dtype, [[maybe_unused]] const ModelConfig& c,
                            [[maybe_unused]] int64_t prefill_tokens) {
  MeasuredRates r;
  char text[256] = "";
  if (!device.is_cpu()) {
#ifdef LLMSERVE_WITH_CUDA
    r.bandwidth = measure_device_copy_bandwidth(device);
    const int64_t gemm_m = std::max<int64_t>(prefill_tokens, 8192);
    const int64_t n = 2 * c.intermediate_size, k = c.hidden_size;
    // An fp8 / int8 model's linears run on scaled_mm, faster than bf16: its FLOPs are priced at that rate (its bf16
    // attention and LM head too: a floor may err low, never high).
    const bool scaled =
        c.quantization && (c.quantization->scheme == QuantScheme::kFp8 || c.quantization->scheme == QuantScheme::kInt8);
    r.gemm_rate = scaled ? measure_device_scaled_mm_rate(device, *c.quantization, gemm_m, n, k)
                         : measure_device_gemm_rate(device, weight_dtype, gemm_m, n, k);
    const std::string gemm =
        scaled ? "scaled_mm (" + std::string(c.quantization->scheme == QuantScheme::kInt8 ? "int8" : "fp8") +
                     (c.quantization->weight_scale == WeightScaleKind::kBlock ? " block" : "") + ", bf16 out"
               : "cuBLASLt GEMM (" + std::string(dtype_name(weight_dtype));
    std::snprintf(text, sizeof(text),
                  "device copy bandwidth %.1f GB/s (read + write), %s, %lld x %lld x %lld) %.1f TFLOP/s",
                  r.bandwidth / 1e9, gemm.c_str(), static_cast<long long>(gemm_m), static_cast<long long>(n),
                  static_cast<long long>(k), r.gemm_rate / 1e12);
#endif
  } else {
    r.bandwidth = measure_read_bandwidth();
    r.gemm_rate = measure_gemm_rate(weight_dtype);
    std::snprintf(text, sizeof(text), "read bandwidth %.2f GB/s, GEMM (%s weights, 512 x 2048 x 2048) %.1f GFLOP/s",
                  r.bandwidth / 1e9, std::string(dtype_name(weight_dtype)).c_str(), r.gemm_rate / 1e9);
  }
  r.description = text;
  return r;
}

namespace {

// Parameters of one layer's feed-forward block used for `experts` routed experts (dense layers: the MLP).
double feed_forward_params(const ModelConfig& c, int64_t layer, double experts) {
  const double h = c.hidden_size;
  if (!c.moe || !c.moe->is_sparse_layer(layer)) return 3 * h * c.intermediate_size;
  const MoeConfig& m = *c.moe;
  // Qwen2-MoE's shared expert has a sigmoid gate (one more [1, h] row); DeepSeek's shared experts have none.
  const double shared_gate = m.grouped_routing ? 0 : h;
  const double shared =
      m.shared_expert_intermediate_size > 0 ? 3 * h * m.shared_expert_intermediate_size + shared_gate : 0;
  return h * m.num_experts + experts * 3 * h * m.moe_intermediate_size + shared;
}

// Multi-head latent attention's projections: q (through the LoRA when q_lora_rank), kv_a, kv_b (run as its two
// per-head halves W_UK^T and W_UV, the same parameters) and o.
double mla_attention_params(const ModelConfig& c) {
  const MlaConfig& m = *c.mla;
  const double h = c.hidden_size, heads = c.num_attention_heads;
  const double q_width = heads * (m.qk_nope_head_dim + m.qk_rope_head_dim);
  const double q = m.q_lora_rank > 0 ? h * m.q_lora_rank + m.q_lora_rank * q_width : h * q_width;
  const double kv_a = h * m.latent_size();
  const double kv_b = heads * (m.qk_nope_head_dim + m.v_head_dim) * m.kv_lora_rank;
  return q + kv_a + kv_b + heads * m.v_head_dim * h;
}

double attention_params(const ModelConfig& c) {
  if (c.mla) return mla_attention_params(c);
  const double h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  return h * q + 2 * h * kv + q * h;
}

}  // namespace

double layer_matmul_params(const ModelConfig& c) {
  double total = 0;
  const double top_k = c.moe ? static_cast<double>(c.moe->num_experts_per_tok) : 0;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) total += attention_params(c) + feed_forward_params(c, i, top_k);
  return total;
}

double expected_experts_touched(const MoeConfig& moe, int64_t tokens) {
  const double e = static_cast<double>(moe.num_experts), k = static_cast<double>(moe.num_experts_per_tok);
  return e * (1.0 - std::pow(1.0 - k / e, static_cast<double>(tokens)));
}

double step_read_params(const ModelConfig& c, int64_t tokens) {
  if (!c.moe) return matmul_params(c);
  return step_read_params_with_experts(c, expected_experts_touched(*c.moe, tokens));
}

double step_read_params_with_experts(const ModelConfig& c, double experts) {
  double total = lm_head_params(c);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) total += attention_params(c) + feed_forward_params(c, i, experts);
  return total;
}

int64_t moe_layer_count(const ModelConfig& c) {
  int64_t n = 0;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) n += c.moe && c.moe->is_sparse_layer(i) ? 1 : 0;
  return n;
}

double lm_head_params(const ModelConfig& c) { return static_cast<double>(c.vocab_size) * c.hidden_size; }

namespace {

// Bytes of one [n, k] projection as its linear method stores it.
double projection_bytes(const ModelConfig& c, double n, double k, DType weight_dtype) {
  if (!c.quantization) return n * k * dtype_size(weight_dtype);
  const QuantizationConfig& q = *c.quantization;
  switch (q.scheme) {
    case QuantScheme::kFp8:
    case QuantScheme::kInt8:
      if (q.weight_scale == WeightScaleKind::kBlock) return n * k + 4 * std::ceil(n / 128) * std::ceil(k / 128);
      return n * k + 4 * n;
    case QuantScheme::kGptq:
    case QuantScheme::kAwq: {
      const double groups = q.group_size > 0 ? std::ceil(k / q.group_size) : 1;
      return n * k / 2 + 5 * n * groups + (q.desc_act ? 4 * k : 0);
    }
  }
  return 0;
}

}  // namespace

double decode_weight_bytes(const ModelConfig& c, DType weight_dtype) {
  const double h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  const double i = c.intermediate_size;
  // MLA checkpoints are unquantized (model_config.cc refuses a quantization_config for them).
  const double attention =
      c.mla ? mla_attention_params(c) * dtype_size(weight_dtype)
            : projection_bytes(c, q + 2 * kv, h, weight_dtype) + projection_bytes(c, h, q, weight_dtype);
  const double layer =
      attention + projection_bytes(c, 2 * i, h, weight_dtype) + projection_bytes(c, h, i, weight_dtype);
  return c.num_hidden_layers * layer + lm_head_params(c) * dtype_size(weight_dtype);
}

double step_weight_bytes(const ModelConfig& c, DType weight_dtype, int64_t tokens) {
  return c.moe ? step_read_params(c, tokens) * dtype_size(weight_dtype) : decode_weight_bytes(c, weight_dtype);
}

double prefill_flops(const ModelConfig& c, int64_t num_seqs, int64_t tokens, int64_t logit_rows) {
  const double q_dim = static_cast<double>(c.num_attention_heads) * c.head_dim;
  double attended = 0;  // sum over layers and query positions of the keys attended
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::optional<int64_t> window = c.sliding_window_for_layer(layer);
    for (int64_t i = 0; i < tokens; ++i) attended += static_cast<double>(window ? std::min(i + 1, *window) : i + 1);
  }
  // QK^T and PV: 2 FLOPs per multiply-add each. MLA (absorbed, as the engine runs every token): each head's query
  // meets the L + R latent row and its output sums the row's L columns.
  const double per_key =
      c.mla ? 2.0 * c.num_attention_heads * (c.mla->latent_size() + c.mla->kv_lora_rank) : 4.0 * q_dim;
  const double attention = per_key * attended;
  return num_seqs * (2.0 * layer_matmul_params(c) * tokens + attention) + 2.0 * lm_head_params(c) * logit_rows;
}

double kv_bytes_per_token(const ModelConfig& c, DType kv_dtype) {
  if (c.mla) return static_cast<double>(c.num_hidden_layers) * c.mla->latent_size() * dtype_size(kv_dtype);
  return 2.0 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * dtype_size(kv_dtype);
}

PrefillFloor prefill_floor(double flops, double weight_bytes, const MeasuredRates& rates) {
  PrefillFloor f;
  f.compute_s = flops / rates.gemm_rate;
  f.weight_read_s = weight_bytes / rates.bandwidth;
  f.seconds = std::max(f.compute_s, f.weight_read_s);
  f.bound = f.compute_s >= f.weight_read_s ? "FLOPs at the GEMM rate" : "one read of the weights";
  return f;
}

RunFloor run_floor(const ModelConfig& c, DType weight_dtype, DType kv_dtype, const MeasuredRates& rates,
                   const RunWork& work) {
  RunFloor f;
  const int64_t num_requests = static_cast<int64_t>(work.prompt_lens.size());
  if (num_requests == 0) return f;
  std::map<int64_t, int64_t> requests_of_length;  // prefill_flops walks every position: once per distinct length
  double prompt_tokens = 0;
  for (int64_t len : work.prompt_lens) {
    ++requests_of_length[len];
    prompt_tokens += static_cast<double>(len);
  }
  double flops = 0;
  for (const auto& [len, n] : requests_of_length) flops += prefill_flops(c, n, len, n);
  const int64_t decode_tokens = std::max<int64_t>(0, work.output_tokens - num_requests);
  const int64_t per_step = std::max<int64_t>(1, work.max_concurrent);
  // A decode step reads what its rows touch (MoE: the experts chosen); the prefills read at most every weight once.
  f.weight_bytes = step_weight_bytes(c, weight_dtype, per_step);
  f.prefill = prefill_floor(flops, step_weight_bytes(c, weight_dtype, static_cast<int64_t>(prompt_tokens)), rates);
  f.decode_steps = (decode_tokens + per_step - 1) / per_step;
  const double mean_prompt = prompt_tokens / num_requests;
  const double mean_output = static_cast<double>(work.output_tokens) / num_requests;
  // A decode token at output position j reads prompt + j entries; over a request that averages prompt + output / 2.
  f.kv_read_bytes = decode_tokens * (mean_prompt + mean_output / 2.0) * kv_bytes_per_token(c, kv_dtype);
  f.decode_s = (f.decode_steps * f.weight_bytes + f.kv_read_bytes) / rates.bandwidth;
  f.seconds = f.prefill.seconds + f.decode_s;
  return f;
}

std::string describe_run_floor(const RunFloor& f, const RunWork& work, bool cpu, double elapsed_s) {
  char text[512];
  std::snprintf(text, sizeof(text),
                "floor: %.2f s = prefill %.2f s (bound by %s; LM head on %lld rows) + decode %.2f s (%lld steps x "
                "weights %.1f MB + KV %.1f MB at the %s bandwidth); elapsed %.2f s: %.1f%% of the floor's speed",
                f.seconds, f.prefill.seconds, f.prefill.bound, static_cast<long long>(work.prompt_lens.size()),
                f.decode_s, static_cast<long long>(f.decode_steps), f.weight_bytes / 1e6, f.kv_read_bytes / 1e6,
                cpu ? "read" : "copy", elapsed_s, elapsed_s > 0 ? 100.0 * f.seconds / elapsed_s : 0.0);
  return text;
}

}  // namespace llmserve::cli

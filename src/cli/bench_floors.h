// The physical floors the bench commands print beside their figures: rates measured on this machine in the same
// run (memory bandwidth, GEMM FLOP/s) and the work a run must do (FLOPs actually executed, bytes read).
// Invariant: a floor counts only work the engine really does (lm_head on logit rows only) at rates measured here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/model_config.h"

namespace llmserve::cli {

struct MeasuredRates {
  double bandwidth = 0;     // bytes/s: CPU read bandwidth, or CUDA device copy bandwidth (read + write)
  double gemm_rate = 0;     // FLOP/s of the model's linears (ops::linear, or ops::scaled_mm for fp8 / int8 on CUDA)
  std::string description;  // how both were measured, for the bench's output
};

// CPU: read bandwidth of a 512 MiB sum and ops::linear at 512 x 2048 x 2048. CUDA: a 2 GiB device copy and
// cuBLASLt at the model's gate_up shape (hidden -> 2 x intermediate) with max(prefill_tokens, 8192) rows — for an
// fp8 / int8 model ops::scaled_mm with its scale kinds instead — timed with events: the rate the hardware reaches,
// not the library's rate at a small prefill's own shape (a small prefill is bounded by reading the weights instead;
// see prefill_floor).
MeasuredRates measure_rates(Device device, DType weight_dtype, const ModelConfig& c, int64_t prefill_tokens);

// Parameters of every transformer layer's projections (attention + MLP) one token goes through, and of the LM head.
// A mixture-of-experts layer counts its router, its top-k experts and its shared expert (the active parameters);
// multi-head latent attention its q (LoRA), kv_a, kv_b and o projections.
double layer_matmul_params(const ModelConfig& c);
double lm_head_params(const ModelConfig& c);
// Parameters one token's forward multiplies: all projections and the LM head (embedding rows are gathered).
inline double matmul_params(const ModelConfig& c) { return layer_matmul_params(c) + lm_head_params(c); }

// Bytes a decode step reads of the weights: every projection as its linear method holds it (config.quantization:
// fp8 / int8 1 byte per parameter + f32 scales; 4-bit 0.5 byte + f32 scale and u8 zero per group, + the act-order
// permutation; unquantized `weight_dtype`) and the LM head in `weight_dtype`.
double decode_weight_bytes(const ModelConfig& c, DType weight_dtype);
// The expected number of distinct experts `tokens` tokens route to in one MoE layer, each choosing k distinct of E
// uniformly and independently: E (1 - (1 - k / E)^tokens). Exact for one token (k); an estimate for more (a trained
// router is not uniform: skewed routing touches fewer experts, so the true floor is at most this one).
double expected_experts_touched(const MoeConfig& moe, int64_t tokens);
// Parameters a forward over `tokens` tokens reads: every projection and the LM head, of each MoE layer's experts only
// the ones touched (expected_experts_touched). Dense models: matmul_params.
double step_read_params(const ModelConfig& c, int64_t tokens);
// The same with each MoE layer reading `experts` of its experts (e.g. an average measured over a run's steps).
double step_read_params_with_experts(const ModelConfig& c, double experts);
// The config's MoE layers (0 for a dense model).
int64_t moe_layer_count(const ModelConfig& c);
// Bytes a step over `tokens` tokens reads of the weights: an MoE model's experts touched (step_read_params, in
// `weight_dtype`: its experts are not quantized), else every projection as its linear method holds it.
double step_weight_bytes(const ModelConfig& c, DType weight_dtype, int64_t tokens);

// FLOPs of prefilling `num_seqs` prompts of `tokens` tokens each: every projection on every token, causal
// attention (QK^T and PV over positions 0..i, within the sliding window where a layer has one), and the LM head
// only on `logit_rows` rows (the runner computes logits only where a token is sampled).
double prefill_flops(const ModelConfig& c, int64_t num_seqs, int64_t tokens, int64_t logit_rows);

// KV cache bytes per token (all layers, K and V; multi-head latent attention: the one latent row of
// kv_lora_rank + qk_rope_head_dim) with `kv_dtype` entries.
double kv_bytes_per_token(const ModelConfig& c, DType kv_dtype);

// A prefill's floor: the larger of its FLOPs at the GEMM rate and one read of the weights at the bandwidth
// (small batches are weight-read bound). `bound` names the larger.
struct PrefillFloor {
  double seconds = 0, compute_s = 0, weight_read_s = 0;
  const char* bound = "";
};
PrefillFloor prefill_floor(double flops, double weight_bytes, const MeasuredRates& rates);

// What an offline or served run did: each request's prompt prefilled (its first output token comes from there: one
// LM-head row), then its other output tokens decoded, at most `max_concurrent` requests at once.
struct RunWork {
  std::vector<int64_t> prompt_lens;  // one per completed request
  int64_t output_tokens = 0;         // all requests' together
  int64_t max_concurrent = 1;        // decode rows per step at most (max_num_seqs, or the client's concurrency)
};
// The run's floor: the prefills (FLOPs executed, or one read of the weights where larger) plus the decode steps
// (at least ceil(decode tokens / max_concurrent), each reading the weights once, and each decode token its KV
// context), at the rates measured. The phases are counted one after the other (a mixed step could overlap them).
struct RunFloor {
  PrefillFloor prefill;
  double decode_s = 0, seconds = 0;
  double weight_bytes = 0, kv_read_bytes = 0;
  int64_t decode_steps = 0;
};
RunFloor run_floor(const ModelConfig& c, DType weight_dtype, DType kv_dtype, const MeasuredRates& rates,
                   const RunWork& work);
// The line the benches print: "floor: S s = prefill ... + decode ...; elapsed E s: R% of the floor's speed".
std::string describe_run_floor(const RunFloor& f, const RunWork& work, bool cpu, double elapsed_s);

}  // namespace llmserve::cli

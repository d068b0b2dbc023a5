// Every numeric op llmserve runs, declared once as an Op of kernels/op_registry.h: `ops::rms_norm(out, x, w, eps)`
// runs the op's check, then the kernel registered for its tensors' device (CPU: src/kernels/cpu, CUDA:
// src/kernels/cuda). Each op's schema (TORCH_LIBRARY syntax, `Tensor!` = written) and check live in ops.cc /
// sampling_ops.cc. Shape, dtype and device mismatches are programming errors and abort through CHECK; ops never
// allocate their outputs (graph-safe on CUDA).
// Tensors an op reads or writes row by row may be row-strided: dimension 0 any stride, the others contiguous
// (e.g. q/k/v as column slices of a fused QKV projection).
// CUDA (kernels/cuda): every op; activations in the model's dtype (f32, f16 or bf16) where the CPU takes f32;
// logits f32 on both; KV caches f32, f16 or bf16. CUDA ops launch on cuda::current_stream(), never allocate and
// never synchronise with the host (graph-safe); a device-side range error (an id outside the vocabulary, a
// position past the cache) traps the kernel instead of aborting the process at once.
#pragma once

#include <cstdint>

#include "core/sampling_eps.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/mla_schedule.h"
#include "kernels/op_registry.h"
#include "kernels/prefill_schedule.h"

namespace llmserve::ops {

// ---- elementwise and normalisation (activations: f32 on CPU; f32, f16 or bf16 on CUDA) ----

// out[t, :] = table[ids[t], :] converted to out's dtype. ids [num_tokens] i32; table [vocab, hidden];
// out [num_tokens, hidden]. Ids outside [0, vocab) abort (the frontend validates prompt ids). CUDA: table and out
// f32, f16 or bf16.
extern Op<void(Tensor& out, const Tensor& ids, const Tensor& table)> embedding;

// A rank's part of a vocabulary-parallel embedding: out[t, :] = table[ids[t] - vocab_start, :] for ids in
// [vocab_start, vocab_start + table rows), zeros for every other id (another rank's rows: the all-reduce of the
// ranks' outputs is the full lookup). ids must be >= 0. Shapes and dtypes as embedding.
extern Op<void(Tensor& out, const Tensor& ids, const Tensor& table, int64_t vocab_start)> masked_embedding;

// out[i, :] = x[i, :] / sqrt(mean(x[i, :]^2) + eps) * weight. x, out [n, d] (may alias); weight [d] f32 or bf16.
// Or x, out [n, h, d]: every [d] row normalised (per-head q / k norms over a view of a fused QKV output: any stride
// between the n, the h rows of each adjacent).
// CUDA: x and out f32, f16 or bf16 (same dtype), weight f32, f16 or bf16, f32 math.
extern Op<void(Tensor& out, const Tensor& x, const Tensor& weight, float eps)> rms_norm;

// In place, vLLM's fused form: residual += x; x = rms_norm(residual) * weight. x, residual [n, d].
// CUDA f16/bf16: the residual is rounded to the dtype before it is normalised (as vLLM does).
extern Op<void(Tensor& x, Tensor& residual, const Tensor& weight, float eps)> fused_add_rms_norm;

// out[i, :] = silu(x[i, :d]) * x[i, d:]. x [n, 2d]; out [n, d].
extern Op<void(Tensor& out, const Tensor& x)> silu_and_mul;

// In place: a += b (same shape; same dtype: f32 on CPU, f32/f16/bf16 on CUDA).
extern Op<void(Tensor& a, const Tensor& b)> add;

// Rotary position embedding, rotate-half (GPT-NeoX / HF Llama) layout, in place on every head.
// positions [n] i64; query [n, num_heads * head_dim]; key [n, num_kv_heads * head_dim];
// cos_sin_cache [max_position, head_dim] f32: columns [0, head_dim/2) hold cos, [head_dim/2, head_dim) sin
// (any rope_scaling and attention factor already folded in). Positions past the cache abort.
// CUDA: query and key share a dtype (f32, f16 or bf16); the cache stays f32.
extern Op<void(const Tensor& positions, Tensor& query, Tensor& key, int64_t head_dim, const Tensor& cos_sin_cache)>
    rotary_embedding;

// ---- GEMM ----

// out [m, n] = x [m, k] @ weight[n, k]^T (+ bias [n] if bias != nullptr). x and out f32 (CPU), out must not
// alias x; weight f32 or bf16 (layout as stored in HF checkpoints); bias f32 or bf16.
// CPU speed (bench/RESULTS.md): keep HF bf16 weights as bf16 -- oneDNN then runs bf16 x bf16 -> f32 (x rounded
// to bf16, f32 accumulation; AMX where present), 2-5x faster than f32 weights for m >= 16. f32 weights give
// exact f32 results. Without oneDNN support (or LLMSERVE_GEMM=openblas) OpenBLAS sgemm runs, bf16 widened.
// CUDA (cuBLASLt, f32 accumulation): x and weight share a dtype -- bf16, f16, or f32 (exact f32: TF32 is never
// used); out in x's dtype or f32 (the lm_head's f32 logits); bias in out's dtype or f32. The first call on a
// device creates its cuBLASLt handle and 32 MiB workspace (make it before graph capture); plans are cached per
// shape, strides and alignment (bench/RESULTS.md: the rate at the Mistral-7B shapes).
extern Op<void(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor* bias)> linear;

// ---- quantized GEMM (the linear methods of model/layers/quantized_linear_methods.h) ----

// Dynamic symmetric quantization of activations: row i of x [m, k] in groups of g = k / scales.size(1) columns gets
// scale = max(amax / qmax, 1 / (qmax * 512)) (qmax: 448 for fp8 e4m3, 127 for int8) and
// out = saturate(round_to_nearest_even(x / scale)) (an IEEE division on both devices). out [m, k] fp8_e4m3 or i8;
// scales [m, k / g] f32 (g = k: one per token; g = 128: DeepSeek's per-token-group). CPU: x f32; CUDA: x f32,
// f16 or bf16. k must divide into the groups.
extern Op<void(Tensor& out, Tensor& scales, const Tensor& x)> dynamic_scaled_quantize;

// Static: out = saturate(round(x / scale[0])) with a given scale [1] f32 (fp8 `input_scale`). out, x as above.
extern Op<void(Tensor& out, const Tensor& x, const Tensor& scale)> static_scaled_quantize;

// Dynamic per-token quantization fused into the op before a quantized GEMM (vLLM's rms_norm_dynamic_per_token_quant
// and silu_and_mul_per_token_quant): the op's activation-dtype row y, then out, scales = dynamic_scaled_quantize(y):
// scales [n, G] f32 (G = 1: one per token; G = d / 128: DeepSeek's per-token-group of 128; any G dividing d), out
// [n, d] fp8_e4m3 or i8 by its dtype, contiguous. y is rounded to x's dtype before its amax and division, as the
// unfused op stores it (vLLM's fused kernels round it too), so each op equals its unfused sequence on the same device
// bit for bit: on CUDA when both take the same reduction layout (rows of d % 8 == 0 with 16-byte aligned rows; the
// model's buffers always are), else a norm's sum of squares may differ in its last bit, moving a value by at most one
// quantization step. Shapes and dtypes of x and weight as the unfused op's. CUDA: G = 1 and groups of 128 in the
// row-in-registers kernels, other groups in the scalar ones. model/layers: the norm / SiLU that feeds a LinearMethod
// with quantized_input() runs these.
// rms_norm_quant: y = rms_norm(x) * weight.
extern Op<void(Tensor& out, Tensor& scales, const Tensor& x, const Tensor& weight, float eps)> rms_norm_quant;
// fused_add_rms_norm_quant: residual += x (CUDA 16-bit: rounded, as fused_add_rms_norm); y = rms_norm(residual) *
// weight. x is only read (fused_add_rms_norm would overwrite it with y).
extern Op<void(Tensor& out, Tensor& scales, const Tensor& x, Tensor& residual, const Tensor& weight, float eps)>
    fused_add_rms_norm_quant;
// silu_and_mul_quant: y = silu_and_mul(x); x [n, 2d], out [n, d].
extern Op<void(Tensor& out, Tensor& scales, const Tensor& x)> silu_and_mul_quant;

// out [m, n] = sum_k (a[i, k] * sa(i, k)) * (b[j, k] * sb(j, k)) (+ bias [n]): a [m, k] and b [n, k] both fp8_e4m3
// or both i8 (contiguous, b as HF stores weights). a_scales: [1] (per tensor), [m, 1] (per token) or
// [m, k / 128] (per token and 128-column group); b_scales: [1], [n] (per output channel) or
// [ceil(n / 128), ceil(k / 128)] (128 x 128 blocks, only with group activations). f32 scales; bias f32 or out's
// dtype. CPU: out f32, dequantize-then-GEMM in f32 (the reference). CUDA: out bf16, f16 or f32; m <= 16 a GEMV; above,
// on Hopper with bf16 / f16 out and TMA-aligned operands (k % 16, n % 8), CUTLASS wgmma GEMMs (scales in the epilogue;
// block scales in the mainloop; fp8 accumulates in the tensor core's own ~14-bit-mantissa partial sums); elsewhere fp8
// through cuBLASLt's scaled matmul (outer-vector / 128-block scale modes), int8 through cuBLASLt int8 -> i32 with a
// scale epilogue; where cuBLASLt has no algorithm, unit-scaled fp8 GEMMs with scale epilogues or a plain tiled kernel
// (every accepted shape runs; kernels/cuda/scaled_mm.cc); products are exact (fp8 x fp8 is exact in f32), so CPU and
// CUDA differ by summation order and accumulator precision.
extern Op<void(Tensor& out, const Tensor& a, const Tensor& a_scales, const Tensor& b, const Tensor& b_scales,
               const Tensor* bias)>
    scaled_mm;

// W4A16: out [m, n] = x [m, k] @ W^T (+ bias [n]) with W [n, k] 4-bit: q(r, c) is nibble (c & 1) of byte
// qweight[r, c / 2] (low nibble first), W[r, c] = (q(r, c) - zeros[r, c / g]) * scales[r, c / g], g = k /
// scales.size(1). qweight [n, k / 2] u8; scales [n, k / g] f32; zeros [n, k / g] u8 (0..16: GPTQ v1's stored zero + 1).
// perm: optional [k] i32, a permutation: column c of W multiplies x[:, perm[c]] (GPTQ act-order, sorted by group once
// at load). CPU: x and out f32, dequantize-then-GEMM in f32. CUDA: x and out bf16 or f16 (bias in out's dtype or f32);
// m <= 32 a tensor-core GEMV dequantizing in registers, larger m dequantizes to x's dtype in a device scratch then runs
// ops::linear.
extern Op<void(Tensor& out, const Tensor& x, const Tensor& qweight, const Tensor& scales, const Tensor& zeros,
               const Tensor* perm, const Tensor* bias)>
    w4a16_linear;

// W4A16 through a tensor-core GEMM (CUDA's mixed-input GEMM for m > 32, bf16): w4a16_linear's weight repacked once at
// load by w4a16_gemm_pack into
//   packed [k / 16, 8 n] u8: W's 16 x 16 blocks, block (i, j) (rows 16 i.., columns 16 j..) in bytes 128 i .. + 128 of
//     row j; in a block W[16 i + r0 + 8 r1, 16 j + c0 + 2 c1 + 8 c2] (r0 < 8, r1 < 2, c0 < 2, c1 < 4, c2 < 2) is nibble
//     32 r0 + r1 + 4 c0 + 8 c1 + 2 c2 (low nibble first) and holds q ^ 8, i.e. q - 8 as a signed 4-bit value (the
//     order in which a Hopper wgmma thread takes its 8 values, paired for the fast int4 -> bf16 conversion);
//   gemm_scales [groups, n] (16-bit) = scales^T;
//   gemm_zeros [groups, n] (16-bit) = (8 - z) s, the zero term: W = (q - 8) s + (8 - z) s = (q - z) s. GPTQ symmetric
//     (every z = 8) makes it 0, and w4a16_gemm takes none (a cheaper kernel).
// n % 16 == 0, k % 16 == 0. Rows [b, e) of W (b, e multiples of 16) are packed.slice(1, 8 b, 8 e) and
// gemm_scales / gemm_zeros .slice(1, b, e). CPU and CUDA, bit-identical.
extern Op<void(Tensor& packed, Tensor& gemm_scales, Tensor& gemm_zeros, const Tensor& qweight, const Tensor& scales,
               const Tensor& zeros)>
    w4a16_gemm_pack;
// out [m, n] = x [m, k] @ W^T (+ bias [n]) with W in w4a16_gemm_pack's layout (zeros optional: absent means every
// zero term is 0); perm as w4a16_linear's. packed, gemm_scales and gemm_zeros may be the column slices above (dim 0
// strided). CPU: x, out f32, W unpacked to f32 then a GEMM (the reference). CUDA: x, out bf16 (bias f32 or bf16), the
// CUTLASS mixed-input GEMM where it applies (w4a16_gemm.h: alignment, k % 64, groups of a multiple of 64 columns),
// else W dequantized to bf16 in a scratch and ops::linear.
extern Op<void(Tensor& out, const Tensor& x, const Tensor& packed, const Tensor& gemm_scales, const Tensor* gemm_zeros,
               const Tensor* perm, const Tensor* bias)>
    w4a16_gemm;

// ---- mixture of experts (checks: kernels/moe_ops.cc; kernels/cpu/moe.cc, kernels/cuda/moe.cu + moe_gemm.cu) ----
// The path of a FusedMoE block (model/layers/fused_moe.h): router logits (ops::linear) -> moe_route -> moe_align (or
// the two in one call, moe_route_and_align) -> moe_gemm (gate/up, gathering token rows) -> moe_gemm_silu (silu_and_mul
// -> down) -> moe_combine (or moe_combine_add_rms_norm, the next norm with it). Token t's j-th choice is the pair p = t
// * top_k + j. Experts' weights are stacked [num_experts, n, k] (HF [out, in] per expert). Limits (model_config.cc
// refuses configs past them): num_experts <= kMaxMoeExperts, top_k <= kMaxMoeTopK.
inline constexpr int64_t kMaxMoeExperts = 1024;
inline constexpr int64_t kMaxMoeTopK = 32;
// moe_route's scoring argument.
inline constexpr int64_t kMoeScoringSoftmax = 0;  // softmax over all experts' logits, in f32 (Mixtral, Qwen-MoE)
inline constexpr int64_t kMoeScoringSigmoid = 1;  // sigmoid of each logit
// CUDA: moe_gemm's tensor-core tiles cover kMoeGemmTileRows rows of one expert (moe_align's block a multiple of it;
// Hopper, 16-bit: a CUTLASS grouped GEMM over each expert's pairs, padding zeroed), or kMoeGemmSmallTileRows when the
// block is a multiple of that only (less padding computed); while the touched experts average at most
// kMoeStreamMaxRowsPerExpert pairs, a weight-streaming kernel (each expert's weight rows read once per call, dotted
// with all of its rows) runs instead (block 1). Switch measured (`moe_gpu_test --bench`, H200, Qwen3-30B-A3B layer,
// 128 experts x top-8): streaming wins at 4 tokens (93 vs 115 us for the CUTLASS grouped GEMM at block 16), CUTLASS
// from 16 tokens (229 vs 266 us; 64 tokens: 339 vs 478 us).
inline constexpr int64_t kMoeGemmTileRows = 64;
inline constexpr int64_t kMoeGemmSmallTileRows = 16;
inline constexpr int64_t kMoeStreamMaxRowsPerExpert = 1;

// The router: scores = softmax(logits row) (scoring kMoeScoringSoftmax; f32 math, as transformers' routers) or
// sigmoid(logits) (kMoeScoringSigmoid); topk_ids[t] = the k highest-scoring experts, descending, equal scores in
// ascending expert index (ops::top_k's rule, on CPU and CUDA alike). torch.topk leaves the order of ties unspecified
// (torch 2.11's CPU kernel returns [2, 4, 1] for three equal scores at 1, 2, 4), so among exactly tied experts
// transformers' choice is arbitrary and ours is the deterministic one; continuous router logits practically never
// tie. topk_weights[t] = their scores, divided by the sum of the k when renormalize != 0 (Mixtral always, Qwen-MoE's
// norm_topk_prob). NaN scores rank below every number.
// router_logits [T, E] (CPU f32; CUDA f32, f16 or bf16); topk_weights [T, k] f32; topk_ids [T, k] i32.
extern Op<void(Tensor& topk_weights, Tensor& topk_ids, const Tensor& router_logits, int64_t scoring,
               int64_t renormalize)>
    moe_route;

// DeepSeek-V3's group-limited router (transformers' DeepseekV3TopkRouter): scores = sigmoid(logits) (f32);
// choice = scores + correction_bias; the E experts form num_groups equal groups, each scored by the sum of its two
// highest choice values; only the topk_groups best groups stay (ties: lower group first); topk_ids[t] = the k highest
// choice values among their experts (descending, ties to the lower index); topk_weights[t] = those experts' scores
// (without the bias), divided by (their sum + 1e-20) when renormalize != 0, times routed_scaling_factor.
// router_logits as moe_route's; correction_bias [E] f32; num_groups <= 32 dividing E into groups of >= 2;
// 1 <= topk_groups <= num_groups; k <= topk_groups * E / num_groups.
extern Op<void(Tensor& topk_weights, Tensor& topk_ids, const Tensor& router_logits, const Tensor& correction_bias,
               int64_t num_groups, int64_t topk_groups, int64_t renormalize, float routed_scaling_factor)>
    moe_route_grouped;

// Groups pairs by expert: expert e owns rows [expert_offsets[e], expert_offsets[e + 1]) of the grouped GEMMs, its
// pairs in ascending pair order, then -1 (padding) up to a multiple of `block` (1: no padding). pair_rows[p] = the
// row of pair p. Rows of sorted_pairs past expert_offsets[E] are left untouched. experts_touched[0] += the number of
// experts owning at least one pair (a running count of the expert weights the grouped GEMMs read; `bench latency`
// zeroes it before a decode phase and reads it after, for the floor of the bytes actually read). topk_ids [T, k] i32,
// each in [0, E) (CPU aborts on others; CUDA traps); sorted_pairs [capacity] i32 with capacity >=
// moe_align_capacity(T k, E, block); pair_rows [T k] i32; expert_offsets [E + 1] i32; experts_touched [1] i64.
extern Op<void(Tensor& sorted_pairs, Tensor& pair_rows, Tensor& expert_offsets, Tensor& experts_touched,
               const Tensor& topk_ids, int64_t block)>
    moe_align;

// moe_route then moe_align on its ids, in one call (arguments as theirs; the same outputs): on CUDA one kernel for
// decode batches of up to kMoeRouteAlignMaxTokens tokens (one block routes each token in turn, then groups the
// pairs: one launch a layer less), else the two kernels; the CPU runs the two ops.
inline constexpr int64_t kMoeRouteAlignMaxTokens = 4;
extern Op<void(Tensor& topk_weights, Tensor& topk_ids, const Tensor& router_logits, int64_t scoring,
               int64_t renormalize, Tensor& sorted_pairs, Tensor& pair_rows, Tensor& expert_offsets,
               Tensor& experts_touched, int64_t block)>
    moe_route_and_align;

// The grouped GEMM: for every row r < expert_offsets[E] of expert e with pair p = sorted_pairs[r] >= 0,
// out[r] = x_r @ weight[e]^T, where x_r = x[p / gather_top_k] (gather_top_k > 0: x [T, K], the tokens) or x[r]
// (gather_top_k == 0: x [capacity, K], already grouped); padding rows (p < 0) get zeros; rows past
// expert_offsets[E] are left untouched. weight [E, N, K]; out [capacity, N]; `block` is moe_align's (CUDA runs
// tensor-core tiles when it is a multiple of kMoeGemmSmallTileRows, the weight-streaming kernel otherwise). CPU: x
// and out f32, weight f32 or bf16 (ops::linear per expert); CUDA: x, weight and out one dtype (f32, f16 or bf16), f32
// accumulation. Offsets and pairs out of range abort on CPU (CUDA: the caller's invariant, from moe_align).
extern Op<void(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& sorted_pairs,
               const Tensor& expert_offsets, int64_t gather_top_k, int64_t block)>
    moe_gemm;

// The down projection fed by the gated activation: out = moe_gemm(silu_and_mul(gate_up), weight, gather_top_k 0),
// i.e. out[r] = (silu(g_r) * u_r) @ weight[e]^T with g_r, u_r the two halves of gate_up[r], the product rounded to
// gate_up's dtype as silu_and_mul stores it. CUDA's weight-streaming path (block 1, 16-bit) applies the activation
// while it reads its input, saving a kernel and the intermediate's round trip; the other paths (CPU, tensor-core
// tiles, f32) write silu_and_mul(gate_up) into `act` and run moe_gemm on it, so act's contents afterwards are
// unspecified. gate_up [capacity, 2K]; act [capacity, K] in gate_up's dtype; the rest as moe_gemm's.
extern Op<void(Tensor& out, Tensor& act, const Tensor& gate_up, const Tensor& weight, const Tensor& sorted_pairs,
               const Tensor& expert_offsets, int64_t block)>
    moe_gemm_silu;

// Back to token order: out[t] = sum_j topk_weights[t, j] * expert_out[pair_rows[t k + j]] (j ascending, f32 sums)
// + g_t * shared_out[t] when shared_out is given, g_t = sigmoid(shared_gate[t, 0]) when shared_gate is given
// (Qwen2-MoE's gated shared expert), else 1. out [T, H] (must not alias expert_out); expert_out [capacity, H];
// topk_weights [T, k] f32; pair_rows [T k] i32; shared_out [T, H]; shared_gate [T, 1]; out, expert_out, shared_out
// and shared_gate one dtype (CPU f32; CUDA f32, f16 or bf16).
extern Op<void(Tensor& out, const Tensor& expert_out, const Tensor& topk_weights, const Tensor& pair_rows,
               const Tensor* shared_out, const Tensor* shared_gate)>
    moe_combine;

// moe_combine into x, then fused_add_rms_norm(x, residual, weight, eps): an MoE block's output folded into the next
// pre-norm step (the next layer's input_layernorm, or the final norm), the same results as the two ops. CUDA: one
// kernel where the two would take their vectorised forms (hidden % 8 == 0, 256 < hidden <= 8192, 16-byte-aligned
// rows), else the two; the CPU runs the two. x's old contents are not read. Arguments as the two ops'.
extern Op<void(Tensor& x, Tensor& residual, const Tensor& expert_out, const Tensor& topk_weights,
               const Tensor& pair_rows, const Tensor* shared_out, const Tensor* shared_gate, const Tensor& weight,
               float eps)>
    moe_combine_add_rms_norm;

// moe_align's block for num_pairs pairs over num_experts experts on `device`: 1 on CPU and on CUDA while the touched
// experts average at most kMoeStreamMaxRowsPerExpert pairs (the weight-streaming kernel); kMoeGemmSmallTileRows while
// experts average fewer than 16 rows; else kMoeGemmTileRows.
int64_t moe_align_block(Device device, int64_t num_pairs, int64_t num_experts);
// Rows the grouped GEMMs need for num_pairs pairs over num_experts experts padded to `block`.
int64_t moe_align_capacity(int64_t num_pairs, int64_t num_experts, int64_t block);

// ---- paged KV cache and attention ----

// Cache layout: [num_blocks, block_size, num_kv_heads, head_dim]; dtype f32 on CPU, on CUDA the activation
// dtype (bf16 / f16 fast paths, f32 a plain correct path); key, value, query and out share the cache's dtype.
// Slot s lives at block s / block_size, offset s % block_size. Slots past the cache abort on CPU; on CUDA they
// are skipped (the device cannot abort without a host sync; the KV-cache manager never produces them).
// key, value [n, num_kv_heads, head_dim] are written at slot_mapping [n] (i64); a negative slot is skipped
// (padding tokens).
extern Op<void(const Tensor& key, const Tensor& value, Tensor& key_cache, Tensor& value_cache,
               const Tensor& slot_mapping)>
    reshape_and_cache;

// rotary_embedding(positions, query, key) then reshape_and_cache(key, value) in one pass (one launch on CUDA:
// every short decode kernel has a fixed cost): query [n, num_heads, head_dim], key and value
// [n, num_kv_heads, head_dim], all row-strided with one dtype (the cache's); the key is left rotated in place too.
extern Op<void(const Tensor& positions, Tensor& query, Tensor& key, const Tensor& value, int64_t head_dim,
               const Tensor& cos_sin_cache, Tensor& key_cache, Tensor& value_cache, const Tensor& slot_mapping)>
    rotary_embedding_and_cache;

// Qwen3's per-head q/k RMSNorm, then rotary_embedding_and_cache: query (in place) = rotary(rms_norm(query) *
// q_weight), key likewise with k_weight, rotated key and value into the cache. q_weight, k_weight [head_dim]. The
// same bits as rms_norm on the two [n, heads, head_dim] views then rotary_embedding_and_cache (on CUDA one launch
// where those take three, when head_dim is 16, 32, 64, 128 or 256 and the rows are 16-byte aligned).
extern Op<void(const Tensor& positions, Tensor& query, Tensor& key, const Tensor& value, int64_t head_dim,
               const Tensor& cos_sin_cache, const Tensor& q_weight, const Tensor& k_weight, float eps,
               Tensor& key_cache, Tensor& value_cache, const Tensor& slot_mapping)>
    qk_norm_rotary_embedding_and_cache;

// What the attention kernels need to know about a mixed prefill + decode batch. Requests are laid out in
// the token dimension one after another; request r owns tokens [query_start_loc[r], query_start_loc[r+1]).
struct AttentionMetadata {
  // Buffers may be longer than num_reqs (persistent, fixed-capacity); only the first num_reqs (+1) rows are read.
  Tensor query_start_loc;  // [num_reqs + 1] i32, on the op's device; query_start_loc[0] == 0
  Tensor seq_lens;         // [num_reqs] i32: context length after this step (cached + new tokens)
  Tensor block_table;      // [num_reqs, max_blocks_per_seq] i32: physical block ids (rows may be strided)
  Tensor slot_mapping;     // [num_tokens] i64
  int64_t num_reqs = 0;
  int64_t num_decode_tokens = 0;  // requests with one query token come first (a runner convention)
  int64_t max_query_len = 0;      // CUDA: >= every query length (sizes the prefill grid); 0 = unknown
  int64_t max_seq_len = 0;        // CUDA: split-K hint (e.g. max_model_len under graphs); 0 = unknown
  // CUDA split-K scratch for decode over long contexts: f32, contiguous, on the device, allocated once and
  // ZEROED by the runner (Tensor::zeros) with paged_attention_workspace_elems() elements: its first
  // kPagedAttentionWorkspaceCounters elements are int32 arrival counters that every call leaves at zero again
  // (graph-safe: no memset per call). Undefined: no split-K (still correct, slower for few long sequences).
  // Ignored on CPU. One workspace serves one stream at a time.
  Tensor workspace;
  // CUDA, optional: the SM90 prefill kernel's work lists for this step (kernels/prefill_schedule.h), planned by the
  // runner on the host and copied with the step's inputs; the prefill requests then run that kernel when the call
  // matches what was planned (heads, head_dim; bf16 / f16, no sliding window), else the portable prefill kernel.
  // Not in the op's schema (a torch caller runs the portable kernel).
  PrefillSchedule prefill_schedule;
  // CUDA, optional: the SM90 MLA kernel's work lists for this step (kernels/mla_schedule.h), planned the same way;
  // ops::mla_attention runs that kernel when the call matches what was planned (heads, the device's SMs; bf16,
  // L 512, R 64), its split-K partials in `workspace` past the counters. Not in the op's schema.
  MlaSchedule mla_schedule;
};

// In a schema: its fields in order, workspace optional (prefill_schedule and mla_schedule are not in it).
template <>
struct SchemaArgTypes<const AttentionMetadata&> {
  static constexpr std::string_view kTypes = "Tensor, Tensor, Tensor, Tensor, int, int, int, int, Tensor?";
};

// Leading elements of the attention workspace that hold the split-K counters (see AttentionMetadata).
inline constexpr int64_t kPagedAttentionWorkspaceCounters = 1024;

// Elements of the f32 split-K workspace (counters included) for batches of up to max_num_tokens tokens of
// num_heads x head_dim and contexts up to max_model_len (0 when split-K never pays: short contexts). Allocate
// once, zeroed; the kernels use fewer splits, or none, when a batch needs more than this.
int64_t paged_attention_workspace_elems(int64_t max_num_tokens, int64_t num_heads, int64_t head_dim,
                                        int64_t max_model_len);

// Causal attention of each query token over its request's cached keys/values (the new tokens' K/V must be in
// the cache already). Query token j of request r sits at position seq_lens[r] - query_len(r) + j and attends to
// positions [max(0, pos - sliding_window + 1), pos] (sliding_window <= 0: unlimited). GQA: query head h uses
// kv head h / (num_heads / num_kv_heads). query, out [n, num_heads, head_dim]; caches as above.
// Tokens past query_start_loc[num_reqs] (padding) get zeros. The CPU kernel reads only query_start_loc, seq_lens
// and block_table; the counts and maxima are hints for GPU kernels. Block ids outside the cache abort on CPU (on
// CUDA they are the caller's bug: not checked, the device cannot abort). CUDA: the first num_decode_tokens
// requests must have one query token each (decode kernel), the rest run the tiled prefill kernel; f32 and
// head_dims other than 16/32/64/128 (up to 256) run a generic kernel. Launches on cuda::current_stream(), no
// host sync, no allocation (graph-safe).
extern Op<void(Tensor& out, const Tensor& query, const Tensor& key_cache, const Tensor& value_cache,
               const AttentionMetadata& metadata, float scale, int64_t sliding_window)>
    paged_attention;

// ---- multi-head latent attention (DeepSeek-V2 / V3; model/layers/mla_attention.h) ----
// The latent KV cache holds one row of L + R values per token and layer (shared by every head):
// latent_cache [num_blocks, block_size, L + R] = [kv_c (L: kv_a_layernorm of the compressed KV), k_pe (R: the
// rotated rope key)], L = kv_lora_rank, R = qk_rope_head_dim. Slots as reshape_and_cache's.

// out[b] = x[b] @ weight[b]^T for every b < B: x [B, m, k], weight [B, n, k] (contiguous), out [B, m, n]. x and out
// may have any strides in dims 0 and 1 (dim 2 contiguous): MLA views a [T, H, D] activation as [H, T, D] to
// multiply each head by its own matrix. out must not overlap x. CPU: x and out f32, weight f32 or bf16.
// CUDA: x, weight and out one dtype (f32, f16 or bf16), f32 accumulation.
extern Op<void(Tensor& out, const Tensor& x, const Tensor& weight)> batched_linear;

// MLA's rotary and latent-cache write in one pass. q_pe [n, H, R] (rows and heads strided, last dim contiguous)
// is rotated into q_out [n, H, R] (same layout rules; may alias q_pe); k_pe [n, R] (row-strided) is rotated in
// place; then row slot_mapping[t] of latent_cache [num_blocks, block_size, L + R] gets [kv_c[t] (L values),
// rotated k_pe[t] (R values)]; a negative slot is skipped. kv_c [n, L] row-strided. Rotation by
// cos_sin_cache [max_position, R] f32 (rotary_embedding's layout: cos in columns [0, R/2), sin in [R/2, R)):
// interleaved != 0 rotates the pairs (x[2i], x[2i+1]) by frequency i (GPT-J style: DeepSeek's rope_interleave),
// else the pairs (x[i], x[i + R/2]) (rotate-half). positions [n] i64, slot_mapping [n] i64; q_pe, q_out, k_pe,
// kv_c and the cache share one dtype (CPU f32; CUDA f32, f16 or bf16). Positions past the cos/sin cache abort
// (CPU; CUDA traps), slots past the cache abort on CPU (CUDA skips them, as reshape_and_cache).
extern Op<void(const Tensor& positions, const Tensor& q_pe, Tensor& q_out, Tensor& k_pe, const Tensor& kv_c,
               const Tensor& cos_sin_cache, int64_t interleaved, Tensor& latent_cache, const Tensor& slot_mapping)>
    mla_rotary_and_cache;

// Multi-head latent attention in the absorbed form: all H heads attend over the one latent row per token of
// latent_cache [num_blocks, block_size, L + R]. query [n, H, L + R] (per head W_UK^T q_nope, then the rotated rope
// part); score(t, h, j) = scale * query[t, h, :] . row_j; out [n, H, L] = the softmax-weighted sum of the rows'
// first L columns (c_kv). L = out.size(2). Causal with paged_attention's metadata and rules (query token j of
// request r at position seq_lens[r] - query_len(r) + j attends to positions [0, pos]; no sliding window; padding
// tokens past query_start_loc[num_reqs] get zeros). query and out row-strided (dims 1, 2 contiguous), the cache's
// dtype. CPU f32. CUDA f32, f16 or bf16, any L and R that are multiples of 16 with L + R <= 1024 (fast paths for
// DeepSeek's L = 512, R = 64); metadata.workspace as paged_attention's (when defined it holds at least
// paged_attention_workspace_elems(max_num_tokens, H, L, max_model_len) elements, counters zero): use fewer splits,
// or none, when a batch needs more. Graph-safe (no host sync, no allocation).
extern Op<void(Tensor& out, const Tensor& query, const Tensor& latent_cache, const AttentionMetadata& metadata,
               float scale)>
    mla_attention;

// ---- logits ----

// out [n, vocab] = log_softmax(logits [n, vocab]) row-wise (f32; out may alias logits).
extern Op<void(Tensor& out, const Tensor& logits)> log_softmax;

// The k largest values of each row, descending; ties keep the lower id first; NaN ranks below every number.
// 0 <= k <= vocab (CUDA: k <= 1024).
// x [n, vocab] f32; values [n, k] f32; ids [n, k] i32.
extern Op<void(Tensor& values, Tensor& ids, const Tensor& x, int64_t k)> top_k;

// out_ids [n] i32 = argmax of each row of logits [n, vocab]; ties pick the lowest id; NaN is never chosen over
// a number.
extern Op<void(Tensor& out_ids, const Tensor& logits)> argmax;

// ==== sampling (schemas and checks: kernels/sampling_ops.cc; kernels/cpu/sampling.cc, kernels/cuda/sampling.cu) ====
// Every op works on a batch of rows, logits [num_reqs, vocab] f32 (row-strided), edited in place, with per-row
// parameters as tensors on the logits' device so the CUDA ops take the same arguments. Each Params struct has a
// check() that returns InvalidArgument naming the field whose shape / dtype / device does not fit the logits;
// the op aborts (CHECK) on such an error, and on ids outside [0, vocab) or malformed offsets (caller bugs: the
// runtime's Sampler validates user input first). vLLM V1 order: see runtime/sampler.h.
// CUDA: the same rules, one block per row (kernels/cuda/sampling.cu); apply_penalties takes vocab <= 393216.

// Temperatures below this mean greedy sampling (vLLM's _SAMPLING_EPS).
inline constexpr float kSamplingEps = static_cast<float>(llmserve::kSamplingEps);

// Variable-length lists of token ids, one per row (CSR): row r owns token_ids[offsets[r], offsets[r + 1]).
struct TokenLists {
  Tensor offsets;    // [num_reqs + 1] i32, offsets[0] == 0, non-decreasing, offsets[num_reqs] <= token_ids size
  Tensor token_ids;  // [total] i32, each in [0, vocab)
  Status check(const Tensor& logits, const char* name) const;
};
// In a schema: offsets, token_ids.
template <>
struct SchemaArgTypes<const TokenLists&> {
  static constexpr std::string_view kTypes = "Tensor, Tensor";
};

// vLLM's penalties. For every id in the row's prompt or output (once, however often it occurs):
// logit = logit > 0 ? logit * (1 / repetition_penalty) : logit * repetition_penalty. Then for every id occurring
// c > 0 times in the output: logit -= frequency_penalty * c; logit -= presence_penalty.
struct PenaltyParams {
  TokenLists prompt_tokens;  // only read for rows with repetition_penalty != 1
  TokenLists output_tokens;
  Tensor repetition_penalties;  // [num_reqs] f32, > 0; 1 = off
  Tensor frequency_penalties;   // [num_reqs] f32; 0 = off
  Tensor presence_penalties;    // [num_reqs] f32; 0 = off
  Status check(const Tensor& logits) const;
};
// In a schema: prompt and output token lists (offsets, token_ids), then the three penalties.
template <>
struct SchemaArgTypes<const PenaltyParams&> {
  static constexpr std::string_view kTypes = "Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor";
};
extern Op<void(Tensor& logits, const PenaltyParams& params)> apply_penalties;

// logits[r, tokens.token_ids[j]] += values[j] for each j of row r (a repeated id adds twice).
struct LogitBiasParams {
  TokenLists tokens;
  Tensor values;  // [total] f32, parallel to tokens.token_ids
  Status check(const Tensor& logits) const;
};
// In a schema: offsets, token_ids, values.
template <>
struct SchemaArgTypes<const LogitBiasParams&> {
  static constexpr std::string_view kTypes = "Tensor, Tensor, Tensor";
};
extern Op<void(Tensor& logits, const LogitBiasParams& params)> apply_logit_bias;

// logits[r, id] = -inf for every id in row r's list (min_tokens: the stop / eos ids of rows still short of it).
extern Op<void(Tensor& logits, const TokenLists& tokens)> mask_tokens;

// Structured output: logits[r, j] = -inf unless bit (j % 32) of bitmask[r, j / 32] is set (xgrammar's layout, least
// significant bit first); ids at or past 32 * words are disallowed. bitmask [num_reqs, words] i32 on the logits'
// device, words >= 1 (a row of all ones leaves the logits untouched).
extern Op<void(Tensor& logits, const Tensor& bitmask)> apply_token_bitmask;

// logits[r, :] /= temperatures[r] for rows with temperature >= kSamplingEps; greedy rows are left unchanged.
// temperatures [num_reqs] f32.
extern Op<void(Tensor& logits, const Tensor& temperatures)> apply_temperature;

// vLLM's min-p, top-k and top-p masks on (temperature-scaled) logits: filtered tokens become -inf. Tokens are
// ranked by logit descending, equal logits by lower id first; every mask keeps a prefix of that ranking and
// always keeps the first token, so a row keeps at least one finite logit if it had one. NaN logits become -inf.
//   min-p: keeps tokens with prob >= min_p * max_prob, evaluated as exp(logit - max_logit) >= min_p.
//   top-k: keeps every token whose logit >= the k-th largest logit (all ties at the threshold are kept, as
//          vLLM's `logits < kth_value` mask does, so more than k tokens may survive).
//   top-p: on the distribution renormalised over the survivors of min-p and top-k, keeps the ranking's
//          shortest prefix whose probability mass reaches top_p: a token stays iff the mass ranked before it is
//          < top_p (sums in double). Ties at the cut are settled by the id order above.
// The three commute as vLLM applies them (min-p, then top-k, then top-p on the renormalised remainder).
struct SamplingFilterParams {
  Tensor top_k;  // [num_reqs] i32; <= 0 or >= vocab: off
  Tensor top_p;  // [num_reqs] f32 in (0, 1]; >= 1: off
  Tensor min_p;  // [num_reqs] f32 in [0, 1]; <= 0: off
  Status check(const Tensor& logits) const;
};
// In a schema: top_k, top_p, min_p.
template <>
struct SchemaArgTypes<const SamplingFilterParams&> {
  static constexpr std::string_view kTypes = "Tensor, Tensor, Tensor";
};
extern Op<void(Tensor& logits, const SamplingFilterParams& params)> apply_top_k_top_p_min_p;

// Draws one token per row. Greedy rows (temperature < kSamplingEps) take the argmax (lowest id on ties). Other
// rows sample from softmax(logits row) by inverse CDF: u = philox::uniform(seeds[r], offsets[r]) in [0, 1),
// and the token is the first id (ascending id order) whose cumulative weight exp(logit - max) exceeds u * total
// (sums in double). -inf and NaN logits have weight 0 and are never drawn; a row with no finite logit takes its
// argmax; +inf logits share the whole mass equally. CUDA draws the same u from the same Philox stream, so a
// seeded row picks the same token as the CPU given the same logits (up to exp() rounding: a draw can differ only
// when u * total lies within ~1e-6 relative of a cumulative-weight boundary).
struct SampleParams {
  Tensor temperatures;  // [num_reqs] f32: only compared with kSamplingEps (apply_temperature has scaled the row)
  Tensor seeds;         // [num_reqs] i64: Philox key (bit pattern)
  Tensor offsets;       // [num_reqs] i64: Philox counter (bit pattern), e.g. the request's step index
  Status check(const Tensor& logits) const;
};
// In a schema: temperatures, seeds, offsets.
template <>
struct SchemaArgTypes<const SampleParams&> {
  static constexpr std::string_view kTypes = "Tensor, Tensor, Tensor";
};
extern Op<void(Tensor& out_ids, const Tensor& logits, const SampleParams& params)> sample;

// For each row: out_logprobs[r] = logprobs[r, token_ids[r]] and out_ranks[r] = the number of ids whose logprob
// is >= it (1 = most likely; ties count against the token, vLLM's rank rule). logprobs [num_reqs, vocab] f32;
// token_ids [num_reqs] i32; out_logprobs [num_reqs] f32; out_ranks [num_reqs] i32.
extern Op<void(Tensor& out_logprobs, Tensor& out_ranks, const Tensor& logprobs, const Tensor& token_ids)>
    gather_token_logprobs;

// Async scheduling: a step's input ids at placeholder positions are the previous step's sampled ids, which never
// went through the host. input_ids[index[i, 0]] = sampled_ids[index[i, 1]] for every row i. input_ids [num_tokens]
// i32, sampled_ids [num_sampled] i32, index [n, 2] i32 (positions and rows in range: the caller's invariant, checked
// on the CPU), all on one device.
extern Op<void(Tensor& input_ids, const Tensor& sampled_ids, const Tensor& index)> scatter_sampled_ids;

}  // namespace llmserve::ops

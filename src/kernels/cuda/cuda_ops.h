// CUDA implementations of kernels/ops.h (all but attention and the KV-cache write). ops.cc / sampling_ops.cc have
// checked shapes, dtypes and devices; these launch on cuda::current_stream(), never allocate and never synchronise
// with the host (graph-safe), and CHECK the launch. Plain C++ header (no CUDA includes) so ops.cc compiles with the
// host compiler.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace llmserve::cuda {

// ---- elementwise and normalisation: activations f32, f16 or bf16 (one dtype per op), f32 math ----

// x, out [n, d] row-strided, same dtype; weight [d] f32, f16 or bf16. out may alias x.
void rms_norm(Tensor& out, const Tensor& x, const Tensor& weight, float eps);
// residual += x (rounded to the tensors' dtype), x = rms_norm(residual) * weight.
void fused_add_rms_norm(Tensor& x, Tensor& residual, const Tensor& weight, float eps);
// out [n, d] = silu(x[:, :d]) * x[:, d:], x [n, 2d]; same dtype.
void silu_and_mul(Tensor& out, const Tensor& x);
// a += b, same shape and dtype, row-strided.
void add(Tensor& a, const Tensor& b);
// out [m, n] += bias [n] (broadcast over rows); the linear epilogue where cuBLASLt's cannot take the bias.
void add_bias(Tensor& out, const Tensor& bias);
// out[t, :] = table[ids[t], :]; table and out of any float dtype (converted). An id outside the table traps.
void embedding(Tensor& out, const Tensor& ids, const Tensor& table);
// Rotate-half rotary embedding in place; query and key share a float dtype, cos_sin_cache f32. A position past
// the cache traps.
void rotary_embedding(const Tensor& positions, Tensor& query, Tensor& key, int64_t head_dim,
                      const Tensor& cos_sin_cache);
// rotary_embedding, then the rotated key and the value written at slot_mapping into the paged caches (as
// reshape_and_cache: negative slots and slots past the cache skipped), in one launch.
void rotary_embedding_and_cache(const Tensor& positions, Tensor& query, Tensor& key, const Tensor& value,
                                int64_t head_dim, const Tensor& cos_sin_cache, Tensor& key_cache, Tensor& value_cache,
                                const Tensor& slot_mapping);

// ---- GEMM (cuBLASLt; kernels/cuda/gemm.cc) ----

// out [m, n] = x [m, k] @ weight [n, k]^T (+ bias [n]). x and weight share a dtype (f32: exact f32, no TF32;
// f16; bf16), out in x's dtype or f32, bias in out's dtype or f32. x and out may be row-strided. One cuBLASLt
// handle and a 32 MiB workspace per device are created by the first call (run it before any graph capture);
// algorithms are cached per shape.
// Single-row products (m <= kMaxGemvRows = 1, 16-bit x and weight, 16-byte aligned rows) take the
// weight-streaming GEMV (gemv.cu) instead: it reads the weight at a higher fraction of the bandwidth at m = 1, and
// cuBLASLt wins from m = 4 (bench/RESULTS.md).
void linear(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor* bias);
// The two paths of linear, for tests and benchmarks: cuBLASLt always, and the GEMV where gemv_applies().
void cublaslt_linear(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor* bias);
inline constexpr int64_t kMaxGemvRows = 1;
bool gemv_applies(const Tensor& out, const Tensor& x, const Tensor& weight);
void gemv(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor* bias);

// ---- logits (f32) ----

void log_softmax(Tensor& out, const Tensor& logits);
// k <= kMaxTopK on CUDA.
inline constexpr int64_t kMaxTopK = 1024;
void top_k(Tensor& values, Tensor& ids, const Tensor& x, int64_t k);
void argmax(Tensor& out_ids, const Tensor& logits);

// ---- sampling (kernels/cuda/sampling.cu); ids outside the vocabulary or malformed offsets trap ----

// Largest vocabulary apply_penalties handles (its per-row seen-set is a bitmask in shared memory).
inline constexpr int64_t kMaxPenaltyVocab = 48 * 1024 * 8;
void apply_penalties(Tensor& logits, const ops::PenaltyParams& params);
void apply_logit_bias(Tensor& logits, const ops::LogitBiasParams& params);
void mask_tokens(Tensor& logits, const ops::TokenLists& tokens);
void apply_temperature(Tensor& logits, const Tensor& temperatures);
void apply_top_k_top_p_min_p(Tensor& logits, const ops::SamplingFilterParams& params);
void sample(Tensor& out_ids, const Tensor& logits, const ops::SampleParams& params);
void gather_token_logprobs(Tensor& out_logprobs, Tensor& out_ranks, const Tensor& logprobs, const Tensor& token_ids);

}  // namespace llmserve::cuda

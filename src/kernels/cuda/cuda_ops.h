// What the CUDA kernel files share, and what tests and benchmarks call directly (the two paths of linear, the
// kernels' size limits). The ops themselves are reached only through the op table (each file's
// register_*_kernels, register_kernels.cc). Plain C++ header (no CUDA includes) so host code can include it.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace llmserve::cuda {

// out [m, n] += bias [n] (broadcast over rows); the linear epilogue where cuBLASLt's cannot take the bias.
void add_bias(Tensor& out, const Tensor& bias);

// ---- the two paths of ops::linear (kernels/cuda/gemm.cc), for tests and benchmarks ----
// out [m, n] = x [m, k] @ weight [n, k]^T (+ bias [n]). x and weight share a dtype (f32: exact f32, no TF32;
// f16; bf16), out in x's dtype or f32, bias in out's dtype or f32. x and out may be row-strided. One cuBLASLt
// handle and a 32 MiB workspace per device are created by the first call (run it before any graph capture);
// algorithms are cached per shape.
// Single-row products (m <= kMaxGemvRows = 1, 16-bit x and weight, 16-byte aligned rows) take the
// weight-streaming GEMV (gemv.cu) instead: it reads the weight at a higher fraction of the bandwidth at m = 1, and
// cuBLASLt wins from m = 4 (bench/RESULTS.md).
void cublaslt_linear(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor* bias);
inline constexpr int64_t kMaxGemvRows = 1;
bool gemv_applies(const Tensor& out, const Tensor& x, const Tensor& weight);
void gemv(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor* bias);

// ---- moe_gemm's paths (moe_gemm.cu), for tests and benchmarks ----
// moe_align blocks that are multiples of `block` run the CUTLASS grouped GEMM (cutlass_moe_gemm.cu) where it applies
// (f16 / bf16, 16-byte aligned rows, sm_90); the others run the WMMA tile kernel (or streaming, for block 1). Default
// ops::kMoeGemmSmallTileRows, every tile block (0 when the environment sets LLMSERVE_MOE_CUTLASS=0; measured faster
// than the WMMA tiles from 1 to 8192 tokens, `moe_gpu_test --bench`); ops::kMoeGemmTileRows: prefill-sized batches
// only; 0: none. Process-wide: the GPU tests check both kernels against the CPU, `moe_gpu_test --bench`
// times both.
void set_moe_gemm_cutlass_block(int64_t block);
// The CUTLASS path's tile rows: 0 (default) by the rows per expert (cutlass_moe_gemm.cu), 64 (ping-pong) or 128
// (cooperative) forced.
void set_moe_gemm_cutlass_tile_rows(int64_t rows);

// ---- mla_attention's tensor-core path (mla_attention_mma.cu), for tests and benchmarks ----
// Heads per CTA of the tensor-core MLA kernel (bf16 / f16, L 512, R 64): 16 or 64 forced, 0 (default) by the head
// count and batch (16 up to 16 heads or for batches too small to spread 64-head CTAs over the GPU, else 64).
// Process-wide: the GPU tests check both, `mla_gpu_test --bench` times both.
void set_mla_heads_per_cta(int heads);
// Calls of ops::mla_attention on CUDA that ran FlashInfer's SM90 kernel (mla_attention_sm90.cu) since the process
// started: the GPU tests and the benchmark check that a planned call took that path and not a fallback.
int64_t mla_sm90_calls();

// ---- size limits of the CUDA kernels ----

// Largest k of ops::top_k on CUDA.
inline constexpr int64_t kMaxTopK = 1024;
// Largest vocabulary ops::apply_penalties handles on CUDA (its per-row seen-set is a bitmask in shared memory).
inline constexpr int64_t kMaxPenaltyVocab = 48 * 1024 * 8;

}  // namespace llmserve::cuda

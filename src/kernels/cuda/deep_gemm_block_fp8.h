// Block-FP8 GEMM through DeepGEMM's Hopper kernel (TensorRT-LLM's copy, shipped in the flashinfer-python wheel),
// specialised per (n, k, tile) and compiled at run time by NVRTC, as vLLM runs DeepGEMM. scaled_mm.cc tries it before
// CUTLASS's blockwise kernel; a problem it rejects, or a kernel that cannot be compiled, goes to CUTLASS.
#pragma once

#include "kernels/cuda/cutlass_scaled_mm.h"

namespace llmserve::cuda {

// Why DeepGEMM cannot take this block-FP8 problem (nullptr: it can): LLMSERVE_DEEP_GEMM=0, not an sm_90 device, an
// f16 output or a bias (its epilogue writes plain bf16), n not a multiple of 8 or k of 128, unaligned operands. Reads
// p.a_scales_ld (the activation scales' padded row count), not the scale pointers.
const char* deep_gemm_block_fp8_rejects(const CutlassScaledMM& p);

// Runs out = a . b^T with the block scales on the current stream: p.a_scales [k / 128, a_scales_ld] token-major (the
// layout cutlass_scaled_mm_block_fp8 reads), p.b_scales [ceil(n / 128), k / 128] (the op's own layout). Returns false,
// having launched nothing, when this shape's kernel is not compiled and cannot be now: NVRTC failed (logged once per
// kernel, never retried) or the stream is capturing a graph (compiling there is not allowed).
bool deep_gemm_block_fp8(const CutlassScaledMM& p);

}  // namespace llmserve::cuda

// The CUTLASS 3.x Hopper GEMMs behind ops::scaled_mm for m above the GEMV's range (scaled_mm.cc dispatches): fp8 e4m3
// and int8 with per-tensor / per-token x per-tensor / per-channel scales applied in the epilogue, and DeepSeek-style
// block-FP8 (per-token-group-128 activations x 128x128 weight blocks) with the scales applied in the mainloop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace llmserve::cuda {

// One row-major problem: out [m, n] = (a [m, k] . b [n, k]^T) scaled (+ bias [n]). Plain pointers so this header stays
// free of CUTLASS.
struct CutlassScaledMM {
  void* out = nullptr;      // [m, n] bf16 or f16 (out_f16)
  const void* a = nullptr;  // [m, k] fp8 e4m3 or i8
  const void* b = nullptr;  // [n, k] same type as a
  const float* a_scales = nullptr;
  const float* b_scales = nullptr;
  const float* bias = nullptr;  // [n] f32, or null
  int64_t m = 0, n = 0, k = 0;
  bool out_f16 = false;
  // Epilogue scales (fp8 / int8): a_scales [m] (per token) or [1]; b_scales [n] (per channel) or [1].
  bool a_per_token = false, b_per_channel = false;
  // Block scales (block-FP8): a_scales [k / 128, a_scales_ld] (token-major, the transpose of the op's [m, k / 128];
  // a_scales_ld >= m, a multiple of 4 for TMA), b_scales [k / 128, ceil(n / 128)] (the transpose of the op's).
  int64_t a_scales_ld = 0;
  // Device scratch of at least `bytes` (CUTLASS's workspace; none for these kernels so far, asked per call).
  std::function<void*(size_t bytes)> workspace;
};

// Why CUTLASS cannot take this problem on this device (nullptr: it can): not an sm_90 device, or operands TMA cannot
// address (k and n multiples of 16 bytes / 8 outputs, 16-byte aligned pointers).
const char* cutlass_scaled_mm_rejects(const CutlassScaledMM& p, bool block);

// Launch on the current stream; CHECK-fails if CUTLASS refuses a problem cutlass_scaled_mm_rejects accepted.
void cutlass_scaled_mm_fp8(const CutlassScaledMM& p);
void cutlass_scaled_mm_int8(const CutlassScaledMM& p);
void cutlass_scaled_mm_block_fp8(const CutlassScaledMM& p);

}  // namespace llmserve::cuda

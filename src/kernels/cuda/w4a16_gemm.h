// The m > 32 path of W4A16 on CUDA (w4a16_gemm.cu): a CUTLASS 3.x Hopper mixed-input GEMM (int4 weights converted to
// bf16 in registers, group scales and zero terms applied there, wgmma) on the layout ops::w4a16_gemm_pack makes at
// load (ops.h). Plain C++ header: quant.cu's dispatch calls it; only w4a16_gemm.cu includes CUTLASS.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace llmserve::cuda {

// The packed weight (ops.h: w4a16_gemm_pack's layout) as the kernel reads it. A row slice [begin, end) of the weight
// (begin % 16 == 0) is the same pointers advanced by begin * 8 bytes (packed) and begin elements (scales, zeros) with
// the same pitches.
struct W4GemmParams {
  const uint8_t* packed;  // [k / 16, 8 n] bytes: k-column block j of 16-row band b at packed + j * packed_ld + 128 b
  int64_t packed_ld;      // bytes between k-column blocks (8 x the unsliced n)
  const void* scales;     // [groups, n] bf16, row pitch scales_ld elements
  const void* zeros;      // [groups, n] bf16 zero terms, same pitch; null: every zero term is 0 (scale-only kernel)
  int64_t scales_ld;
  int64_t n, k, groups;  // groups: k / 128-or-more columns each (or 1)
};

// Whether the GEMM takes this product: bf16 x, n % 16 == 0, k % 64 == 0, groups of a multiple of 64 columns (or one),
// TMA alignment (16-byte aligned pointers and pitches: x.stride(0) % 8 == 0, out.stride(0) % 8 == 0).
bool w4a16_cutlass_applies(const Tensor& out, const Tensor& x, const W4GemmParams& p);
// Device workspace the GEMM needs for m rows (the stream-K partial tiles); 0 when none.
size_t w4a16_cutlass_workspace_bytes(int64_t m, const W4GemmParams& p);
// out [m, n] (row-strided bf16) = x [m, k] (row-strided bf16, columns in the weight's order) @ W^T, f32 accumulation.
// `workspace`: w4a16_cutlass_workspace_bytes(m, p) bytes of device memory (contents need not be kept between calls).
void w4a16_cutlass_gemm(Tensor& out, const Tensor& x, const W4GemmParams& p, void* workspace);

}  // namespace llmserve::cuda

// Where W[r, c] lives in ops::w4a16_gemm_pack's layout (ops.h): one home for the CPU reference and the CUDA
// fallback's dequantization, so both read the nibble the pack wrote.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define LLMSERVE_W4_HD __host__ __device__
#else
#define LLMSERVE_W4_HD
#endif

namespace llmserve {

// A nibble's byte in packed ([k / 16, ...] with row pitch `pitch` bytes) and its shift within the byte. One value,
// not an out-parameter: `b[at(..., &shift)] >> shift` read shift before the call under GCC's UBSan shift
// instrumentation.
struct W4NibbleAt {
  int64_t byte;
  int shift;
};

// Within a 16 x 16 block, r = r0 + 8 r1 and c = c0 + 2 c1 + 8 c2 is nibble 32 r0 + r1 + 4 c0 + 8 c1 + 2 c2; the
// blocks of one 16-column band are 256 nibbles apart, the bands `pitch` bytes.
LLMSERVE_W4_HD inline W4NibbleAt w4a16_packed_nibble(int64_t r, int64_t c, int64_t pitch) {
  const int64_t rb = r % 16, cb = c % 16;
  const int64_t nib = 256 * (r / 16) + 32 * (rb % 8) + rb / 8 + 4 * (cb % 2) + 8 * ((cb / 2) % 4) + 2 * (cb / 8);
  return {(c / 16) * pitch + nib / 2, 4 * static_cast<int>(nib & 1)};
}

}  // namespace llmserve

#undef LLMSERVE_W4_HD

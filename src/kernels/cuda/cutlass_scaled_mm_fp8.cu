// The fp8 e4m3 instantiations of the CUTLASS scaled GEMM (cutlass_scaled_mm.cuh), and the check of which problems
// CUTLASS can take at all (cutlass_scaled_mm_rejects): one TU per input type keeps each compile to a few kernels.
#include "kernels/cuda/cutlass_scaled_mm.cuh"

namespace llmserve::cuda {

namespace {

bool is_sm90() {
  static const bool sm90 = [] {
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) return false;
    return major == 9 && minor == 0;  // the kernels are built for sm_90a (wgmma, TMA) only
  }();
  return sm90;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

const char* cutlass_scaled_mm_rejects(const CutlassScaledMM& p, bool block) {
  if (!is_sm90()) return "not an sm_90 device (the CUTLASS kernels are Hopper wgmma/TMA)";
  // TMA: every row of a, b and out starts on 16 bytes, i.e. k % 16 (1-byte inputs) and n % 8 (2-byte outputs).
  if (p.k % 16 != 0) return "k is not a multiple of 16 (TMA needs 16-byte rows)";
  if (p.n % 8 != 0) return "n is not a multiple of 8 (TMA needs 16-byte output rows)";
  if (!aligned16(p.a) || !aligned16(p.b) || !aligned16(p.out)) return "an operand is not 16-byte aligned";
  if (p.m > INT32_MAX || p.n > INT32_MAX || p.k > INT32_MAX) return "a dimension exceeds 2^31";
  // Vector scales and the bias are read one float per thread (the epilogue's broadcasts): any address. Block scales
  // are loaded by TMA, 16-byte rows of [k / 128, a_scales_ld].
  if (block && (!aligned16(p.a_scales) || p.a_scales_ld % 4 != 0)) return "the token-group scales are not TMA-aligned";
  return nullptr;
}

void cutlass_scaled_mm_fp8(const CutlassScaledMM& p) {
  // FastAccum: the wgmma accumulates all of k in its own (~14-bit-mantissa partial sum) precision instead of
  // promoting to f32 every few k-blocks; the fp8 inference norm, within ops::scaled_mm's stated tolerance.
  cutlass_mm::dispatch_by_m<cutlass::float_e4m3_t, cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum,
                            cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum,
                            cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum>(p, "CUTLASS fp8 scaled_mm");
}

}  // namespace llmserve::cuda

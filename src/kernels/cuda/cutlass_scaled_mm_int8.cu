// The int8 W8A8 instantiations of the CUTLASS scaled GEMM (cutlass_scaled_mm.cuh): s8 x s8 -> s32 accumulate (exact),
// the same scale-and-bias epilogue as fp8 (the s32 accumulator converted to f32 in it).
#include "kernels/cuda/cutlass_scaled_mm.cuh"

namespace llmserve::cuda {

void cutlass_scaled_mm_int8(const CutlassScaledMM& p) {
  cutlass_mm::dispatch_by_m<int8_t, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                            cutlass::gemm::KernelTmaWarpSpecializedCooperative>(p, "CUTLASS int8 scaled_mm");
}

}  // namespace llmserve::cuda

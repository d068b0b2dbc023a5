// Whether launch_pdl (cuda_common.cuh) asks for programmatic dependent launch: on Hopper and later (compute
// capability >= 9: older GPUs have no grid dependency control) unless LLMSERVE_PDL=0 (0 or 1; another value stops
// the process naming it); decided once per process, on the device current at the first launch. The switch lets one
// binary measure the overlap (bench/RESULTS.md). pdl_early_reads: LLMSERVE_PDL_EARLY_READS (0 or 1, default 0 until
// timed).
#include <cuda_runtime_api.h>

#include "core/env.h"

namespace llmserve::cuda {

bool pdl_enabled() {
  static const bool enabled = [] {
    if (!switch_from_env_or_die("LLMSERVE_PDL", true)) return false;
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
    return major >= 9;
  }();
  return enabled;
}

bool pdl_early_reads() {
  static const bool enabled = switch_from_env_or_die("LLMSERVE_PDL_EARLY_READS", false);
  return enabled;
}

}  // namespace llmserve::cuda

// Whether launch_pdl (cuda_common.cuh) asks for programmatic dependent launch: on Hopper and later (compute
// capability >= 9: older GPUs have no grid dependency control) unless LLMSERVE_PDL=0; decided once per process, on
// the device current at the first launch. The switch lets one binary measure the overlap (bench/RESULTS.md).
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>

namespace llmserve::cuda {

bool pdl_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("LLMSERVE_PDL");
    if (v != nullptr && std::strcmp(v, "0") == 0) return false;
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
    return major >= 9;
  }();
  return enabled;
}

}  // namespace llmserve::cuda

// Whether launch_pdl (cuda_common.cuh) asks for programmatic dependent launch: on unless LLMSERVE_PDL=0, read once.
// The switch exists so one binary can measure the overlap's effect (bench/RESULTS.md).
#include <cstdlib>
#include <cstring>

namespace llmserve::cuda {

bool pdl_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("LLMSERVE_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

}  // namespace llmserve::cuda

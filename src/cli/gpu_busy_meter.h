// GpuBusyMeter: the fraction of a wall-clock window in which the GPU ran at least one kernel, from CUPTI's kernel
// activity records (the union of kernel intervals inside the window over its length; kernels launched by CUDA
// graphs count too). The gaps it exposes are launch overhead and host time between steps.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace llmserve::cli {

class GpuBusyMeter {
 public:
  GpuBusyMeter() = default;
  ~GpuBusyMeter();
  GpuBusyMeter(const GpuBusyMeter&) = delete;
  GpuBusyMeter& operator=(const GpuBusyMeter&) = delete;

  // Starts recording kernel activity of this process. False, with the reason in *why_not, when the build has no
  // CUPTI or CUPTI refuses (e.g. another profiler holds it); the meter then stays off.
  bool start(std::string* why_not);
  // Ends the window (the caller has synchronised the device) and returns kernel-busy time / wall time in [0, 1];
  // nullopt if start() failed.
  std::optional<double> stop();

  // Union of [start, end) intervals clipped to [from, to), over (to - from). Exposed for tests.
  static double busy_fraction(std::vector<std::pair<uint64_t, uint64_t>> intervals, uint64_t from, uint64_t to);

 private:
  bool running_ = false;
  uint64_t from_ = 0;  // CUPTI timestamps (ns) of the window
};

}  // namespace llmserve::cli

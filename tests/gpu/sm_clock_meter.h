// What the current CUDA device's SM clock, board power and clock-event reasons were while a bench ran, read through
// NVML (loaded at run time: the binaries also start where no driver is installed), printed by the benches of
// compute-bound kernels beside their peak-clock floors: whether the chip held its peak clock while they ran.
#pragma once

#include <functional>
#include <string>

namespace llmserve::gpu_testing {

struct SmClockReading {
  int samples = 0;                 // 0: NVML unavailable (every other field 0)
  double mean_mhz = 0;             // the SM clock, mean of the samples
  double mean_watts = 0;           // board power, mean of the samples
  unsigned long long reasons = 0;  // NVML clock-event reasons seen in any sample (nvmlClocksEventReason*)
};

// Polls NVML every half millisecond on a side thread while f runs (f returns once its GPU work has finished, as
// mean_call_us does), plus one sample after it. The driver refreshes the clock it reports at its own pace: over runs
// of ~10 ms the reading tells whether the power cap engaged, not the clock each kernel ran at.
SmClockReading read_sm_clock_during(const std::function<void()>& f);

// The SM clock's maximum (NVML's max clock, MHz), 0 when NVML is unavailable.
unsigned max_sm_clock_mhz();

// The reasons as words, e.g. "power cap, thermal"; "none" for 0.
std::string clock_reasons_text(unsigned long long reasons);

}  // namespace llmserve::gpu_testing

// GpuBusyMeter: the fraction of a wall-clock window in which the GPU ran at least one kernel, from CUPTI's kernel
// activity records (the union of kernel intervals inside the window over its length; kernels launched by CUDA
// graphs count too). The gaps it exposes are launch overhead and host time between steps; a per-kernel breakdown of
// the same records says which kernels the busy time went to, and copy records and slow CUDA API calls say what the
// GPU waited for when the host did not launch.
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

  // Starts recording kernel, copy and memset activity of this process, and with api_calls the CUDA runtime and
  // driver calls too (a record per call: it slows the host, so only a breakdown asks for it). False, with the
  // reason in *why_not, when the build has no CUPTI or CUPTI refuses (e.g. another profiler holds it); the meter
  // then stays off.
  bool start(std::string* why_not, bool api_calls = false);
  // Ends the window (the caller has synchronised the device) and returns kernel-busy time / wall time in [0, 1];
  // nullopt if start() failed.
  std::optional<double> stop();

  // Union of [start, end) intervals clipped to [from, to), over (to - from). Exposed for tests.
  static double busy_fraction(std::vector<std::pair<uint64_t, uint64_t>> intervals, uint64_t from, uint64_t to);

  // The last window's kernels grouped by name, largest wall share first (durations summed, overlaps not merged),
  // and the idle stretches between the merged intervals.
  struct KernelTime {
    std::string name;
    int64_t count = 0;
    double total_us = 0;
    // The part of the window's busy time this kernel alone accounts for: from when it started or the kernels
    // started before it had all ended, whichever is later, to its end. A kernel launched early by programmatic
    // dependent launch waits at its grid dependency inside its duration; its wall share leaves that wait out.
    // The wall shares of all kernels sum to the busy time.
    double wall_us = 0;
  };
  const std::vector<KernelTime>& kernel_times() const { return kernel_times_; }
  int64_t idle_gaps() const { return idle_gaps_; }
  double idle_us() const { return idle_us_; }
  // Of that idle time: before the window's first kernel started (host work ahead of the GPU: input preparation,
  // launches) and after its last kernel ended (the host waiting for results, output handling).
  double leading_idle_us() const { return leading_idle_us_; }
  double trailing_idle_us() const { return trailing_idle_us_; }
  // The gaps between kernels grouped by the kernel that started after each (the one the GPU waited for), most idle
  // time first; total_us is the idle time, count the gaps.
  const std::vector<KernelTime>& idle_before() const { return idle_before_; }
  // Memory copies and sets in the window, grouped as "[memcpy HtoD]" etc. (they are not kernel time: the busy
  // fraction and the idle stretches count kernels only; idle_before() names a copy when it ended a gap).
  const std::vector<KernelTime>& copy_times() const { return copy_times_; }
  // CUDA runtime and driver API calls (when started with api_calls) that took at least kSlowHostCallNs, grouped by
  // name: where the host stalled (an allocation, a synchronisation, a pageable copy, a first launch loading its
  // module).
  static constexpr uint64_t kSlowHostCallNs = 200'000;
  const std::vector<KernelTime>& slow_host_calls() const { return slow_host_calls_; }

  struct KernelRecord {
    std::string name;
    uint64_t start = 0, end = 0;
  };
  // Keeps the records of calls of at least kSlowHostCallNs inside [from, to), grouped by name. Exposed for tests.
  static std::vector<KernelTime> slow_calls(const std::vector<KernelRecord>& calls, uint64_t from, uint64_t to);
  // Groups records by name (with each one's wall share, records in any order). Exposed for tests.
  static std::vector<KernelTime> group_by_name(std::vector<KernelRecord> records);
  static std::pair<int64_t, double> idle_stretches(std::vector<std::pair<uint64_t, uint64_t>> intervals, uint64_t from,
                                                   uint64_t to);
  // idle_before()'s grouping of [from, to). Exposed for tests.
  static std::vector<KernelTime> idle_before_kernels(std::vector<KernelRecord> records, uint64_t from, uint64_t to);
  // (idle before the first interval starts, idle after the last one ends) within [from, to), in us. Exposed for tests.
  static std::pair<double, double> edge_idle(const std::vector<std::pair<uint64_t, uint64_t>>& intervals, uint64_t from,
                                             uint64_t to);

 private:
  bool running_ = false;
  bool api_calls_ = false;
  uint64_t from_ = 0;  // CUPTI timestamps (ns) of the window
  std::vector<KernelTime> kernel_times_;
  int64_t idle_gaps_ = 0;
  double idle_us_ = 0;
  double leading_idle_us_ = 0, trailing_idle_us_ = 0;
  std::vector<KernelTime> idle_before_;
  std::vector<KernelTime> copy_times_;
  std::vector<KernelTime> slow_host_calls_;
};

}  // namespace llmserve::cli

// The SM clock meter of sm_clock_meter.h: NVML's entry points looked up in libnvidia-ml.so.1 (the driver's), the
// device found by the CUDA device's PCI bus id (CUDA_VISIBLE_DEVICES may renumber devices, NVML does not).
#include "sm_clock_meter.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nvml.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <type_traits>
#include <vector>

namespace llmserve::gpu_testing {
namespace {

struct Nvml {
  decltype(&nvmlDeviceGetClockInfo) clock_info = nullptr;
  decltype(&nvmlDeviceGetMaxClockInfo) max_clock_info = nullptr;
  decltype(&nvmlDeviceGetPowerUsage) power_usage = nullptr;
  decltype(&nvmlDeviceGetCurrentClocksEventReasons) event_reasons = nullptr;
  nvmlDevice_t device = nullptr;
  bool ok = false;
};

// Opened once per process and kept (NVML is not shut down: the process ends with the bench).
const Nvml& nvml() {
  static const Nvml n = [] {
    Nvml r;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return r;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    };
    decltype(&nvmlInit_v2) init = nullptr;
    decltype(&nvmlDeviceGetHandleByPciBusId_v2) by_bus_id = nullptr;
    sym(init, "nvmlInit_v2");
    sym(by_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
    sym(r.clock_info, "nvmlDeviceGetClockInfo");
    sym(r.max_clock_info, "nvmlDeviceGetMaxClockInfo");
    sym(r.power_usage, "nvmlDeviceGetPowerUsage");
    sym(r.event_reasons, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!init || !by_bus_id || !r.clock_info || !r.max_clock_info || !r.power_usage || !r.event_reasons) return r;
    int cuda_device = 0;
    char bus_id[32] = {};
    if (cudaGetDevice(&cuda_device) != cudaSuccess ||
        cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), cuda_device) != cudaSuccess || init() != NVML_SUCCESS ||
        by_bus_id(bus_id, &r.device) != NVML_SUCCESS) {
      return r;
    }
    r.ok = true;
    return r;
  }();
  return n;
}

struct Sample {
  unsigned mhz = 0, milliwatts = 0;
  unsigned long long reasons = 0;
};

bool take_sample(const Nvml& n, Sample& s) {
  return n.clock_info(n.device, NVML_CLOCK_SM, &s.mhz) == NVML_SUCCESS &&
         n.power_usage(n.device, &s.milliwatts) == NVML_SUCCESS &&
         n.event_reasons(n.device, &s.reasons) == NVML_SUCCESS;
}

}  // namespace

SmClockReading read_sm_clock_during(const std::function<void()>& f) {
  const Nvml& n = nvml();
  if (!n.ok) {
    f();
    return {};
  }
  std::vector<Sample> samples;
  std::atomic<bool> done{false};
  std::thread poller([&] {
    while (!done.load(std::memory_order_relaxed)) {
      Sample s;
      if (take_sample(n, s)) samples.push_back(s);
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  f();
  done = true;
  poller.join();
  if (Sample s; take_sample(n, s)) samples.push_back(s);
  SmClockReading r;
  if (samples.empty()) return r;
  r.samples = static_cast<int>(samples.size());
  double mhz = 0, watts = 0;
  for (const Sample& s : samples) {
    mhz += s.mhz;
    watts += s.milliwatts * 1e-3;
    r.reasons |= s.reasons;
  }
  r.mean_mhz = mhz / r.samples;
  r.mean_watts = watts / r.samples;
  return r;
}

unsigned max_sm_clock_mhz() {
  const Nvml& n = nvml();
  unsigned mhz = 0;
  return n.ok && n.max_clock_info(n.device, NVML_CLOCK_SM, &mhz) == NVML_SUCCESS ? mhz : 0;
}

std::string clock_reasons_text(unsigned long long reasons) {
  struct Name {
    unsigned long long bit;
    const char* text;
  };
  static constexpr Name kNames[] = {
      {nvmlClocksEventReasonGpuIdle, "idle"},
      {nvmlClocksEventReasonApplicationsClocksSetting, "application clocks"},
      {nvmlClocksEventReasonSwPowerCap, "power cap"},
      {nvmlClocksThrottleReasonHwSlowdown, "hardware slowdown"},
      {nvmlClocksEventReasonSyncBoost, "sync boost"},
      {nvmlClocksEventReasonSwThermalSlowdown, "thermal"},
      {nvmlClocksThrottleReasonHwThermalSlowdown, "hardware thermal"},
      {nvmlClocksThrottleReasonHwPowerBrakeSlowdown, "power brake"},
      {nvmlClocksEventReasonDisplayClockSetting, "display clock"},
  };
  std::string text;
  for (const Name& n : kNames) {
    if ((reasons & n.bit) != 0) text += (text.empty() ? "" : ", ") + std::string(n.text);
  }
  return text.empty() ? "none" : text;
}

}  // namespace llmserve::gpu_testing

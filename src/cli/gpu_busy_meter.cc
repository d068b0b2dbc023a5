// GpuBusyMeter through CUPTI's activity API: kernel records arrive in buffers CUPTI asks for and hands back; their
// [start, end) intervals are collected and merged when the window closes. Without CUPTI the meter reports why.
#include "cli/gpu_busy_meter.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#ifdef LLMSERVE_WITH_CUPTI
#include <cupti.h>
#endif

namespace llmserve::cli {

double GpuBusyMeter::busy_fraction(std::vector<std::pair<uint64_t, uint64_t>> intervals, uint64_t from, uint64_t to) {
  if (to <= from) return 0.0;
  std::sort(intervals.begin(), intervals.end());
  uint64_t busy = 0, covered_to = from;
  for (auto [s, e] : intervals) {
    s = std::max(s, covered_to);
    e = std::min(e, to);
    if (e > s) {
      busy += e - s;
      covered_to = e;
    }
  }
  return static_cast<double>(busy) / static_cast<double>(to - from);
}

std::vector<GpuBusyMeter::KernelTime> GpuBusyMeter::group_by_name(std::vector<KernelRecord> records) {
  std::sort(records.begin(), records.end(),
            [](const KernelRecord& a, const KernelRecord& b) { return a.start < b.start; });
  std::map<std::string, KernelTime> by_name;
  uint64_t covered_to = 0;
  for (const KernelRecord& r : records) {
    KernelTime& t = by_name[r.name];
    t.name = r.name;
    ++t.count;
    t.total_us += static_cast<double>(r.end - r.start) / 1e3;
    if (r.end > covered_to) t.wall_us += static_cast<double>(r.end - std::max(r.start, covered_to)) / 1e3;
    covered_to = std::max(covered_to, r.end);
  }
  std::vector<KernelTime> out;
  for (auto& [name, t] : by_name) out.push_back(std::move(t));
  std::sort(out.begin(), out.end(), [](const KernelTime& a, const KernelTime& b) { return a.wall_us > b.wall_us; });
  return out;
}

std::pair<int64_t, double> GpuBusyMeter::idle_stretches(std::vector<std::pair<uint64_t, uint64_t>> intervals,
                                                        uint64_t from, uint64_t to) {
  std::sort(intervals.begin(), intervals.end());
  int64_t gaps = 0;
  uint64_t idle = 0, covered_to = from;
  for (auto [s, e] : intervals) {
    if (s >= to) break;
    if (s > covered_to) {
      ++gaps;
      idle += s - covered_to;
    }
    covered_to = std::max(covered_to, e);
  }
  if (to > covered_to) {
    ++gaps;
    idle += to - covered_to;
  }
  return {gaps, static_cast<double>(idle) / 1e3};
}

std::vector<GpuBusyMeter::KernelTime> GpuBusyMeter::idle_before_kernels(std::vector<KernelRecord> records,
                                                                        uint64_t from, uint64_t to) {
  std::sort(records.begin(), records.end(),
            [](const KernelRecord& a, const KernelRecord& b) { return a.start < b.start; });
  std::map<std::string, KernelTime> by_name;
  uint64_t covered_to = from;
  bool any = false;  // the stretch before the window's first kernel is host time, not a gap between kernels
  for (const KernelRecord& r : records) {
    if (r.start >= to) break;
    if (r.end <= from) continue;
    if (any && r.start > covered_to) {
      KernelTime& t = by_name[r.name];
      t.name = r.name;
      ++t.count;
      t.total_us += static_cast<double>(r.start - covered_to) / 1e3;
    }
    any = true;
    covered_to = std::max(covered_to, r.end);
  }
  std::vector<KernelTime> out;
  for (auto& [name, t] : by_name) out.push_back(std::move(t));
  std::sort(out.begin(), out.end(), [](const KernelTime& a, const KernelTime& b) { return a.total_us > b.total_us; });
  return out;
}

std::vector<GpuBusyMeter::KernelTime> GpuBusyMeter::slow_calls(const std::vector<KernelRecord>& calls, uint64_t from,
                                                               uint64_t to) {
  std::vector<KernelRecord> slow;
  for (const KernelRecord& c : calls) {
    if (c.start >= from && c.start < to && c.end - c.start >= kSlowHostCallNs) slow.push_back(c);
  }
  return group_by_name(slow);
}

std::pair<double, double> GpuBusyMeter::edge_idle(const std::vector<std::pair<uint64_t, uint64_t>>& intervals,
                                                  uint64_t from, uint64_t to) {
  uint64_t first = to, last = from;
  for (auto [s, e] : intervals) {
    if (s >= to || e <= from) continue;
    first = std::min(first, std::max(s, from));
    last = std::max(last, std::min(e, to));
  }
  return {static_cast<double>(first - from) / 1e3, static_cast<double>(to - std::max(last, first)) / 1e3};
}

#ifdef LLMSERVE_WITH_CUPTI
namespace {

constexpr size_t kBufferBytes = 8 << 20;
std::mutex g_mutex;
std::vector<GpuBusyMeter::KernelRecord> g_kernels;  // filled by CUPTI's buffer-completed callback
std::vector<GpuBusyMeter::KernelRecord> g_copies;
std::vector<GpuBusyMeter::KernelRecord> g_api_calls;

constexpr CUpti_ActivityKind kRecordedKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                                 CUPTI_ACTIVITY_KIND_MEMSET};
constexpr CUpti_ActivityKind kApiKinds[] = {CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER};

std::string copy_name(uint8_t copy_kind) {
  switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "[memcpy HtoD]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "[memcpy DtoH]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "[memcpy DtoD]";
    default: return "[memcpy other]";
  }
}

std::string api_name(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  const char* name = nullptr;
  if (cuptiGetCallbackName(domain, cbid, &name) != CUPTI_SUCCESS || name == nullptr) return "?";
  return name;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_num_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_num_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_size) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid_size, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      g_kernels.push_back({k->name != nullptr ? k->name : "?", k->start, k->end});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      g_copies.push_back({copy_name(m->copyKind), m->start, m->end});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      g_copies.push_back({"[memset]", m->start, m->end});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_RUNTIME || record->kind == CUPTI_ACTIVITY_KIND_DRIVER) {
      const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
      if (a->end - a->start < GpuBusyMeter::kSlowHostCallNs) continue;
      const CUpti_CallbackDomain domain =
          record->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
      g_api_calls.push_back({api_name(domain, a->cbid), a->start, a->end});
    }
  }
  std::free(buffer);
}

}  // namespace

bool GpuBusyMeter::start(std::string* why_not, bool api_calls) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_kernels.clear();
    g_copies.clear();
    g_api_calls.clear();
  }
  CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  for (CUpti_ActivityKind kind : kRecordedKinds) {
    if (r == CUPTI_SUCCESS) r = cuptiActivityEnable(kind);
  }
  for (CUpti_ActivityKind kind : kApiKinds) {
    if (r == CUPTI_SUCCESS && api_calls) r = cuptiActivityEnable(kind);
  }
  api_calls_ = api_calls;
  if (r == CUPTI_SUCCESS) r = cuptiGetTimestamp(&from_);
  if (r != CUPTI_SUCCESS) {
    const char* text = nullptr;
    cuptiGetResultString(r, &text);
    *why_not = std::string("CUPTI: ") + (text != nullptr ? text : "error");
    return false;
  }
  running_ = true;
  return true;
}

std::optional<double> GpuBusyMeter::stop() {
  if (!running_) return std::nullopt;
  running_ = false;
  uint64_t to = 0;
  cuptiGetTimestamp(&to);
  for (CUpti_ActivityKind kind : kRecordedKinds) cuptiActivityDisable(kind);
  if (api_calls_) {
    for (CUpti_ActivityKind kind : kApiKinds) cuptiActivityDisable(kind);
  }
  cuptiActivityFlushAll(1);  // forced: hands back every buffer, complete or not
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::pair<uint64_t, uint64_t>> intervals;
  intervals.reserve(g_kernels.size());
  for (const KernelRecord& k : g_kernels) intervals.emplace_back(k.start, k.end);
  kernel_times_ = group_by_name(g_kernels);
  std::tie(idle_gaps_, idle_us_) = idle_stretches(intervals, from_, to);
  std::tie(leading_idle_us_, trailing_idle_us_) = edge_idle(intervals, from_, to);
  std::vector<KernelRecord> kernels_and_copies = g_kernels;
  kernels_and_copies.insert(kernels_and_copies.end(), g_copies.begin(), g_copies.end());
  idle_before_ = idle_before_kernels(std::move(kernels_and_copies), from_, to);
  copy_times_ = group_by_name(g_copies);
  slow_host_calls_ = slow_calls(g_api_calls, from_, to);
  return busy_fraction(std::move(intervals), from_, to);
}

GpuBusyMeter::~GpuBusyMeter() {
  if (running_) stop();
}
#else
bool GpuBusyMeter::start(std::string* why_not, bool /*api_calls*/) {
  *why_not = "this build has no CUPTI";
  return false;
}
std::optional<double> GpuBusyMeter::stop() { return std::nullopt; }
GpuBusyMeter::~GpuBusyMeter() = default;
#endif

}  // namespace llmserve::cli

// Event: a CUDA event (timing disabled) that marks a point on a stream so the host can wait for the work queued
// before it — e.g. "the step's input copy has read the pinned host buffer". A plain C++ header: no CUDA includes.
// Invariant: on the CPU (a default-constructed Event, a CPU device, or a build without CUDA) every call is a no-op,
// because CPU work is done when the call that queued it returns; callers need no #ifdef.
#pragma once

#include "core/tensor.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*: named here so this header needs no CUDA include

namespace llmserve {

class Event {
 public:
  Event() = default;  // a no-op event
  // A CUDA event on the current CUDA device when `device` is a CUDA device; a no-op event for the CPU. Aborts if
  // the event cannot be created.
  explicit Event(Device device);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Marks the work queued so far on `stream` (default: this thread's current stream, core/cuda_stream.h).
  void record();
  void record(CUstream_st* stream);
  // Blocks the host until the recorded work is done (at once when nothing was recorded).
  void synchronize() const;
  // True when the recorded work is done (or nothing was recorded).
  bool query() const;
  // False for a no-op event.
  bool is_device() const { return event_ != nullptr; }

 private:
  void* event_ = nullptr;  // cudaEvent_t
};

// Blocks the host until the work queued on this thread's current stream is done; a no-op for a CPU device.
void synchronize_current_stream(Device device);

}  // namespace llmserve

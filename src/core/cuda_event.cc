// Event and synchronize_current_stream (see cuda_event.h); every function is a no-op without CUDA.
#include "core/cuda_event.h"

#include <utility>

#ifdef LLMSERVE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda_allocator.h"
#include "core/cuda_stream.h"
#endif

namespace llmserve {

Event::Event(Device device) {
#ifdef LLMSERVE_WITH_CUDA
  if (device.is_cpu()) return;
  cudaEvent_t event = nullptr;
  cuda::check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  event_ = event;
#else
  (void)device;
#endif
}

Event::~Event() {
#ifdef LLMSERVE_WITH_CUDA
  if (event_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
#endif
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    Event dying(std::move(*this));  // releases our event at the end of this scope
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::record() {
#ifdef LLMSERVE_WITH_CUDA
  if (event_ != nullptr) record(cuda::current_stream());
#endif
}

void Event::record(CUstream_st* stream) {
#ifdef LLMSERVE_WITH_CUDA
  if (event_ != nullptr) cuda::check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(event_), stream), "cudaEventRecord");
#else
  (void)stream;
#endif
}

void Event::synchronize() const {
#ifdef LLMSERVE_WITH_CUDA
  if (event_ != nullptr) {
    cuda::check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)), "cudaEventSynchronize");
  }
#endif
}

bool Event::query() const {
#ifdef LLMSERVE_WITH_CUDA
  if (event_ == nullptr) return true;
  const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (err == cudaErrorNotReady) return false;
  cuda::check_cuda(err, "cudaEventQuery");
#endif
  return true;
}

void synchronize_current_stream(Device device) {
#ifdef LLMSERVE_WITH_CUDA
  if (!device.is_cpu()) {
    cuda::check_cuda(cudaStreamSynchronize(cuda::current_stream()), "cudaStreamSynchronize");
  }
#else
  (void)device;
#endif
}

}  // namespace llmserve

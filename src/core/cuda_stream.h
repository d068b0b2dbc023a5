// The CUDA stream every kernel launched by this thread runs on. One known stream per thread is what graph
// capture and the async scheduler's side streams need; kernels never use the legacy default stream directly.
// Only in CUDA builds.
#pragma once

#ifdef LLMSERVE_WITH_CUDA
#include <cuda_runtime_api.h>

namespace llmserve::cuda {

// This thread's stream (initially the per-thread default stream, cudaStreamPerThread).
cudaStream_t current_stream();
void set_current_stream(cudaStream_t stream);

// Makes `stream` current for a scope, then restores the previous one.
class StreamGuard {
 public:
  explicit StreamGuard(cudaStream_t stream) : previous_(current_stream()) { set_current_stream(stream); }
  ~StreamGuard() { set_current_stream(previous_); }
  StreamGuard(const StreamGuard &) = delete;
  StreamGuard &operator=(const StreamGuard &) = delete;

 private:
  cudaStream_t previous_;
};

}  // namespace llmserve::cuda
#endif

// CudaGraphRunner: vLLM's CUDAGraphWrapper for FULL graphs — captures a forward callable once per batch size and
// replays it; the model never knows it is captured. Invariant: a graph reads and writes only memory that outlives
// it at fixed addresses (the runner's persistent inputs, the activation arena, the KV cache, the logits): nothing
// in the captured forward allocates, so all graphs share that one pool and a replay allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>

#include "core/tensor.h"

namespace llmserve {

class CudaGraphRunner {
 public:
  // A graph runner on CUDA device `device` (aborts in a build without CUDA: callers only make one on CUDA).
  explicit CudaGraphRunner(Device device);
  ~CudaGraphRunner();
  CudaGraphRunner(const CudaGraphRunner &) = delete;
  CudaGraphRunner &operator=(const CudaGraphRunner &) = delete;

  // Runs `forward` once eagerly (warm-up: cuBLASLt plans, kernel attributes), then captures it on a private
  // non-default stream as the graph of `size`. `forward` launches on cuda::current_stream() (set to the capture
  // stream meanwhile); it must not synchronise or allocate (a capture error aborts, naming the size).
  void capture(int64_t size, const std::function<void()> &forward);
  bool has(int64_t size) const { return graphs_.count(size) > 0; }
  // Launches the graph of `size` on this thread's current stream.
  void replay(int64_t size);
  int64_t num_graphs() const { return static_cast<int64_t>(graphs_.size()); }
  // Device memory the instantiated graphs took (free memory before - after their captures), in all and for the
  // graph of one size (the first capture also holds its warm-up's one-time allocations).
  size_t graph_bytes() const { return graph_bytes_; }
  size_t graph_bytes(int64_t size) const {
    auto it = bytes_by_size_.find(size);
    return it == bytes_by_size_.end() ? 0 : it->second;
  }
  double capture_seconds() const { return capture_seconds_; }

 private:
  Device device_;
  void *stream_ = nullptr;            // cudaStream_t: the capture stream
  std::map<int64_t, void *> graphs_;  // size -> cudaGraphExec_t
  size_t graph_bytes_ = 0;
  std::map<int64_t, size_t> bytes_by_size_;
  double capture_seconds_ = 0;
};

}  // namespace llmserve

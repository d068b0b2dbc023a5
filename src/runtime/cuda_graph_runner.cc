// Capture and replay of FULL CUDA graphs (see cuda_graph_runner.h).
#include "runtime/cuda_graph_runner.h"

#include <chrono>

#include "core/logging.h"

#ifdef LLMSERVE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda_allocator.h"
#include "core/cuda_stream.h"
#endif

namespace llmserve {

#ifdef LLMSERVE_WITH_CUDA
namespace {
size_t free_device_bytes() {
  size_t free_bytes = 0, total = 0;
  cuda::check_cuda(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
  return free_bytes;
}
}  // namespace

CudaGraphRunner::CudaGraphRunner(Device device) : device_(device) {
  CHECK(!device.is_cpu()) << "CUDA graphs need a CUDA device";
  cudaStream_t stream = nullptr;
  // Capture cannot start on the legacy default stream, and a non-blocking stream keeps the capture from
  // serialising with the per-thread default stream's other work.
  cuda::check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  stream_ = stream;
}

CudaGraphRunner::~CudaGraphRunner() {
  for (auto &[size, exec] : graphs_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void CudaGraphRunner::capture(int64_t size, const std::function<void()> &forward) {
  CHECK(!has(size)) << "CUDA graph of size " << size << " captured twice";
  const auto start = std::chrono::steady_clock::now();
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  // The inputs were copied on the caller's stream: the capture stream starts after them.
  cuda::check_cuda(cudaStreamSynchronize(cuda::current_stream()), "cudaStreamSynchronize");
  const size_t free_before = free_device_bytes();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  {
    cuda::StreamGuard guard(stream);
    forward();  // warm-up, eagerly, on the capture stream
    cuda::check_cuda(cudaStreamSynchronize(stream), "warm-up before CUDA graph capture");
    // Thread-local mode: another thread's unsafe call (e.g. a cudaMalloc by the sampler of a test's other engine)
    // does not invalidate this capture; a cudaMalloc on this thread would.
    cuda::check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    forward();
    const cudaError_t end = cudaStreamEndCapture(stream, &graph);
    CHECK(end == cudaSuccess) << "CUDA graph capture of batch size " << size << ": " << cudaGetErrorString(end);
  }
  cuda::check_cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  cuda::check_cuda(cudaGraphDestroy(graph), "cudaGraphDestroy");
  cuda::check_cuda(cudaGraphUpload(exec, stream), "cudaGraphUpload");
  cuda::check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const size_t free_after = free_device_bytes();
  const size_t bytes = free_before > free_after ? free_before - free_after : 0;
  graph_bytes_ += bytes;
  bytes_by_size_[size] = bytes;
  graphs_[size] = exec;
  capture_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void CudaGraphRunner::replay(int64_t size) {
  auto it = graphs_.find(size);
  CHECK(it != graphs_.end()) << "no CUDA graph of batch size " << size;
  cuda::check_cuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(it->second), cuda::current_stream()),
                   "cudaGraphLaunch");
}
#else
CudaGraphRunner::CudaGraphRunner(Device device) : device_(device) {
  LOG(FATAL) << "CUDA graphs: this build has no CUDA support";
}
CudaGraphRunner::~CudaGraphRunner() = default;
void CudaGraphRunner::capture(int64_t, const std::function<void()> &) { LOG(FATAL) << "no CUDA"; }
void CudaGraphRunner::replay(int64_t) { LOG(FATAL) << "no CUDA"; }
#endif

}  // namespace llmserve

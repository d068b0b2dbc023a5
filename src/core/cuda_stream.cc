// This thread's current CUDA stream (see cuda_stream.h).
#include "core/cuda_stream.h"

#ifdef LLMSERVE_WITH_CUDA
namespace llmserve::cuda {
namespace {
thread_local cudaStream_t g_current_stream = cudaStreamPerThread;
}  // namespace

cudaStream_t current_stream() { return g_current_stream; }
void set_current_stream(cudaStream_t stream) { g_current_stream = stream; }

}  // namespace llmserve::cuda
#endif

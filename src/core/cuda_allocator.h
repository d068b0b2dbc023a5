// The CUDA caching allocator behind allocate_bytes(Device::cuda): freed blocks go to per-(device, stream) free
// lists and are reused by later allocations on the same stream, so after warm-up a model step never calls
// cudaMalloc. Invariant: a block is only ever handed out again on the stream it was last used on (stream order
// makes the reuse safe without a host sync); blocks are never split, so a cached block serves sizes within 25%.
// Only in CUDA builds.
#pragma once

#ifdef LLMSERVE_WITH_CUDA
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

namespace llmserve::cuda {

struct AllocatorStats {
  size_t in_use = 0;         // bytes handed out and not yet freed (rounded sizes)
  size_t peak_in_use = 0;    // high-water mark of in_use since the last reset_peak()
  size_t reserved = 0;       // bytes obtained from cudaMalloc and not returned (in use + cached)
  size_t num_mallocs = 0;    // cudaMalloc calls so far (a step after warm-up must not add any)
  size_t num_cache_hits = 0;  // allocations served from a free list
};

// Allocates `bytes` on `device` for use on the calling thread's current stream; aborts when the device is out of
// memory even after the cache was returned to the driver. The deleter puts the block back in its free list.
std::shared_ptr<void> allocate_device(int device, size_t bytes);

AllocatorStats allocator_stats(int device = 0);
// Free device memory (cudaMemGetInfo) just before this process's first allocation on `device`; 0 before any. The
// KV-cache plan counts what this process took since then, so other processes on the GPU do not shrink its budget
// (vLLM's --gpu-memory-utilization is per instance).
size_t free_bytes_before_first_allocation(int device = 0);
void reset_peak(int device = 0);
// Synchronises the device and returns every cached (free) block to the driver.
void empty_cache(int device = 0);

// Page-locked host memory (cudaHostAlloc), for staging host<->device copies that overlap with host work; plain
// 64-byte-aligned memory when no device can page-lock it (a CUDA build on a machine without a GPU).
std::shared_ptr<void> allocate_pinned(size_t bytes);

// CHECKs a CUDA runtime call; `what` names it in the message.
void check_cuda(cudaError_t err, const char* what);

}  // namespace llmserve::cuda
#endif

// The CUDA caching allocator (see cuda_allocator.h): size-rounded blocks in free lists keyed by device and
// stream, reused in stream order; cudaMalloc only on a miss, with one retry after emptying the cache.
#include "core/cuda_allocator.h"

#ifdef LLMSERVE_WITH_CUDA
#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "core/cuda_stream.h"
#include "core/logging.h"

namespace llmserve::cuda {
namespace {

constexpr size_t kSmallRound = 512;
constexpr size_t kLargeThreshold = size_t{1} << 20;
constexpr size_t kLargeRound = size_t{2} << 20;

size_t round_size(size_t bytes) {
  if (bytes == 0) bytes = 1;
  const size_t r = bytes < kLargeThreshold ? kSmallRound : kLargeRound;
  return (bytes + r - 1) / r * r;
}

// cudaStreamPerThread names a different stream on every thread, so blocks used on it are keyed by thread too.
struct PoolKey {
  int device;
  cudaStream_t stream;
  std::thread::id thread;
  bool operator<(const PoolKey& o) const {
    return std::tie(device, stream, thread) < std::tie(o.device, o.stream, o.thread);
  }
};

PoolKey current_key(int device) {
  cudaStream_t s = current_stream();
  return {device, s, s == cudaStreamPerThread ? std::this_thread::get_id() : std::thread::id()};
}

class CachingAllocator {
 public:
  std::shared_ptr<void> allocate(int device, size_t bytes) {
    const size_t size = round_size(bytes);
    const PoolKey key = current_key(device);
    std::unique_lock<std::mutex> lock(mu_);
    size_t block = size;  // a cached block may be up to 25% larger; it keeps its own size
    void* p = take_cached(key, &block);
    if (p == nullptr) p = malloc_or_retry(device, size, lock);
    const size_t held = block;
    AllocatorStats& st = stats_[device];
    st.in_use += held;
    st.peak_in_use = std::max(st.peak_in_use, st.in_use);
    return std::shared_ptr<void>(p, [this, key, held](void* q) { release(key, q, held); });
  }

  AllocatorStats stats(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_[device];
  }

  void reset_peak(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_[device].peak_in_use = stats_[device].in_use;
  }

  void empty_cache(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    free_cached(device);
  }

  size_t free_before_first(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_before_first_.find(device);
    return it == free_before_first_.end() ? 0 : it->second;
  }

 private:
  // *size in: the rounded request; out: the size of the block returned (unchanged on a miss).
  void* take_cached(const PoolKey& key, size_t* size) {
    auto pool = pools_.find(key);
    if (pool == pools_.end()) return nullptr;
    auto it = pool->second.lower_bound(*size);
    if (it == pool->second.end() || it->first > *size + *size / 4) return nullptr;
    void* p = it->second;
    *size = it->first;
    pool->second.erase(it);
    ++stats_[key.device].num_cache_hits;
    return p;
  }

  void* malloc_or_retry(int device, size_t size, std::unique_lock<std::mutex>& lock) {
    (void)lock;
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    if (free_before_first_.count(device) == 0) {
      size_t free_bytes = 0, total_bytes = 0;
      check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
      free_before_first_[device] = free_bytes;
    }
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the sticky-free error state
      free_cached(device);
      err = cudaMalloc(&p, size);
    }
    AllocatorStats& st = stats_[device];
    if (err != cudaSuccess) {
      LOG(FATAL) << "cudaMalloc(" << size << " bytes) on cuda:" << device << ": " << cudaGetErrorString(err)
                 << " (allocator: " << st.in_use << " bytes in use, " << st.reserved << " reserved)";
    }
    st.reserved += size;
    ++st.num_mallocs;
    return p;
  }

  void release(const PoolKey& key, void* p, size_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    pools_[key].emplace(size, p);
    stats_[key.device].in_use -= size;
  }

  // Caller holds mu_. Every stream may still use its cached blocks: synchronise the device first.
  void free_cached(int device) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    for (auto& [key, pool] : pools_) {
      if (key.device != device) continue;
      for (auto& [size, p] : pool) {
        check_cuda(cudaFree(p), "cudaFree");
        stats_[device].reserved -= size;
      }
      pool.clear();
    }
  }

  std::mutex mu_;
  std::map<PoolKey, std::multimap<size_t, void*>> pools_;
  std::map<int, AllocatorStats> stats_;
  std::map<int, size_t> free_before_first_;  // device -> free bytes before its first cudaMalloc
};

// Never destroyed: tensors in static storage may be freed after every other static destructor ran.
CachingAllocator& allocator() {
  static CachingAllocator* a = new CachingAllocator();
  return *a;
}

}  // namespace

void check_cuda(cudaError_t err, const char* what) {
  CHECK(err == cudaSuccess) << what << ": " << cudaGetErrorString(err);
}

std::shared_ptr<void> allocate_device(int device, size_t bytes) { return allocator().allocate(device, bytes); }
AllocatorStats allocator_stats(int device) { return allocator().stats(device); }
void reset_peak(int device) { allocator().reset_peak(device); }
void empty_cache(int device) { allocator().empty_cache(device); }
size_t free_bytes_before_first_allocation(int device) { return allocator().free_before_first(device); }

std::shared_ptr<void> allocate_pinned(size_t bytes) {
  void* p = nullptr;
  if (cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocDefault) == cudaSuccess) {
    return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
  }
  // No usable device (a CUDA build on a machine without a GPU): page-locking is only an optimisation.
  cudaGetLastError();
  const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  p = std::aligned_alloc(64, rounded);
  CHECK(p != nullptr) << "out of host memory allocating " << bytes << " bytes";
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

}  // namespace llmserve::cuda
#endif

// Row groups: the blocks that work on one row of a [rows, n] kernel together, on the device (OneBlock, RowCluster,
// merge_bins, group_reduce) and at launch (launch_rows picks a cluster of blocks per row while rows are few).
// Invariant: every block of a group reaches every group barrier (row-level branches are uniform per row).
#pragma once

#include <cooperative_groups.h>

#include <atomic>

#include "kernels/cuda/cuda_common.cuh"

namespace llmserve::cuda {

// The blocks that work on one row together. OneBlock: the block alone. RowCluster: a thread-block cluster (Hopper)
// whose blocks each take a slice of the row and combine histograms and reductions through distributed shared
// memory; code compiled below sm_90, where clusters do not exist, treats it as one block (the launcher never
// starts a cluster there). One type in every compilation pass, so the kernels' names match between host and device.
// sync() is a barrier over every thread of the group (and a block barrier); at(p, r) is rank r's copy of the
// shared variable p.
struct OneBlock {
  __device__ int rank() const { return 0; }
  __device__ int size() const { return 1; }
  __device__ void sync() const { __syncthreads(); }
  template <typename T>
  __device__ T* at(T* p, int) const {
    return p;
  }
};
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
struct RowCluster : OneBlock {};
#else
struct RowCluster {
  __device__ int rank() const { return static_cast<int>(cooperative_groups::this_cluster().block_rank()); }
  __device__ int size() const { return static_cast<int>(cooperative_groups::this_cluster().num_blocks()); }
  __device__ void sync() const { cooperative_groups::this_cluster().sync(); }
  template <typename T>
  __device__ T* at(T* p, int r) const {
    return cooperative_groups::this_cluster().map_shared_rank(p, r);
  }
};
#endif

// This block's ids [lo, hi) of a row of n ids: the group's slices in rank order, each a multiple of 4 ids long
// (16-byte loads of a slice stay aligned).
template <typename G>
__device__ __forceinline__ void row_slice(const G& g, int64_t n, int64_t* lo, int64_t* hi) {
  const int64_t slice = (n + 4 * g.size() - 1) / (4 * g.size()) * 4;
  *lo = min(n, g.rank() * slice);
  *hi = min(n, *lo + slice);
}

// merged[i] = the sum over the group's ranks of their local[i], i < n. Every thread of the group calls it once
// each rank's local bins are complete; on return merged is visible to the block and every rank is done reading
// the others' local bins (so they may be cleared).
template <typename G, typename T>
__device__ void merge_bins(const G& g, T* local, T* merged, int n) {
  g.sync();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    T sum = 0;
    for (int r = 0; r < g.size(); ++r) sum += g.at(local, r)[i];
    merged[i] = sum;
  }
  g.sync();
}

// op over the group of a value every thread of each block already holds (a block reduction's result); `slot` is
// one shared variable of the caller's. Every thread gets the result.
template <typename G, typename T, typename Op>
__device__ T group_reduce(const G& g, T block_value, T* slot, Op op) {
  if (g.size() == 1) return block_value;
  if (threadIdx.x == 0) *slot = block_value;
  g.sync();
  T r = *g.at(slot, 0);
  for (int i = 1; i < g.size(); ++i) r = op(r, *g.at(slot, i));
  g.sync();  // the slots may be rewritten
  return r;
}

inline constexpr int kMaxRowCluster = 8;  // the portable cluster size

// Blocks per row: a row's passes are latency-bound on one SM, so with few rows a cluster of blocks splits each row
// (Hopper; one block per row below compute capability 9 or once the rows fill the SMs).
inline int blocks_per_row(int64_t rows) {
  static const int sms = [] {
    int dev = 0, major = 0, count = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 0;
    return major >= 9 ? count : 0;
  }();
  int blocks = 1;
  while (blocks < kMaxRowCluster && rows * blocks * 2 <= sms) blocks *= 2;
  return blocks;
}

// kernel<RowCluster> with a cluster of blocks_per_row(rows) blocks of `threads` per row, or kernel<OneBlock> with
// one block per row. A cluster launch the device refuses (e.g. an SM partition too small for a cluster) falls back
// to one block per row, for this and every later launch of the kernel.
template <typename... Params, typename... Args>
void launch_rows(void (*one)(Params...), void (*cluster)(Params...), int64_t rows, int threads, const char* name,
                 Args... args) {
  static std::atomic<bool> clusters_refused{false};
  const int blocks = clusters_refused ? 1 : blocks_per_row(rows);
  if (blocks > 1) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(rows * blocks));
    config.blockDim = dim3(static_cast<unsigned>(threads));
    config.stream = stream();
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = static_cast<unsigned>(blocks);
    attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
    config.attrs = &attr;
    config.numAttrs = 1;
    const cudaError_t err = cudaLaunchKernelEx(&config, cluster, args...);
    if (err == cudaSuccess) {
      check_launch(name);
      return;
    }
    (void)cudaGetLastError();  // a refused launch configuration is not sticky
    clusters_refused = true;
    LOG(WARNING) << name << ": cluster launch refused (" << cudaGetErrorString(err)
                 << "); one block per row from now on";
  }
  one<<<static_cast<unsigned>(rows), static_cast<unsigned>(threads), 0, stream()>>>(args...);
  check_launch(name);
}

}  // namespace llmserve::cuda

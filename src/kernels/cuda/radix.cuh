// Block-wide radix selection over 32-bit order-preserving keys, for the top-k and top-p kernels: 8-bit digit
// histograms in shared memory, fed by warp-aggregated atomics (lanes with the same digit combine first, so a row
// whose values share an exponent does not serialise on one counter).
#pragma once

#include "kernels/cuda/cuda_common.cuh"

namespace llmserve::cuda {

// count[digit] += lanes of this warp with that digit; mass[digit] += their w (when mass != nullptr). Every lane of
// the warp must call it (inactive lanes pass active = false).
__device__ __forceinline__ void warp_hist_add(uint32_t* count, double* mass, bool active, uint32_t digit, double w) {
  const unsigned act = __ballot_sync(0xffffffffu, active);
  if (!active) return;
  const unsigned group = __match_any_sync(act, digit);
  const bool leader = static_cast<int>(threadIdx.x % 32) == __ffs(group) - 1;
  if (mass != nullptr) {
    double sum = 0;
    for (unsigned rem = act; rem != 0; rem &= rem - 1) {
      const int src = __ffs(rem) - 1;
      const double v = __shfl_sync(act, w, src);
      if ((group >> src) & 1u) sum += v;
    }
    if (leader) atomicAdd(&mass[digit], sum);
  }
  if (leader) atomicAdd(&count[digit], static_cast<uint32_t>(__popc(group)));
}

struct RadixSelectState {
  uint32_t count[256];
  uint32_t prefix;
  uint32_t remaining;
  bool found;
};

// The k-th largest key (repeats counted, k >= 1) among the elements j in [0, n) for which key_of(j, &key) is
// true. On success *kth_key is that key and *needed how many of the elements equal to it are among the k largest
// (so k - *needed keys are strictly larger); false when fewer than k elements qualify. Four passes over the row;
// every thread of the block must call it.
template <typename KeyOf>
__device__ bool radix_select(int64_t n, uint32_t k, KeyOf key_of, RadixSelectState& s, uint32_t* kth_key,
                             uint32_t* needed) {
  uint32_t prefix = 0, mask = 0, remaining = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) s.count[i] = 0;
    __syncthreads();
    for (int64_t base = 0; base < n; base += blockDim.x) {  // a uniform trip count keeps warps converged
      const int64_t j = base + threadIdx.x;
      uint32_t key = 0;
      const bool valid = j < n && key_of(j, &key) && (key & mask) == prefix;
      warp_hist_add(s.count, nullptr, valid, (key >> shift) & 255u, 0.0);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t above = 0;
      int b = 255;
      for (; b >= 0; --b) {
        if (above + s.count[b] >= remaining) break;
        above += s.count[b];
      }
      s.found = b >= 0;
      if (b >= 0) {
        s.prefix = prefix | (static_cast<uint32_t>(b) << shift);
        s.remaining = remaining - above;
      }
    }
    __syncthreads();
    if (!s.found) return false;
    prefix = s.prefix;
    remaining = s.remaining;
    mask |= 255u << shift;
  }
  *kth_key = prefix;
  *needed = remaining;
  return true;
}

}  // namespace llmserve::cuda

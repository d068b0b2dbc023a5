// Radix selection over 32-bit order-preserving keys, for the top-k and top-p kernels: 8-bit digit histograms in
// shared memory, fed by warp-aggregated atomics (lanes with the same digit combine first, so a row whose values
// share an exponent does not serialise on one counter), over one block or a cluster of blocks that split a row.
#pragma once

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/row_group.cuh"

namespace llmserve::cuda {

// Probability mass as 64-bit fixed point: w in [0, 1] times 2^45, so a whole row (up to kMaxMassVocab weights of
// at most 1) sums without overflow and exactly, in any order: the top-p cut cannot depend on the order in which
// atomics land (double sums could, at a boundary), and the adds are native 64-bit integer atomics.
constexpr double kMassScale = 35184372088832.0;  // 2^45
inline constexpr int64_t kMaxMassVocab = int64_t{1} << 19;
// w * 2^45 is exact in float (a power-of-two scale of w <= 1), so the float product truncates to the same integer
// as the double one without the f64 conversions.
__device__ __forceinline__ uint64_t mass_fixed(float w) {
  return static_cast<uint64_t>(w * static_cast<float>(kMassScale));
}

// count[digit] += lanes of this warp with that digit; mass[digit] += their w (fixed point, when mass != nullptr).
// Every lane of the warp must call it (inactive lanes pass active = false). The lanes sharing a digit are summed
// with one hardware reduction per 21-bit slice of w (w <= 2^45: the slice sums of <= 32 lanes fit 32 bits), and
// only their leader touches shared memory.
__device__ __forceinline__ void warp_hist_add(uint32_t* count, unsigned long long* mass, bool active, uint32_t digit,
                                              uint64_t w) {
  const unsigned act = __ballot_sync(0xffffffffu, active);
  if (!active) return;
  const unsigned group = __match_any_sync(act, digit);
  const bool leader = static_cast<int>(threadIdx.x % 32) == __ffs(group) - 1;
  if (mass != nullptr) {
    constexpr uint64_t kSlice = (uint64_t{1} << 21) - 1;
    const uint64_t lo = __reduce_add_sync(group, static_cast<uint32_t>(w & kSlice));
    const uint64_t mid = __reduce_add_sync(group, static_cast<uint32_t>((w >> 21) & kSlice));
    const uint64_t hi = __reduce_add_sync(group, static_cast<uint32_t>(w >> 42));
    if (leader) atomicAdd(&mass[digit], static_cast<unsigned long long>((hi << 42) + (mid << 21) + lo));
  }
  if (leader) atomicAdd(&count[digit], static_cast<uint32_t>(__popc(group)));
}

struct RadixSelectState {
  uint32_t count[256];   // this block's histogram
  uint32_t merged[256];  // the group's (merge_bins)
  uint32_t prefix;
  uint32_t remaining;
  bool found;
};

// Element loads per thread issued together before their histogram updates: one memory round trip per
// kRadixUnroll elements instead of one per element (a single row's pass is latency-bound).
constexpr int kRadixUnroll = 8;

// Warp 0 of a radix pass, lane L: the sum of its 8 bins (255 - 8L down to 248 - 8L) in *local, and the sum of
// every bin from 255 down to its last one (the lanes up to and including it) as the result.
template <typename T>
__device__ __forceinline__ T lane_bins_inclusive(const T* bins, T* local) {
  const int lane = threadIdx.x % 32;
  T mine = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) mine += bins[255 - 8 * lane - i];
  T inclusive = mine;
  for (int o = 1; o < 32; o <<= 1) {
    const T up = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += up;
  }
  *local = mine;
  return inclusive;
}

// Warp 0 of the block: the highest digit bin b with sum_{c > b} count[c] < remaining <= sum_{c >= b} count[c]
// (lane L scans bins 255 - 8L down to 248 - 8L after a prefix sum over the lanes above it). Sets s.found, and when
// found s.prefix |= b << shift and s.remaining = remaining - sum_{c > b} count[c].
__device__ __forceinline__ void radix_pick_bin(RadixSelectState& s, uint32_t prefix, uint32_t remaining, int shift) {
  const int lane = threadIdx.x;
  uint32_t local = 0;
  const uint32_t inclusive = lane_bins_inclusive(s.merged, &local);
  const uint32_t total = __shfl_sync(0xffffffffu, inclusive, 31);
  uint32_t above = inclusive - local;
  if (lane == 0) s.found = total >= remaining;
  if (above < remaining && remaining <= inclusive) {  // exactly one lane
    int b = 255 - 8 * lane;
    for (; above + s.merged[b] < remaining; --b) above += s.merged[b];
    s.prefix = prefix | (static_cast<uint32_t>(b) << shift);
    s.remaining = remaining - above;
  }
}

// The k-th largest key (repeats counted, k >= 1) among the elements j of the row (this block's slice [lo, hi) of
// it, the group's slices together) for which key_of(j, &key) is true. On success *kth_key is that key and *needed
// how many of the elements equal to it are among the k largest (so k - *needed keys are strictly larger); false
// when fewer than k elements qualify. Four passes over the row; every thread of the group must call it.
template <typename G, typename KeyOf>
__device__ bool radix_select(const G& g, int64_t lo, int64_t hi, uint32_t k, KeyOf key_of, RadixSelectState& s,
                             uint32_t* kth_key, uint32_t* needed) {
  uint32_t prefix = 0, mask = 0, remaining = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) s.count[i] = 0;
    __syncthreads();
    // A uniform trip count keeps warps converged for the warp-aggregated adds.
    for (int64_t base = lo; base < hi; base += static_cast<int64_t>(blockDim.x) * kRadixUnroll) {
      uint32_t keys[kRadixUnroll];
      bool valid[kRadixUnroll];
#pragma unroll
      for (int u = 0; u < kRadixUnroll; ++u) {
        const int64_t j = base + u * blockDim.x + threadIdx.x;
        keys[u] = 0;
        valid[u] = j < hi && key_of(j, &keys[u]);
      }
#pragma unroll
      for (int u = 0; u < kRadixUnroll; ++u) {
        const bool v = valid[u] && (keys[u] & mask) == prefix;
        warp_hist_add(s.count, nullptr, v, (keys[u] >> shift) & 255u, 0);
      }
    }
    merge_bins(g, s.count, s.merged, 256);
    if (threadIdx.x < 32) radix_pick_bin(s, prefix, remaining, shift);
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
template <typename KeyOf>
__device__ bool radix_select(int64_t n, uint32_t k, KeyOf key_of, RadixSelectState& s, uint32_t* kth_key,
                             uint32_t* needed) {
  return radix_select(OneBlock{}, 0, n, k, key_of, s, kth_key, needed);
}

}  // namespace llmserve::cuda

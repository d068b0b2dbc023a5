// Helpers shared by the CUDA kernels: f32/f16/bf16 loads and stores through float, block-wide reductions, the
// stream every launch uses (core/cuda_stream.h), dtype dispatch and the launch check.
// Arithmetic is always f32 (sampling sums in double); 16-bit values are rounded once, on store.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "core/cuda_stream.h"
#include "core/logging.h"
#include "core/tensor.h"

namespace llmserve::cuda {

__device__ __forceinline__ float load_f(const float* p) { return *p; }
__device__ __forceinline__ float load_f(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float load_f(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ void store_f(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_f(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store_f(__half* p, float v) { *p = __float2half_rn(v); }

// Eight consecutive elements through float (f32 math on 16-bit data): one 16-byte access for f16 / bf16, two for
// f32. The pointer must be 16-byte aligned (callers check before choosing a vectorised path).
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&f)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}
__device__ __forceinline__ void load8(const __half* p, float (&f)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __half22float2(h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}
__device__ __forceinline__ void load8(const float* p, float (&f)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
__device__ __forceinline__ void store8(__nv_bfloat16* p, const float (&f)[8]) {
  uint4 raw;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}
__device__ __forceinline__ void store8(__half* p, const float (&f)[8]) {
  uint4 raw;
  __half2* h = reinterpret_cast<__half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}
__device__ __forceinline__ void store8(float* p, const float (&f)[8]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
}
// Rounds f to T's precision and back (what a 16-bit store then load would give).
template <typename T>
__device__ __forceinline__ float round_to(float f) {
  T t;
  store_f(&t, f);
  return load_f(&t);
}
// silu(g) * u in f32, the one formula of every kernel applying silu_and_mul (the elementwise op, the MoE down GEMMs'
// input). The _rn intrinsics keep the compiler from contracting the sum or the product into an FMA with its
// neighbours, which it does differently in each kernel: every path gives the same bits.
__device__ __forceinline__ float silu_mul(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}
// Whether p is 16-byte aligned (the vectorised paths' precondition).
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
template <typename T>
__device__ __forceinline__ T block_sum_t(T v) {
  __shared__ T warp_sums[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  const int num_warps = blockDim.x / 32;
  T total = 0;
  for (int w = 0; w < num_warps; ++w) total += warp_sums[w];
  __syncthreads();  // warp_sums may be reused by a later call
  return total;
}
__device__ __forceinline__ float block_sum(float v) { return block_sum_t<float>(v); }

// Maximum of v over the block (same shape rules); every thread gets the result. NaN is ignored (fmaxf).
__device__ __forceinline__ float block_max(float v) {
  __shared__ float warp_max[32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  float m = warp_max[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) m = fmaxf(m, warp_max[w]);
  __syncthreads();
  return m;
}

// Maximum of an unsigned 64-bit key over the block; every thread gets the result.
__device__ __forceinline__ uint64_t block_max_u64(uint64_t v) {
  __shared__ uint64_t warp_max[32];
  for (int o = 16; o > 0; o >>= 1) {
    const uint64_t other = __shfl_xor_sync(0xffffffffu, v, o);
    v = other > v ? other : v;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  uint64_t m = warp_max[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) m = warp_max[w] > m ? warp_max[w] : m;
  __syncthreads();
  return m;
}

// Order-preserving map of a float onto uint32 (larger float -> larger key); -0 and +0 share a key. NaN must be
// handled by the caller.
__device__ __forceinline__ uint32_t float_key(float f) {
  uint32_t u = __float_as_uint(f);
  if (f == 0.f) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_float(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// Ranking key of (value, id) for the logit ops: larger key ranks first -- larger value, then lower id; NaN below
// every number (value key 1); key 0 means "empty".
__device__ __forceinline__ uint64_t rank_key(float v, int64_t id) {
  const uint32_t vk = isnan(v) ? 1u : float_key(v);  // finite and infinite keys are >= 0x007fffff
  return (static_cast<uint64_t>(vk) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}
__device__ __forceinline__ int32_t key_id(uint64_t key) {
  return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(key));
}

// ops::argmax over the ids [lo, hi) of one row x, as a ranking key the whole block agrees on (every thread gets it;
// keys of several slices combine by max): ties to the lowest id, NaN never chosen over a number, and among NaNs
// only the last id. argmax_key_id turns the row's key into the id (an all-NaN row gives the last id, as the CPU op).
__device__ __forceinline__ uint64_t block_argmax_key(const float* x, int64_t lo, int64_t hi) {
  auto key_of = [](float v, int64_t j) {
    return isnan(v) ? (uint64_t{1} << 32) | static_cast<uint32_t>(j) : rank_key(v, j);
  };
  uint64_t best = 0;
  int64_t j = threadIdx.x;
  const float* xs = x + lo;
  const int64_t n = hi - lo;
  if (n % 4 == 0 && reinterpret_cast<uintptr_t>(xs) % 16 == 0) {  // 16-byte loads, several in flight
    const float4* x4 = reinterpret_cast<const float4*>(xs);
#pragma unroll 4
    for (; j < n / 4; j += blockDim.x) {
      const float4 v = x4[j];
      const int64_t id = lo + 4 * j;
      const uint64_t a = key_of(v.x, id), b = key_of(v.y, id + 1), c = key_of(v.z, id + 2), d = key_of(v.w, id + 3);
      const uint64_t ab = a > b ? a : b, cd = c > d ? c : d, m = ab > cd ? ab : cd;
      best = m > best ? m : best;
    }
  } else {
#pragma unroll 8  // independent loads in flight
    for (; j < n; j += blockDim.x) {
      const uint64_t key = key_of(xs[j], lo + j);
      best = key > best ? key : best;
    }
  }
  return block_max_u64(best);
}
__device__ __forceinline__ int32_t argmax_key_id(uint64_t best) {
  return (best >> 32) == 1 ? static_cast<int32_t>(static_cast<uint32_t>(best)) : key_id(best);
}
__device__ __forceinline__ int32_t block_argmax(const float* x, int64_t vocab) {
  return argmax_key_id(block_argmax_key(x, 0, vocab));
}

// Exclusive prefix sum of v over the block in thread order (blockDim.x a multiple of 32); *total gets the sum.
template <typename T>
__device__ __forceinline__ T block_exclusive_scan(T v, T* total) {
  __shared__ T warp_totals[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, num_warps = blockDim.x / 32;
  T inclusive = v;
  for (int o = 1; o < 32; o <<= 1) {
    const T up = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += up;
  }
  T exclusive = __shfl_up_sync(0xffffffffu, inclusive, 1);
  if (lane == 0) exclusive = 0;
  if (lane == 31) warp_totals[warp] = inclusive;
  __syncthreads();
  __shared__ T block_total;
  if (warp == 0) {
    const T t = lane < num_warps ? warp_totals[lane] : T(0);
    T inc = t;
    for (int o = 1; o < 32; o <<= 1) {
      const T up = __shfl_up_sync(0xffffffffu, inc, o);
      if (lane >= o) inc += up;
    }
    T exc = __shfl_up_sync(0xffffffffu, inc, 1);
    if (lane == 0) exc = 0;
    const T tot = __shfl_sync(0xffffffffu, inc, 31);
    __syncwarp();
    warp_totals[lane] = exc;  // now: the sum of the warps before this one
    if (lane == 0) block_total = tot;
  }
  __syncthreads();
  const T before = exclusive + warp_totals[warp];
  *total = block_total;
  __syncthreads();
  return before;
}

// A caller bug that only device data reveals (an id outside the vocabulary, a position past the cache): the
// kernel traps, the context is lost and the next synchronising CUDA call fails -- the device's form of CHECK.
__device__ __forceinline__ void device_check(bool ok) {
  if (!ok) __trap();
}

// The stream every kernel launches on.
inline cudaStream_t stream() { return current_stream(); }

// Programmatic dependent launch (Hopper): a kernel launched by launch_pdl may be scheduled while the kernel before
// it in the stream is still running (from that kernel's pdl_trigger() on), so its blocks are resident when the
// data arrives instead of paying a launch gap -- decode at small batch is a chain of short kernels. Such a kernel
// may read only constant data (weights) before pdl_wait(), which returns once every earlier kernel has completed
// and its writes are visible; it must neither read activations nor write anything before it. Without a
// programmatic predecessor both are no-ops. LLMSERVE_PDL=0 in the environment turns the overlap off (A/B runs).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
// Lets the next launch_pdl kernel be scheduled; call it once this kernel's main loads are in flight.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
bool pdl_enabled();
// Whether the decode-path kernels that can (the rotary + cache kernel, the CUDA-core decode attention) also read the
// step's own inputs before pdl_wait: the rows copied from the host before the step's first kernel (positions, slot
// mapping, query ranges, lengths, block tables), constants derived from them (cos / sin rows), and KV cache rows
// earlier steps wrote -- none of which a kernel of this step writes -- so their latency hides behind the kernel
// before. LLMSERVE_PDL_EARLY_READS=1 (default off until timed; bench/RESULTS.md).
bool pdl_early_reads();
// launch_pdl with `smem_bytes` of dynamic shared memory.
template <typename... Params, typename... Args>
void launch_pdl_smem(const char* what, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                     Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream();
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = pdl_enabled() ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
  CHECK(err == cudaSuccess) << what << ": " << cudaGetErrorString(err);
}
template <typename... Params, typename... Args>
void launch_pdl(const char* what, void (*kernel)(Params...), dim3 grid, dim3 block, Args... args) {
  launch_pdl_smem(what, kernel, grid, block, 0, args...);
}

// Aborts with the kernel's name if the launch failed.
inline void check_launch(const char* what) {
  cudaError_t err = cudaGetLastError();
  CHECK(err == cudaSuccess) << what << ": " << cudaGetErrorString(err);
}

// Calls f(T{}) with T the CUDA type of a float dtype (f32, f16, bf16); other dtypes abort.
template <typename F>
void dispatch_float(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::kF32:
      return f(float{});
    case DType::kF16:
      return f(__half{});
    case DType::kBF16:
      return f(__nv_bfloat16{});
    default:
      LOG(FATAL) << what << ": dtype " << dtype_name(dtype) << " is not f32, f16 or bf16 on cuda";
  }
}

// Blocks of `kernel` (`threads` per block, `smem` bytes of dynamic shared memory) resident on the whole GPU at once:
// its occupancy times the SMs, cached per device, kernel and size (the occupancy query is a host call). Launch
// heuristics count waves with it.
inline int64_t resident_blocks(const void* kernel, int threads, size_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<int, const void*, int, size_t>, int64_t> cache;
  int device = 0;
  CHECK(cudaGetDevice(&device) == cudaSuccess) << "cudaGetDevice";
  std::lock_guard<std::mutex> lock(mu);
  auto [it, added] = cache.try_emplace({device, kernel, threads, smem}, 0);
  if (added) {
    int blocks = 0, sms = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem) == cudaSuccess)
        << "occupancy query";
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess) << "SM count";
    it->second = std::max<int64_t>(1, int64_t{blocks} * sms);
  }
  return it->second;
}

// Blocks of at most 65535 in grid dimension y/z; rows go in x (up to 2^31 - 1).
inline unsigned ceil_div(int64_t a, int64_t b) { return static_cast<unsigned>((a + b - 1) / b); }

// The SM count of the device current at the first call (the GPUs of one server are alike): launch heuristics size
// grids in waves of it.
inline int num_sms() {
  static const int n = [] {
    int dev = 0, count = 0;
    CHECK(cudaGetDevice(&dev) == cudaSuccess);
    CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess);
    return count;
  }();
  return n;
}

// Runs set() once per CUDA device and returns that device's result: for cudaFuncSetAttribute, which applies to the
// current device only (tensor-parallel ranks launch the same kernels on several devices, one thread each).
// Each call site (each kernel instantiation's lambda) keeps its own record.
template <typename Set>
bool once_per_device(Set set) {
  static std::mutex mu;
  static std::map<int, bool> result_by_device;
  int device = 0;
  CHECK(cudaGetDevice(&device) == cudaSuccess) << "cudaGetDevice";
  std::lock_guard<std::mutex> lock(mu);
  auto it = result_by_device.find(device);
  if (it == result_by_device.end()) it = result_by_device.emplace(device, set()).first;
  return it->second;
}

}  // namespace llmserve::cuda

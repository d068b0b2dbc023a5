// silu_and_mul, add and the linear bias add on CUDA: 2-D grids (rows x chunks of the row), one element per thread
// (silu_and_mul: eight, with 16-byte accesses, where rows allow), f32 math, launched on the current stream. Match
// the CPU ops up to the rounding of 16-bit stores. silu_and_mul_quant: silu_and_mul's rows quantized per token to fp8
// / int8 in the same kernel (one block per row).
#include <algorithm>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/quant_traits.cuh"

namespace llmserve::cuda {
namespace {

constexpr int kThreads = 256;

// V consecutive outputs per thread: 8 (16-byte accesses) when rows allow it, else 1.
template <typename T, int V>
__global__ void silu_and_mul_kernel(T* out, int64_t out_stride, const T* x, int64_t x_stride, int d) {
  pdl_wait();  // x comes from the previous kernel (launched with launch_pdl when vectorised)
  pdl_trigger();
  const int j = (blockIdx.y * blockDim.x + threadIdx.x) * V;
  if (j >= d) return;
  const T* xr = x + blockIdx.x * x_stride;
  T* o = out + blockIdx.x * out_stride;
  if constexpr (V == 8) {
    float g[8], u[8];
    load8(xr + j, g);
    load8(xr + d + j, u);
#pragma unroll
    for (int e = 0; e < 8; ++e) g[e] = silu_mul(g[e], u[e]);
    store8(o + j, g);
  } else {
    const float g = load_f(xr + j), u = load_f(xr + d + j);
    store_f(o + j, silu_mul(g, u));
  }
}

template <typename T>
void launch(Tensor& out, const Tensor& x) {
  const int64_t n = out.size(0), d = out.size(1);
  if (n == 0 || d == 0) return;
  const bool vec = d % 8 == 0 && x.stride(0) % 8 == 0 && out.stride(0) % 8 == 0 && aligned16(x.raw_data()) &&
                   aligned16(out.raw_data());
  const int v = vec ? 8 : 1;
  dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>((d / v + kThreads - 1) / kThreads));
  if (vec) {
    launch_pdl("silu_and_mul_kernel", silu_and_mul_kernel<T, 8>, grid, kThreads, out.data<T>(), out.stride(0),
               x.data<T>(), x.stride(0), static_cast<int>(d));
  } else {
    silu_and_mul_kernel<T, 1>
        <<<grid, kThreads, 0, stream()>>>(out.data<T>(), out.stride(0), x.data<T>(), x.stride(0), static_cast<int>(d));
  }
  check_launch("silu_and_mul_kernel");
}

// silu_and_mul_quant: one block per row. The row's outputs, rounded to T as silu_and_mul stores them, stay in
// registers (thread t owns 8-element chunks t, t + blockDim, ..., N of them) between their amax and the per-token
// quantization (dynamic_scaled_quantize's arithmetic, so the pair's result bit for bit).
constexpr int kQuantMaxThreads = 1024;
constexpr int kQuantMaxChunks = 4;

template <typename T, typename Q, int N>
__global__ void __launch_bounds__(kQuantMaxThreads)
    silu_and_mul_quant_vec_kernel(Q* out, float* scales, int groups, const T* x, int64_t x_stride, int d) {
  pdl_wait();
  const int chunks = d / 8;
  const T* xr = x + blockIdx.x * x_stride;
  float v[N][8], u[N][8];
  float amax = 0.f;
  // Every load is issued before the first use: a loop that loads, computes and may break keeps one chunk in flight
  // per thread (measured on an H200: 92 us per 2048 x 14336 row block, ~40% of the copy bandwidth).
#pragma unroll
  for (int c = 0; c < N; ++c) {
    const int chunk = threadIdx.x + c * blockDim.x;
    if (chunk < chunks) {
      load8(xr + chunk * 8, v[c]);
      load8(xr + d + chunk * 8, u[c]);
    }
  }
#pragma unroll
  for (int c = 0; c < N; ++c) {
    if (threadIdx.x + c * blockDim.x >= chunks) break;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      v[c][e] = round_to<T>(silu_mul(v[c][e], u[c][e]));
      amax = fmaxf(amax, fabsf(v[c][e]));
    }
  }
  pdl_trigger();
  Q* o = out + blockIdx.x * static_cast<int64_t>(d);
  if (groups > 1) {  // groups of 128 columns (the launch's condition)
#pragma unroll
    for (int c = 0; c < N; ++c) {
      const int chunk = threadIdx.x + c * blockDim.x;
      quantize_chunk_group128(o, scales + blockIdx.x * static_cast<int64_t>(groups), v[c], chunk, chunk < chunks);
    }
    return;
  }
  const float scale = dynamic_quant_scale<Q>(block_max(amax));
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
#pragma unroll
  for (int c = 0; c < N; ++c) {
    const int chunk = threadIdx.x + c * blockDim.x;
    if (chunk >= chunks) break;
    store8_quantized(o + chunk * 8, v[c], scale);
  }
}

// Many rows (a prefill): the register form holds one 896-thread row per SM (its registers), so each SM loads, waits
// at the row's barrier and stores in turn (ncu on an H200: 100 us per 2048 x 14336 call). Here 256-thread blocks
// stage the row's outputs (rounded to T: exact) in shared memory between the amax and the quantization, several
// rows share an SM and one row's barrier hides behind another's loads. Same arithmetic: the same bits.
constexpr int kStagedThreads = 256;
constexpr int kStagedMinRows = 512;             // below: the register form's one wide block per row is quicker
constexpr int kStagedMaxSmemBytes = 64 * 1024;  // rows of up to 32768 16-bit values

template <typename T, typename Q>
__global__ void __launch_bounds__(kStagedThreads)
    silu_and_mul_quant_staged_kernel(Q* out, float* scales, int groups, const T* x, int64_t x_stride, int d) {
  extern __shared__ __align__(16) unsigned char staged_smem[];
  T* row = reinterpret_cast<T*>(staged_smem);
  pdl_wait();
  const int chunks = d / 8;
  const T* xr = x + blockIdx.x * x_stride;
  float amax = 0.f;
#pragma unroll 4
  for (int c = threadIdx.x; c < chunks; c += kStagedThreads) {
    float g[8], u[8];
    load8(xr + c * 8, g);
    load8(xr + d + c * 8, u);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      g[e] = round_to<T>(silu_mul(g[e], u[e]));
      amax = fmaxf(amax, fabsf(g[e]));
    }
    store8(row + c * 8, g);
  }
  pdl_trigger();
  Q* o = out + blockIdx.x * static_cast<int64_t>(d);
  if (groups > 1) {  // groups of 128 columns: 16 chunks in 16 adjacent lanes (kStagedThreads is a multiple of 16)
    __syncthreads();
    for (int base = 0; base < chunks; base += kStagedThreads) {  // uniform trip count: the groups shuffle
      const int c = base + threadIdx.x;
      float v[8];
      if (c < chunks) load8(row + c * 8, v);
      quantize_chunk_group128(o, scales + blockIdx.x * static_cast<int64_t>(groups), v, c, c < chunks);
    }
    return;
  }
  const float scale = dynamic_quant_scale<Q>(block_max(amax));  // block_max's barrier also publishes `row`
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
  for (int c = threadIdx.x; c < chunks; c += kStagedThreads) {
    float v[8];
    load8(row + c * 8, v);
    store8_quantized(o + c * 8, v, scale);
  }
}

// Any width or alignment: the amax pass, then the quantization pass recomputing each output (groups > 1: one warp
// per group).
template <typename T, typename Q>
__global__ void silu_and_mul_quant_kernel(Q* out, float* scales, int groups, const T* x, int64_t x_stride, int d) {
  const T* xr = x + blockIdx.x * x_stride;
  auto value = [&](int j) { return round_to<T>(silu_mul(load_f(xr + j), load_f(xr + d + j))); };
  Q* o = out + blockIdx.x * static_cast<int64_t>(d);
  if (groups > 1) return quantize_row_by_warps(o, scales + blockIdx.x * static_cast<int64_t>(groups), d, groups, value);
  float amax = 0.f;
  for (int j = threadIdx.x; j < d; j += blockDim.x) amax = fmaxf(amax, fabsf(value(j)));
  const float scale = dynamic_quant_scale<Q>(block_max(amax));
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
  for (int j = threadIdx.x; j < d; j += blockDim.x) o[j] = QuantTraits<Q>::cast(__fdiv_rn(value(j), scale));
}

template <typename T, typename Q>
void launch_quant(Tensor& out, Tensor& scales, const Tensor& x) {
  const int64_t n = out.size(0), d = out.size(1), chunks = d / 8;
  if (n == 0) return;
  const unsigned grid = static_cast<unsigned>(n);
  const int groups = static_cast<int>(scales.size(1));
  const bool vec = d % 8 == 0 && chunks <= int64_t{kQuantMaxThreads} * kQuantMaxChunks && x.stride(0) % 8 == 0 &&
                   aligned16(x.raw_data()) && reinterpret_cast<uintptr_t>(out.raw_data()) % 8 == 0 &&
                   (groups == 1 || d == int64_t{128} * groups);  // the registers' groups are 128 columns
  if (!vec) {
    silu_and_mul_quant_kernel<T, Q><<<grid, kThreads, 0, stream()>>>(out.data<Q>(), scales.data<float>(), groups,
                                                                     x.data<T>(), x.stride(0), static_cast<int>(d));
    check_launch("silu_and_mul_quant_kernel");
    return;
  }
  const int64_t smem = d * static_cast<int64_t>(sizeof(T));
  if (n >= kStagedMinRows && smem <= kStagedMaxSmemBytes) {
    const bool attr_set = once_per_device([] {
      return cudaFuncSetAttribute(silu_and_mul_quant_staged_kernel<T, Q>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  kStagedMaxSmemBytes) == cudaSuccess;
    });
    CHECK(attr_set) << "silu_and_mul_quant_staged_kernel: cannot get " << kStagedMaxSmemBytes << " bytes of shared "
                    << "memory";
    launch_pdl_smem("silu_and_mul_quant_staged_kernel", silu_and_mul_quant_staged_kernel<T, Q>, grid, kStagedThreads,
                    static_cast<size_t>(smem), out.data<Q>(), scales.data<float>(), groups, x.data<T>(), x.stride(0),
                    static_cast<int>(d));
    return;
  }
  // The most threads (up to 1024) and the fewest chunks per thread: rows are one block each.
  const int64_t per_thread = (chunks + kQuantMaxThreads - 1) / kQuantMaxThreads;
  const int threads = static_cast<int>(std::max<int64_t>(32, (chunks + per_thread - 1) / per_thread + 31) / 32 * 32);
  auto run = [&](auto kernel) {
    launch_pdl("silu_and_mul_quant_vec_kernel", kernel, grid, threads, out.data<Q>(), scales.data<float>(), groups,
               x.data<T>(), x.stride(0), static_cast<int>(d));
  };
  if (per_thread == 1) return run(silu_and_mul_quant_vec_kernel<T, Q, 1>);
  if (per_thread == 2) return run(silu_and_mul_quant_vec_kernel<T, Q, 2>);
  run(silu_and_mul_quant_vec_kernel<T, Q, kQuantMaxChunks>);
}

template <typename T>
__global__ void add_kernel(T* a, int64_t a_stride, const T* b, int64_t b_stride, int64_t d) {
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= d) return;
  T* ar = a + blockIdx.x * a_stride;
  store_f(ar + j, load_f(ar + j) + load_f(b + blockIdx.x * b_stride + j));
}

template <typename T, typename B>
__global__ void add_bias_kernel(T* out, int64_t out_stride, const B* bias, int64_t n) {
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  T* o = out + blockIdx.x * out_stride;
  store_f(o + j, load_f(o + j) + load_f(bias + j));
}

}  // namespace

void silu_and_mul(Tensor& out, const Tensor& x) {
  dispatch_float(x.dtype(), "silu_and_mul", [&](auto t) { launch<decltype(t)>(out, x); });
}

void silu_and_mul_quant(Tensor& out, Tensor& scales, const Tensor& x) {
  dispatch_float(x.dtype(), "silu_and_mul_quant", [&](auto t) {
    dispatch_quant(out.dtype(), [&](auto q) { launch_quant<decltype(t), decltype(q)>(out, scales, x); });
  });
}

void add(Tensor& a, const Tensor& b) {
  const int64_t n = a.size(0), d = a.numel() / std::max<int64_t>(1, n);
  if (n == 0 || d == 0) return;
  dispatch_float(a.dtype(), "add", [&](auto t) {
    using T = decltype(t);
    dim3 grid(static_cast<unsigned>(n), ceil_div(d, kThreads));
    add_kernel<T><<<grid, kThreads, 0, stream()>>>(a.data<T>(), a.stride(0), b.data<T>(), b.stride(0), d);
    check_launch("add_kernel");
  });
}

void add_bias(Tensor& out, const Tensor& bias) {
  const int64_t m = out.size(0), n = out.size(1);
  if (m == 0 || n == 0) return;
  dispatch_float(out.dtype(), "add_bias", [&](auto t) {
    dispatch_float(bias.dtype(), "add_bias", [&](auto b) {
      using T = decltype(t);
      using B = decltype(b);
      dim3 grid(static_cast<unsigned>(m), ceil_div(n, kThreads));
      add_bias_kernel<T, B><<<grid, kThreads, 0, stream()>>>(out.data<T>(), out.stride(0), bias.data<B>(), n);
      check_launch("add_bias_kernel");
    });
  });
}

void register_activation_kernels() {
  ops::silu_and_mul.register_kernel(DeviceType::kCUDA, silu_and_mul);
  ops::silu_and_mul_quant.register_kernel(DeviceType::kCUDA, silu_and_mul_quant);
  ops::add.register_kernel(DeviceType::kCUDA, add);
}

}  // namespace llmserve::cuda

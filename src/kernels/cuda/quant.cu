// Quantized-GEMM kernels on CUDA: dynamic / static activation quantization to fp8 e4m3 or int8 (bit-identical to
// the CPU op: an IEEE division, round to nearest even, saturation) and W4A16 (ops::w4a16_linear): a GEMV that
// dequantizes 4-bit weights in registers for m <= 16, and for larger m a dequantize-to-16-bit pass into a device
// scratch followed by ops::linear (cuBLASLt) — an honest first path; a Marlin-class mixed-input tensor-core GEMM
// (weights repacked at load into its layout) is the next step.
#include <cuda_fp8.h>

#include <mutex>
#include <type_traits>
#include <vector>

#include "core/cuda_stream.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace llmserve::cuda {
namespace {

template <typename Q>
struct QuantTraits;
template <>
struct QuantTraits<__nv_fp8_e4m3> {
  static constexpr float kMax = 448.0f;
  __device__ static __nv_fp8_e4m3 cast(float v) { return __nv_fp8_e4m3(v); }  // satfinite, round to nearest even
};
template <>
struct QuantTraits<int8_t> {
  static constexpr float kMax = 127.0f;
  __device__ static int8_t cast(float v) {
    return static_cast<int8_t>(__float2int_rn(fminf(fmaxf(v, -128.0f), 127.0f)));
  }
};

// One block per (row, group): amax over the group, scale = max(amax / qmax, 1 / (qmax * 512)), out = x / scale.
template <typename T, typename Q>
__global__ void dynamic_quant_kernel(Q* out, float* scales, const T* x, int64_t k, int64_t g) {
  const int64_t row = blockIdx.x, group = blockIdx.y;
  const T* xr = x + row * k + group * g;
  float amax = 0.0f;
  for (int64_t c = threadIdx.x; c < g; c += blockDim.x) amax = fmaxf(amax, fabsf(load_f(xr + c)));
  amax = block_max(amax);
  constexpr float qmax = QuantTraits<Q>::kMax;
  const float scale = fmaxf(__fdiv_rn(amax, qmax), __fdiv_rn(1.0f, qmax * 512.0f));
  if (threadIdx.x == 0) scales[row * gridDim.y + group] = scale;
  Q* o = out + row * k + group * g;
  for (int64_t c = threadIdx.x; c < g; c += blockDim.x) o[c] = QuantTraits<Q>::cast(__fdiv_rn(load_f(xr + c), scale));
}

template <typename T, typename Q>
__global__ void static_quant_kernel(Q* out, const T* x, const float* scale, int64_t n) {
  const float s = *scale;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = QuantTraits<Q>::cast(__fdiv_rn(load_f(x + i), s));
  }
}

template <typename F>
void dispatch_quant(DType dtype, F&& f) {
  if (dtype == DType::kFP8E4M3) return f(__nv_fp8_e4m3{});
  return f(int8_t{});
}

void dynamic_scaled_quantize(Tensor& out, Tensor& scales, const Tensor& x) {
  const int64_t m = x.size(0), k = x.size(1), groups = scales.size(1), g = k / groups;
  if (m == 0 || k == 0) return;
  const int threads = g >= 256 ? 256 : 128;
  dispatch_float(x.dtype(), "dynamic_scaled_quantize", [&](auto t) {
    dispatch_quant(out.dtype(), [&](auto q) {
      using T = decltype(t);
      using Q = decltype(q);
      dim3 grid(static_cast<unsigned>(m), static_cast<unsigned>(groups));
      dynamic_quant_kernel<T, Q>
          <<<grid, threads, 0, stream()>>>(out.data<Q>(), scales.data<float>(), x.data<T>(), k, g);
      check_launch("dynamic_quant_kernel");
    });
  });
}

void static_scaled_quantize(Tensor& out, const Tensor& x, const Tensor& scale) {
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), "static_scaled_quantize", [&](auto t) {
    dispatch_quant(out.dtype(), [&](auto q) {
      using T = decltype(t);
      using Q = decltype(q);
      const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65535));
      static_quant_kernel<T, Q><<<blocks, 256, 0, stream()>>>(out.data<Q>(), x.data<T>(), scale.data<float>(), n);
      check_launch("static_quant_kernel");
    });
  });
}

// ---- W4A16 ----

struct W4Params {
  const uint8_t* qweight;  // [n, k / 2]
  const float* scales;     // [n, groups]
  const uint8_t* zeros;    // [n, groups]
  const int32_t* perm;     // [k] or null
  int64_t n, k, groups, g;
};

// GEMV for m <= M: one warp per output row; each lane takes 32 consecutive columns (16 bytes of the row) per step,
// dequantizes them in registers and accumulates against every row of x. Needs k % 32 == 0 and g % 32 == 0
// (every 32-column chunk in one group).
template <typename T, int M>
__global__ void w4a16_gemv_kernel(T* out, int64_t ldo, const T* x, int64_t ldx, int m, W4Params p, const float* bias_f,
                                  const T* bias_t) {
  const int lane = threadIdx.x % 32;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= p.n) return;
  float acc[M];
#pragma unroll
  for (int i = 0; i < M; ++i) acc[i] = 0.0f;
  const uint8_t* qrow = p.qweight + r * (p.k / 2);
  for (int64_t c0 = static_cast<int64_t>(lane) * 32; c0 < p.k; c0 += 32 * 32) {
    const uint4 packed = *reinterpret_cast<const uint4*>(qrow + c0 / 2);
    const int64_t group = c0 / p.g;
    const float s = p.scales[r * p.groups + group];
    const float z = static_cast<float>(p.zeros[r * p.groups + group]);
    float w[32];
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
    for (int b = 0; b < 4; ++b) {
#pragma unroll
      for (int e = 0; e < 8; ++e) w[b * 8 + e] = (static_cast<float>((words[b] >> (4 * e)) & 0xf) - z) * s;
    }
#pragma unroll
    for (int i = 0; i < M; ++i) {
      if (i >= m) break;
      const T* xr = x + i * ldx;
      float sum = 0.0f;
      if (p.perm == nullptr) {
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          float xv[8];
          load8(xr + c0 + v * 8, xv);
#pragma unroll
          for (int e = 0; e < 8; ++e) sum += w[v * 8 + e] * xv[e];
        }
      } else {
#pragma unroll
        for (int e = 0; e < 32; ++e) sum += w[e] * load_f(xr + p.perm[c0 + e]);
      }
      acc[i] += sum;
    }
  }
#pragma unroll
  for (int i = 0; i < M; ++i) {
    if (i >= m) break;
    float v = acc[i];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) {
      if (bias_f != nullptr) v += bias_f[r];
      if (bias_t != nullptr) v += load_f(bias_t + r);
      store_f(out + i * ldo + r, v);
    }
  }
}

// W[r, perm[c]] (or W[r, c]) = (q - z) * s into a dense [n, k] matrix of T (the large-m path).
template <typename T>
__global__ void w4a16_dequant_kernel(T* w, W4Params p) {
  const int64_t r = blockIdx.x;
  const uint8_t* qrow = p.qweight + r * (p.k / 2);
  for (int64_t c = threadIdx.x; c < p.k; c += blockDim.x) {
    const int q = (qrow[c / 2] >> (4 * (c & 1))) & 0xf;
    const int64_t group = c / p.g;
    const float v =
        (static_cast<float>(q) - static_cast<float>(p.zeros[r * p.groups + group])) * p.scales[r * p.groups + group];
    store_f(w + r * p.k + (p.perm != nullptr ? p.perm[c] : c), v);
  }
}

// The large-m path's dense weight: one device buffer per device, grown on demand (the warm-up forward before each
// graph capture sizes it) and shared by every layer (one stream, layers in order). An outgrown buffer is kept, never
// freed: a captured graph may still use its address.
Tensor dequant_scratch(int64_t n, int64_t k, DType dtype, Device device) {
  static std::mutex mu;
  static Tensor buffers[16];
  static std::vector<Tensor> outgrown;
  std::lock_guard<std::mutex> lock(mu);
  Tensor& b = buffers[device.index];
  const int64_t bytes = n * k * static_cast<int64_t>(dtype_size(dtype));
  if (!b.defined() || b.numel() < bytes) {
    if (b.defined()) outgrown.push_back(b);
    b = Tensor::empty({bytes}, DType::kU8, device);
  }
  return Tensor::from_blob(b.raw_data(), {n, k}, dtype, nullptr, device);
}

constexpr int kGemvMaxRows = 16;

template <typename T, int M>
void launch_gemv(Tensor& out, const Tensor& x, const W4Params& p, const Tensor* bias) {
  constexpr int kWarps = 4;
  const unsigned blocks = static_cast<unsigned>((p.n + kWarps - 1) / kWarps);
  const float* bias_f = bias != nullptr && bias->dtype() == DType::kF32 ? bias->data<float>() : nullptr;
  const T* bias_t = bias != nullptr && bias->dtype() != DType::kF32 ? bias->data<T>() : nullptr;
  w4a16_gemv_kernel<T, M><<<blocks, kWarps * 32, 0, stream()>>>(out.data<T>(), out.stride(0), x.data<T>(), x.stride(0),
                                                                static_cast<int>(x.size(0)), p, bias_f, bias_t);
  check_launch("w4a16_gemv_kernel");
}

void w4a16_linear(Tensor& out, const Tensor& x, const Tensor& qweight, const Tensor& scales, const Tensor& zeros,
                  const Tensor* perm, const Tensor* bias) {
  const int64_t m = x.size(0), k = x.size(1), n = qweight.size(0), groups = scales.size(1);
  if (m == 0 || n == 0) return;
  W4Params p{qweight.data<uint8_t>(),
             scales.data<float>(),
             zeros.data<uint8_t>(),
             perm != nullptr ? perm->data<int32_t>() : nullptr,
             n,
             k,
             groups,
             k / groups};
  const bool gemv = m <= kGemvMaxRows && k % 32 == 0 && p.g % 32 == 0 && aligned16(qweight.raw_data()) &&
                    (perm != nullptr || (x.stride(0) % 8 == 0 && aligned16(x.raw_data())));
  dispatch_float(x.dtype(), "w4a16_linear", [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, float>) {
      LOG(FATAL) << "w4a16_linear: f32 activations on cuda";  // the op's check allows bf16 / f16 only
    } else if (gemv) {
      if (m == 1) return launch_gemv<T, 1>(out, x, p, bias);
      if (m <= 2) return launch_gemv<T, 2>(out, x, p, bias);
      if (m <= 4) return launch_gemv<T, 4>(out, x, p, bias);
      if (m <= 8) return launch_gemv<T, 8>(out, x, p, bias);
      return launch_gemv<T, 16>(out, x, p, bias);
    } else {
      Tensor w = dequant_scratch(n, k, x.dtype(), x.device());
      w4a16_dequant_kernel<T><<<static_cast<unsigned>(n), 256, 0, stream()>>>(w.data<T>(), p);
      check_launch("w4a16_dequant_kernel");
      ops::linear(out, x, w, bias);
    }
  });
}

}  // namespace

void register_quant_kernels() {
  ops::dynamic_scaled_quantize.register_kernel(DeviceType::kCUDA, dynamic_scaled_quantize);
  ops::static_scaled_quantize.register_kernel(DeviceType::kCUDA, static_scaled_quantize);
  ops::w4a16_linear.register_kernel(DeviceType::kCUDA, w4a16_linear);
}

}  // namespace llmserve::cuda

// Quantized-GEMM kernels on CUDA: dynamic / static activation quantization to fp8 e4m3 or int8 (bit-identical to
// the CPU op: an IEEE division, round to nearest even, saturation; launched with programmatic dependent launch so the
// GEMV after them streams its first weights meanwhile) and the dispatch of W4A16 (ops::w4a16_linear): for m <= 32
// the tensor-core GEMV of w4a16_gemv.cu (act-order: on x's columns gathered once into the weight's order), for larger
// m a dequantize-to-16-bit pass into a device scratch followed by ops::linear (cuBLASLt); and W4A16 on the GEMM layout
// (ops::w4a16_gemm_pack, ops::w4a16_gemm): the pack at load, then CUTLASS's mixed-input GEMM of w4a16_gemm.cu where it
// applies (bf16), else the same dequantize + ops::linear from that layout.
#include <cuda_fp8.h>

#include <mutex>
#include <type_traits>
#include <vector>

#include "core/cuda_stream.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/quant_traits.cuh"
#include "kernels/cuda/w4a16_gemm.h"
#include "kernels/cuda/w4a16_gemv.h"
#include "kernels/w4a16_gemm_layout.h"

namespace llmserve::cuda {
namespace {

// One block per (row, group): amax over the group, scale = max(amax / qmax, 1 / (qmax * 512)), out = x / scale.
template <typename T, typename Q>
__global__ void dynamic_quant_kernel(Q* out, float* scales, const T* x, int64_t k, int64_t g) {
  pdl_wait();
  pdl_trigger();
  const int64_t row = blockIdx.x, group = blockIdx.y;
  const T* xr = x + row * k + group * g;
  float amax = 0.0f;
  for (int64_t c = threadIdx.x; c < g; c += blockDim.x) amax = fmaxf(amax, fabsf(load_f(xr + c)));
  amax = block_max(amax);
  const float scale = dynamic_quant_scale<Q>(amax);
  if (threadIdx.x == 0) scales[row * gridDim.y + group] = scale;
  Q* o = out + row * k + group * g;
  for (int64_t c = threadIdx.x; c < g; c += blockDim.x) o[c] = QuantTraits<Q>::cast(__fdiv_rn(load_f(xr + c), scale));
}

// The same for groups of at most kQuantRegWords x 8 x blockDim values with 16-byte aligned rows: each value is read
// once, 8 at a time, and kept in registers between the amax and the division. Decode's activations are one row per
// token whose quantization sits between two GEMVs, so its latency (not its bandwidth) is what counts. Bit-identical
// to dynamic_quant_kernel (the same max, the same IEEE division per value).
constexpr int kQuantRegWords = 4;
template <typename T, typename Q>
__global__ void __launch_bounds__(1024)
    dynamic_quant_regs_kernel(Q* out, float* scales, const T* x, int64_t k, int64_t g) {
  pdl_wait();
  pdl_trigger();
  const int64_t row = blockIdx.x, group = blockIdx.y, words = g / 8;
  const T* xr = x + row * k + group * g;
  float v[kQuantRegWords][8];
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kQuantRegWords; ++j) {
    const int64_t w = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    if (w < words) {
      load8(xr + 8 * w, v[j]);
#pragma unroll
      for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(v[j][e]));
    }
  }
  amax = block_max(amax);
  const float scale = dynamic_quant_scale<Q>(amax);
  if (threadIdx.x == 0) scales[row * gridDim.y + group] = scale;
  Q* o = out + row * k + group * g;
#pragma unroll
  for (int j = 0; j < kQuantRegWords; ++j) {
    const int64_t w = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    if (w < words) store8_quantized(o + 8 * w, v[j], scale);
  }
}

template <typename T, typename Q>
__global__ void static_quant_kernel(Q* out, const T* x, const float* scale, int64_t n) {
  pdl_wait();
  pdl_trigger();
  const float s = *scale;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = QuantTraits<Q>::cast(__fdiv_rn(load_f(x + i), s));
  }
}

void dynamic_scaled_quantize(Tensor& out, Tensor& scales, const Tensor& x) {
  const int64_t m = x.size(0), k = x.size(1), groups = scales.size(1), g = k / groups;
  if (m == 0 || k == 0) return;
  int reg_threads = 128;  // the register-resident kernel's block: the fewest threads that hold the whole group
  while (reg_threads < 1024 && g / 8 > kQuantRegWords * reg_threads) reg_threads *= 2;
  const bool in_registers = g % 8 == 0 && k % 8 == 0 && g / 8 <= kQuantRegWords * reg_threads &&
                            aligned16(x.raw_data()) && reinterpret_cast<uintptr_t>(out.raw_data()) % 8 == 0;
  const int threads = g >= 256 ? 256 : 128;
  dispatch_float(x.dtype(), "dynamic_scaled_quantize", [&](auto t) {
    dispatch_quant(out.dtype(), [&](auto q) {
      using T = decltype(t);
      using Q = decltype(q);
      dim3 grid(static_cast<unsigned>(m), static_cast<unsigned>(groups));
      if (in_registers) {
        return launch_pdl("dynamic_quant_regs_kernel", dynamic_quant_regs_kernel<T, Q>, grid, reg_threads,
                          out.data<Q>(), scales.data<float>(), x.data<T>(), k, g);
      }
      launch_pdl("dynamic_quant_kernel", dynamic_quant_kernel<T, Q>, grid, threads, out.data<Q>(), scales.data<float>(),
                 x.data<T>(), k, g);
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
      launch_pdl("static_quant_kernel", static_quant_kernel<T, Q>, blocks, 256, out.data<Q>(), x.data<T>(),
                 scale.data<float>(), n);
    });
  });
}

// ---- W4A16 ----

// xg[i, c] = x[i, perm[c]]: x's columns in the act-order weight's column order, so the GEMV reads x contiguously.
template <typename T>
__global__ void gather_columns_kernel(T* xg, const T* x, int64_t ldx, const int32_t* perm, int64_t k) {
  pdl_wait();
  pdl_trigger();
  const int64_t row = blockIdx.y;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < k;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    xg[row * k + c] = x[row * ldx + perm[c]];
  }
}

// W[r, perm[c]] (or W[r, c]) = (q - z) * s into a dense [n, k] matrix of T (the large-m path).
template <typename T>
__global__ void w4a16_dequant_kernel(T* w, W4GemvParams p, const int32_t* perm) {
  const int64_t r = blockIdx.x;
  const uint8_t* qrow = p.qweight + r * (p.k / 2);
  for (int64_t c = threadIdx.x; c < p.k; c += blockDim.x) {
    const int q = (qrow[c / 2] >> (4 * (c & 1))) & 0xf;
    const int64_t group = c / p.g;
    const float v =
        (static_cast<float>(q) - static_cast<float>(p.zeros[r * p.groups + group])) * p.scales[r * p.groups + group];
    store_f(w + r * p.k + (perm != nullptr ? perm[c] : c), v);
  }
}

// The scratch matrices of the W4A16 paths: slot kGatherSlot holds the gathered x (act-order), kWeightSlot the large-m
// path's dense weight or the CUTLASS GEMM's workspace (one call uses each slot at most once): one device buffer per
// device and slot, grown on demand (the warm-up forward before each graph capture sizes it) and shared by every layer
// (one stream, layers in order). An outgrown buffer is kept, never freed: a captured graph may still use its address.
constexpr int kGatherSlot = 0, kWeightSlot = 1;
Tensor scratch_matrix(int64_t rows, int64_t cols, DType dtype, Device device, int slot = kGatherSlot) {
  static std::mutex mu;
  static Tensor buffers[16][2];
  static std::vector<Tensor> outgrown;
  std::lock_guard<std::mutex> lock(mu);
  Tensor& b = buffers[device.index][slot];
  const int64_t bytes = rows * cols * static_cast<int64_t>(dtype_size(dtype));
  if (!b.defined() || b.numel() < bytes) {
    if (b.defined()) outgrown.push_back(b);
    b = Tensor::empty({bytes}, DType::kU8, device);
  }
  return Tensor::from_blob(b.raw_data(), {rows, cols}, dtype, nullptr, device);
}

void w4a16_linear(Tensor& out, const Tensor& x, const Tensor& qweight, const Tensor& scales, const Tensor& zeros,
                  const Tensor* perm, const Tensor* bias) {
  const int64_t m = x.size(0), k = x.size(1), n = qweight.size(0), groups = scales.size(1);
  if (m == 0 || n == 0) return;
  const W4GemvParams p{qweight.data<uint8_t>(), scales.data<float>(), zeros.data<uint8_t>(), n, k, groups, k / groups};
  const int32_t* perm_p = perm != nullptr ? perm->data<int32_t>() : nullptr;
  dispatch_float(x.dtype(), "w4a16_linear", [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, float>) {
      LOG(FATAL) << "w4a16_linear: f32 activations on cuda";  // the op's check allows bf16 / f16 only
    } else {
      // Act-order: the GEMV reads a gathered copy of x (contiguous, aligned) instead of x.
      const bool gemv =
          w4a16_gemv_applies(m, x.dtype(), p) && (perm != nullptr || (x.stride(0) % 8 == 0 && aligned16(x.raw_data())));
      if (gemv && perm == nullptr) return w4a16_gemv(out, x, p, bias);
      if (gemv) {
        Tensor xg = scratch_matrix(m, k, x.dtype(), x.device());
        const dim3 grid(ceil_div(k, 256 * 4), static_cast<unsigned>(m));
        launch_pdl("gather_columns_kernel", gather_columns_kernel<T>, grid, 256, xg.data<T>(), x.data<T>(), x.stride(0),
                   perm_p, k);
        return w4a16_gemv(out, xg, p, bias);
      }
      Tensor w = scratch_matrix(n, k, x.dtype(), x.device(), kWeightSlot);
      w4a16_dequant_kernel<T><<<static_cast<unsigned>(n), 256, 0, stream()>>>(w.data<T>(), p, perm_p);
      check_launch("w4a16_dequant_kernel");
      ops::linear(out, x, w, bias);
    }
  });
}

// ---- the GEMM layout (ops.h: w4a16_gemm_pack) ----

// (row, column) within a 16 x 16 block of nibble o of the block: o = 32 r0 + r1 + 4 c0 + 8 c1 + 2 c2.
__device__ __forceinline__ void block_position(int o, int& r, int& c) {
  r = o / 32 + 8 * (o % 2);
  c = (o / 4) % 2 + 2 * ((o / 8) % 4) + 8 * ((o / 2) % 2);
}

// One thread per byte of packed [k / 16, 8 n]: its two nibbles gathered from qweight [n, k / 2].
__global__ void w4a16_pack_weight_kernel(uint8_t* packed, const uint8_t* qweight, int64_t n, int64_t k) {
  const int64_t total = (k / 16) * 8 * n;
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < total;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = b / (8 * n), band = (b % (8 * n)) / 128;
    const int o = static_cast<int>(2 * (b % 128));
    uint32_t v = 0;
    for (int h = 0; h < 2; ++h) {
      int r, c;
      block_position(o + h, r, c);
      const int64_t row = 16 * band + r, col = 16 * j + c;
      const uint32_t q = (qweight[row * (k / 2) + col / 2] >> (4 * (col & 1))) & 0xf;
      v |= (q ^ 8) << (4 * h);
    }
    packed[b] = static_cast<uint8_t>(v);
  }
}

// gemm_scales [groups, n] = scales^T, gemm_zeros = (8 - z) s (rounded once, from f32, as the CPU op does).
template <typename T>
__global__ void w4a16_pack_scales_kernel(T* gemm_scales, T* gemm_zeros, const float* scales, const uint8_t* zeros,
                                         int64_t n, int64_t groups) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n * groups;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / groups, j = i % groups;
    const float s = scales[i];
    store_f(gemm_scales + j * n + r, s);
    store_f(gemm_zeros + j * n + r, static_cast<float>(8 - static_cast<int>(zeros[i])) * s);
  }
}

void w4a16_gemm_pack(Tensor& packed, Tensor& gemm_scales, Tensor& gemm_zeros, const Tensor& qweight,
                     const Tensor& scales, const Tensor& zeros) {
  const int64_t n = qweight.size(0), k = qweight.size(1) * 2, groups = scales.size(1);
  if (n == 0 || k == 0) return;
  w4a16_pack_weight_kernel<<<std::min<unsigned>(ceil_div(packed.numel(), 256), 65535u), 256, 0, stream()>>>(
      packed.data<uint8_t>(), qweight.data<uint8_t>(), n, k);
  check_launch("w4a16_pack_weight_kernel");
  dispatch_float(gemm_scales.dtype(), "w4a16_gemm_pack", [&](auto t) {
    using T = decltype(t);
    w4a16_pack_scales_kernel<T><<<std::min<unsigned>(ceil_div(n * groups, 256), 65535u), 256, 0, stream()>>>(
        gemm_scales.data<T>(), gemm_zeros.data<T>(), scales.data<float>(), zeros.data<uint8_t>(), n, groups);
  });
  check_launch("w4a16_pack_scales_kernel");
}

// W[r, perm[c]] (or W[r, c]) = (q - 8) s + zt from the GEMM layout into a dense [n, k] matrix of T (the fallback).
template <typename T, typename S>
__global__ void w4a16_dequant_packed_kernel(T* w, const uint8_t* packed, int64_t pitch, const S* scales, const S* zeros,
                                            int64_t scales_ld, int64_t k, int64_t g, const int32_t* perm) {
  const int64_t r = blockIdx.x;
  for (int64_t c = threadIdx.x; c < k; c += blockDim.x) {
    const W4NibbleAt at_nibble = w4a16_packed_nibble(r, c, pitch);
    const int q = (packed[at_nibble.byte] >> at_nibble.shift) & 0xf;
    const int64_t at = (c / g) * scales_ld + r;
    const float v =
        static_cast<float>((q ^ 8) - 8) * load_f(scales + at) + (zeros != nullptr ? load_f(zeros + at) : 0.f);
    store_f(w + r * k + (perm != nullptr ? perm[c] : c), v);
  }
}

void w4a16_gemm(Tensor& out, const Tensor& x, const Tensor& packed, const Tensor& gemm_scales, const Tensor* gemm_zeros,
                const Tensor* perm, const Tensor* bias) {
  const int64_t m = x.size(0), k = x.size(1), n = out.size(1), groups = gemm_scales.size(0);
  if (m == 0 || n == 0) return;
  const W4GemmParams p{packed.data<uint8_t>(),
                       packed.stride(0),
                       gemm_scales.raw_data(),
                       gemm_zeros != nullptr ? gemm_zeros->raw_data() : nullptr,
                       gemm_scales.stride(0),
                       n,
                       k,
                       groups};
  const int32_t* perm_p = perm != nullptr ? perm->data<int32_t>() : nullptr;
  dispatch_float(x.dtype(), "w4a16_gemm", [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, float>) {
      LOG(FATAL) << "w4a16_gemm: f32 activations on cuda";  // the op's check allows bf16 / f16 only
    } else {
      if (x.dtype() == DType::kBF16 && gemm_scales.dtype() == DType::kBF16) {
        // Act-order: the GEMM reads a gathered copy of x (its columns in the weight's order).
        Tensor xg = x;
        if (perm != nullptr) {
          xg = scratch_matrix(m, k, x.dtype(), x.device(), kGatherSlot);
          const dim3 grid(ceil_div(k, 256 * 4), static_cast<unsigned>(m));
          launch_pdl("gather_columns_kernel", gather_columns_kernel<T>, grid, 256, xg.data<T>(), x.data<T>(),
                     x.stride(0), perm_p, k);
        }
        if (w4a16_cutlass_applies(out, xg, p)) {
          const size_t bytes = w4a16_cutlass_workspace_bytes(m, p);
          void* workspace = nullptr;
          if (bytes > 0) {
            workspace = scratch_matrix(1, static_cast<int64_t>(bytes), DType::kU8, x.device(), kWeightSlot).raw_data();
          }
          w4a16_cutlass_gemm(out, xg, p, workspace);
          if (bias != nullptr) add_bias(out, *bias);  // the CUTLASS GEMM's epilogue writes the product only
          return;
        }
      }
      Tensor w = scratch_matrix(n, k, x.dtype(), x.device(), kWeightSlot);
      dispatch_float(gemm_scales.dtype(), "w4a16_gemm", [&](auto s) {
        using S = decltype(s);
        w4a16_dequant_packed_kernel<T, S><<<static_cast<unsigned>(n), 256, 0, stream()>>>(
            w.data<T>(), p.packed, p.packed_ld, gemm_scales.data<S>(),
            gemm_zeros != nullptr ? gemm_zeros->data<S>() : nullptr, p.scales_ld, k, k / groups, perm_p);
      });
      check_launch("w4a16_dequant_packed_kernel");
      ops::linear(out, x, w, bias);
    }
  });
}

}  // namespace

void register_quant_kernels() {
  ops::dynamic_scaled_quantize.register_kernel(DeviceType::kCUDA, dynamic_scaled_quantize);
  ops::static_scaled_quantize.register_kernel(DeviceType::kCUDA, static_scaled_quantize);
  ops::w4a16_linear.register_kernel(DeviceType::kCUDA, w4a16_linear);
  ops::w4a16_gemm_pack.register_kernel(DeviceType::kCUDA, w4a16_gemm_pack);
  ops::w4a16_gemm.register_kernel(DeviceType::kCUDA, w4a16_gemm);
}

}  // namespace llmserve::cuda

// RMSNorm and fused residual-add + RMSNorm on CUDA: one block per row (rows of up to 256 elements: several rows per
// block), f32 accumulation, activations f32, f16 or bf16 with a weight of any of those dtypes, on the current
// stream. Matches the CPU ops up to the rounding of 16-bit stores. Rows of up to 8192 elements in 16-byte-aligned
// 8-element chunks take the vectorised kernels (the row stays in registers: one read, one write; programmatic
// dependent launch); anything else the scalar ones. rms_norm's per-head form ([n, h, d]: `heads` rows per stride
// step, adjacent) takes the short-row kernel or the scalar one.
// rms_norm_quant / fused_add_rms_norm_quant are the same kernels ending in the per-token fp8 / int8 quantization of
// the normed row (bit-identical to rms_norm then dynamic_scaled_quantize when both take the same kernel form).
// moe_combine_add_rms_norm is the vectorised fused-residual kernel reading an MoE combine instead of x (MoeCombineIn).
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/moe_combine.cuh"
#include "kernels/cuda/quant_traits.cuh"

namespace llmserve::cuda {
namespace {

constexpr int kThreads = 256;

// Offset of row r when `heads` rows of d elements sit side by side per stride step (heads 1: r * stride).
__device__ __forceinline__ int64_t head_row_offset(int64_t r, int64_t stride, int heads, int d) {
  if (heads == 1) return r * stride;  // every other form: no 64-bit division on the path
  return (r / heads) * stride + (r % heads) * d;
}

template <typename T, typename W>
__global__ void rms_norm_kernel(T* out, int64_t out_stride, const T* x, int64_t x_stride, const W* weight, int d,
                                float eps, int heads) {
  const T* xr = x + head_row_offset(blockIdx.x, x_stride, heads, d);
  T* o = out + head_row_offset(blockIdx.x, out_stride, heads, d);
  float ss = 0.f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = load_f(xr + i);
    ss += v * v;
  }
  const float r = rsqrtf(block_sum(ss) / static_cast<float>(d) + eps);
  for (int i = threadIdx.x; i < d; i += blockDim.x) store_f(o + i, load_f(xr + i) * r * load_f(weight + i));
}

template <typename T, typename W>
__global__ void fused_add_rms_norm_kernel(T* x, int64_t x_stride, T* residual, int64_t res_stride, const W* weight,
                                          int d, float eps) {
  T* xr = x + blockIdx.x * x_stride;
  T* rr = residual + blockIdx.x * res_stride;
  float ss = 0.f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    store_f(rr + i, load_f(rr + i) + load_f(xr + i));
    const float v = load_f(rr + i);  // the stored (rounded) sum is what later layers see
    ss += v * v;
  }
  const float r = rsqrtf(block_sum(ss) / static_cast<float>(d) + eps);
  for (int i = threadIdx.x; i < d; i += blockDim.x) store_f(xr + i, load_f(rr + i) * r * load_f(weight + i));
}

// Vectorised: thread t owns chunks t, t + blockDim, ... (N of them at most) of 8 elements, kept in registers
// between the sum of squares and the scaling. A single decode token is one block: every round trip counts.
// Q void: out (T) gets the normed row. Q fp8 / int8: the normed row, rounded to T as the void form stores it, is
// quantized per token instead (dynamic_scaled_quantize's arithmetic), out (Q) and scales[row] written; x is not.
constexpr int kVecMaxChunks = 4;
constexpr int kVecMaxThreads = 256;

template <typename T, typename Q>
using NormOut = std::conditional_t<std::is_void_v<Q>, T, Q>;

// Where rms_norm_vec_kernel's rows come from: x itself, or the MoE combine of the row's token
// (ops::moe_combine_add_rms_norm), rounded to T as moe_combine stores it: the fused kernel reads what the unfused
// pair would have written and read back.
// prepare() runs once per row before any load(), staging what the loads share in the block's Shared scratch (syncing
// the block where it writes there).
template <typename T>
struct RowsIn {
  const T* x;
  int64_t stride;
  struct Shared {};
  __device__ __forceinline__ void prepare(int64_t, Shared&) const {}
  __device__ __forceinline__ void load(int64_t row, int chunk, float (&v)[8], const Shared&) const {
    load8(x + row * stride + chunk * 8, v);
  }
};

template <typename T>
struct MoeCombineIn {
  const T* expert_out;
  int64_t expert_stride;
  const float* weights;
  int64_t weights_stride;
  const int32_t* pair_rows;
  int k;
  const T* shared_out;  // nullptr: none
  int64_t shared_stride;
  const T* shared_gate;  // nullptr: none
  int64_t gate_stride;
  // Token t's weights, rows and shared-expert scale in shared memory (as moe_combine_kernel stages the first two):
  // the expert rows' loads then wait on one round trip, not one per choice, and each chunk reuses them.
  struct Shared {
    float w[ops::kMaxMoeTopK];
    int32_t rows[ops::kMaxMoeTopK];
    float shared_scale;
  };
  __device__ __forceinline__ void prepare(int64_t t, Shared& s) const {
    if (threadIdx.x < k) {
      s.w[threadIdx.x] = weights[t * weights_stride + threadIdx.x];
      s.rows[threadIdx.x] = pair_rows[t * k + threadIdx.x];
    }
    if (threadIdx.x == 0) {
      s.shared_scale = moe_shared_scale(shared_gate != nullptr ? shared_gate + t * gate_stride : nullptr);
    }
    __syncthreads();
  }
  __device__ __forceinline__ void load(int64_t t, int chunk, float (&v)[8], const Shared& s) const {
    moe_combine_cols<8>(v, expert_out, expert_stride, s.w, s.rows, k,
                        shared_out != nullptr ? shared_out + t * shared_stride : nullptr, s.shared_scale,
                        int64_t{chunk} * 8);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = round_to<T>(v[e]);
  }
};

template <typename T, typename W, int N, bool kResidual, typename Q, typename In>
__global__ void __launch_bounds__(kVecMaxThreads)
    rms_norm_vec_kernel(NormOut<T, Q>* out, int64_t out_stride, float* scales, int groups, const In in, T* residual,
                        int64_t res_stride, const W* weight, int d, float eps) {
  pdl_wait();  // x (or the expert outputs) and the residual come from the previous kernel
  __shared__ typename In::Shared staged;
  in.prepare(blockIdx.x, staged);
  const int chunks = d / 8;
  T* rr = kResidual ? residual + blockIdx.x * res_stride : nullptr;
  float v[N][8];
  float ss = 0.f;
#pragma unroll
  for (int c = 0; c < N; ++c) {
    const int chunk = threadIdx.x + c * blockDim.x;
    if (chunk >= chunks) break;
    in.load(blockIdx.x, chunk, v[c], staged);
    if constexpr (kResidual) {
      float r[8];
      load8(rr + chunk * 8, r);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[c][e] = round_to<T>(v[c][e] + r[e]);  // later layers see the rounded sum
      store8(rr + chunk * 8, v[c]);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) ss = fmaf(v[c][e], v[c][e], ss);
  }
  pdl_trigger();
  const float scale = rsqrtf(block_sum(ss) / static_cast<float>(d) + eps);
  NormOut<T, Q>* o = out + blockIdx.x * out_stride;
  [[maybe_unused]] float amax = 0.f;
#pragma unroll
  for (int c = 0; c < N; ++c) {
    const int chunk = threadIdx.x + c * blockDim.x;
    if (chunk >= chunks) break;
    float w[8];
    load8(weight + chunk * 8, w);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[c][e] = v[c][e] * scale * w[e];
    if constexpr (std::is_void_v<Q>) {
      store8(o + chunk * 8, v[c]);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        v[c][e] = round_to<T>(v[c][e]);  // the value the void form stores
        amax = fmaxf(amax, fabsf(v[c][e]));
      }
    }
  }
  if constexpr (!std::is_void_v<Q>) {
    if (groups > 1) {  // groups of 128 columns (the launch's condition)
#pragma unroll
      for (int c = 0; c < N; ++c) {
        const int chunk = threadIdx.x + c * blockDim.x;
        quantize_chunk_group128(o, scales + blockIdx.x * static_cast<int64_t>(groups), v[c], chunk, chunk < chunks);
      }
      return;
    }
    const float qscale = dynamic_quant_scale<Q>(block_max(amax));
    if (threadIdx.x == 0) scales[blockIdx.x] = qscale;
#pragma unroll
    for (int c = 0; c < N; ++c) {
      const int chunk = threadIdx.x + c * blockDim.x;
      if (chunk >= chunks) break;
      store8_quantized(o + chunk * 8, v[c], qscale);
    }
  }
}

// Short rows (per-head q/k norms: d = 16..256, tens of thousands of rows in a prefill): one block per row leaves a
// block mostly idle and the block launch rate bounds the kernel (measured on an H200: 45 us per call for 65,536
// rows of 128 at a 2048-token Qwen3 prefill, ~0.7 TB/s). Here a group of G = 2..32 lanes (one 8-element chunk
// each) owns a row and kThreads / G rows share a block; the group reduces with shuffles. Q as rms_norm_vec_kernel's,
// one scale per token.
template <typename T, typename W, int G, bool kResidual, typename Q>
__global__ void __launch_bounds__(kThreads)
    rms_norm_rows_kernel(NormOut<T, Q>* out, int64_t out_stride, float* scales, const T* x, int64_t x_stride,
                         T* residual, int64_t res_stride, const W* weight, int64_t n, int d, float eps, int heads) {
  pdl_wait();  // x and the residual come from the previous kernel
  const int lane = threadIdx.x % G;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kThreads / G) + threadIdx.x / G;
  const bool active = row < n && lane < d / 8;  // whole groups share a row: the shuffles below stay in the group
  float v[8];
  float ss = 0.f;
  if (active) {
    load8(x + head_row_offset(row, x_stride, heads, d) + lane * 8, v);
    if constexpr (kResidual) {
      T* rr = residual + row * res_stride + lane * 8;
      float r[8];
      load8(rr, r);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = round_to<T>(v[e] + r[e]);  // later layers see the rounded sum
      store8(rr, v);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) ss = fmaf(v[e], v[e], ss);
  }
  pdl_trigger();
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o, G);
  const float scale = rsqrtf(ss / static_cast<float>(d) + eps);
  float w[8] = {};
  if (active) load8(weight + lane * 8, w);
  float amax = 0.f;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    v[e] = v[e] * scale * w[e];
    if constexpr (!std::is_void_v<Q>) {
      v[e] = round_to<T>(v[e]);  // the value the void form stores
      amax = fmaxf(amax, fabsf(v[e]));
    }
  }
  NormOut<T, Q>* o = out + head_row_offset(row, out_stride, heads, d) + lane * 8;
  if constexpr (std::is_void_v<Q>) {
    if (active) store8(o, v);
  } else {
#pragma unroll
    for (int m = G / 2; m > 0; m >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m, G));
    const float qscale = dynamic_quant_scale<Q>(active ? amax : 0.f);
    if (!active) return;
    if (lane == 0) scales[row] = qscale;
    store8_quantized(o, v, qscale);
  }
}

template <typename T, typename W, int G, bool kResidual, typename Q>
void launch_rows(int64_t n, int64_t d, NormOut<T, Q>* out, int64_t out_stride, float* scales, const T* x,
                 int64_t x_stride, T* residual, int64_t res_stride, const W* weight, float eps, int heads) {
  constexpr int64_t kRows = kThreads / G;
  launch_pdl("rms_norm_rows_kernel", rms_norm_rows_kernel<T, W, G, kResidual, Q>,
             static_cast<unsigned>((n + kRows - 1) / kRows), kThreads, out, out_stride, scales, x, x_stride, residual,
             res_stride, weight, n, static_cast<int>(d), eps, heads);
}

// rms_norm_vec_kernel over n rows of d (d % 8 == 0, d / 8 <= kVecMaxThreads * kVecMaxChunks; the caller has checked
// alignment): as few chunks per thread as the row allows.
template <typename T, typename W, bool kResidual, typename Q, typename In>
void launch_vec_rows(int64_t n, int64_t d, NormOut<T, Q>* out, int64_t out_stride, float* scales, int groups,
                     const In& in, T* residual, int64_t res_stride, const W* weight, float eps) {
  const int64_t chunks = d / 8;
  const int per_thread = static_cast<int>((chunks + kVecMaxThreads - 1) / kVecMaxThreads);
  const int threads = static_cast<int>(std::max<int64_t>(32, (chunks + per_thread - 1) / per_thread + 31) / 32 * 32);
  const unsigned grid = static_cast<unsigned>(n);
  const int di = static_cast<int>(d);
  switch (per_thread) {
    case 1:
      launch_pdl("rms_norm_vec_kernel", rms_norm_vec_kernel<T, W, 1, kResidual, Q, In>, grid, threads, out, out_stride,
                 scales, groups, in, residual, res_stride, weight, di, eps);
      break;
    case 2:
      launch_pdl("rms_norm_vec_kernel", rms_norm_vec_kernel<T, W, 2, kResidual, Q, In>, grid, threads, out, out_stride,
                 scales, groups, in, residual, res_stride, weight, di, eps);
      break;
    default:
      launch_pdl("rms_norm_vec_kernel", rms_norm_vec_kernel<T, W, kVecMaxChunks, kResidual, Q, In>, grid, threads, out,
                 out_stride, scales, groups, in, residual, res_stride, weight, di, eps);
      break;
  }
}

// Launches the vectorised kernel when the row fits and every row start is aligned (16 bytes; a quantized out 8);
// false otherwise. heads > 1 (rms_norm's per-head rows, no residual): the short-row kernel only.
template <typename T, typename W, bool kResidual, typename Q = void>
bool launch_vec(int64_t n, int64_t d, NormOut<T, Q>* out, int64_t out_stride, float* scales, int groups, const T* x,
                int64_t x_stride, T* residual, int64_t res_stride, const W* weight, float eps, int heads = 1) {
  const int64_t chunks = d / 8;
  if (heads > 1 && (kResidual || chunks > 32 || groups > 1)) return false;
  if (groups > 1 && d != int64_t{128} * groups) return false;  // the registers' groups are 128 columns
  const bool out_aligned = std::is_void_v<Q> ? aligned16(out) : reinterpret_cast<uintptr_t>(out) % 8 == 0;
  const bool fits = d % 8 == 0 && chunks <= kVecMaxThreads * kVecMaxChunks && out_stride % 8 == 0 &&
                    x_stride % 8 == 0 && (!kResidual || res_stride % 8 == 0) && out_aligned && aligned16(x) &&
                    (!kResidual || aligned16(residual)) && aligned16(weight);
  if (!fits) return false;
  if (chunks <= 32 && groups <= 1) {  // short rows: several per block (rms_norm_rows_kernel)
    const auto rows = [&](auto group) {
      launch_rows<T, W, decltype(group)::value, kResidual, Q>(n, d, out, out_stride, scales, x, x_stride, residual,
                                                              res_stride, weight, eps, heads);
    };
    if (chunks <= 2) {
      rows(std::integral_constant<int, 2>{});
    } else if (chunks <= 4) {
      rows(std::integral_constant<int, 4>{});
    } else if (chunks <= 8) {
      rows(std::integral_constant<int, 8>{});
    } else if (chunks <= 16) {
      rows(std::integral_constant<int, 16>{});
    } else {
      rows(std::integral_constant<int, 32>{});
    }
    return true;
  }
  launch_vec_rows<T, W, kResidual, Q>(n, d, out, out_stride, scales, groups, RowsIn<T>{x, x_stride}, residual,
                                      res_stride, weight, eps);
  return true;
}

// The scalar fallback of the quantizing forms: rms_norm_kernel's / fused_add_rms_norm_kernel's passes (the same
// sums, so the same scale), then the amax of the rounded normed row, then its quantization (recomputed, not kept);
// groups > 1: one warp per group (quantize_row_by_warps).
template <typename T, typename W, typename Q, bool kResidual>
__global__ void rms_norm_quant_kernel(Q* out, float* scales, int groups, const T* x, int64_t x_stride, T* residual,
                                      int64_t res_stride, const W* weight, int d, float eps) {
  const T* xr = x + blockIdx.x * x_stride;
  T* rr = kResidual ? residual + blockIdx.x * res_stride : nullptr;
  const T* src = kResidual ? rr : xr;
  float ss = 0.f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    if constexpr (kResidual) store_f(rr + i, load_f(rr + i) + load_f(xr + i));
    const float v = load_f(src + i);  // each thread reads back only what it wrote
    ss += v * v;
  }
  const float r = rsqrtf(block_sum(ss) / static_cast<float>(d) + eps);  // block_sum syncs: the residual is visible
  auto value = [&](int i) { return round_to<T>(load_f(src + i) * r * load_f(weight + i)); };
  Q* o = out + blockIdx.x * static_cast<int64_t>(d);
  if (groups > 1) return quantize_row_by_warps(o, scales + blockIdx.x * static_cast<int64_t>(groups), d, groups, value);
  float amax = 0.f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) amax = fmaxf(amax, fabsf(value(i)));
  const float qscale = dynamic_quant_scale<Q>(block_max(amax));
  if (threadIdx.x == 0) scales[blockIdx.x] = qscale;
  for (int i = threadIdx.x; i < d; i += blockDim.x) o[i] = QuantTraits<Q>::cast(__fdiv_rn(value(i), qscale));
}

template <typename T, typename W>
void launch_rms_norm(Tensor& out, const Tensor& x, const Tensor& weight, float eps) {
  const int heads = x.dim() == 3 ? static_cast<int>(x.size(1)) : 1;  // per-head rows: [n, h, d]
  const int64_t n = x.size(0) * heads, d = x.size(x.dim() - 1);
  if (n == 0) return;
  if (launch_vec<T, W, false>(n, d, out.data<T>(), out.stride(0), nullptr, 1, x.data<T>(), x.stride(0), nullptr, 0,
                              weight.data<W>(), eps, heads))
    return;
  rms_norm_kernel<T, W><<<static_cast<unsigned>(n), kThreads, 0, stream()>>>(
      out.data<T>(), out.stride(0), x.data<T>(), x.stride(0), weight.data<W>(), static_cast<int>(d), eps, heads);
  check_launch("rms_norm_kernel");
}

template <typename T, typename W>
void launch_fused(Tensor& x, Tensor& residual, const Tensor& weight, float eps) {
  const int64_t n = x.size(0);
  if (n == 0) return;
  if (launch_vec<T, W, true>(n, x.size(1), x.data<T>(), x.stride(0), nullptr, 1, x.data<T>(), x.stride(0),
                             residual.data<T>(), residual.stride(0), weight.data<W>(), eps))
    return;
  fused_add_rms_norm_kernel<T, W><<<static_cast<unsigned>(n), kThreads, 0, stream()>>>(
      x.data<T>(), x.stride(0), residual.data<T>(), residual.stride(0), weight.data<W>(), static_cast<int>(x.size(1)),
      eps);
  check_launch("fused_add_rms_norm_kernel");
}

// The quantizing forms (residual: nullptr for rms_norm_quant): vectorised where the row fits, else the scalar passes.
template <typename T, typename W, typename Q, bool kResidual>
void launch_quant(Tensor& out, Tensor& scales, const Tensor& x, T* residual, int64_t res_stride, const Tensor& weight,
                  float eps) {
  const int64_t n = x.size(0), d = x.size(1);
  if (n == 0) return;
  const int groups = static_cast<int>(scales.size(1));
  if (launch_vec<T, W, kResidual, Q>(n, d, out.data<Q>(), out.stride(0), scales.data<float>(), groups, x.data<T>(),
                                     x.stride(0), residual, res_stride, weight.data<W>(), eps))
    return;
  rms_norm_quant_kernel<T, W, Q, kResidual><<<static_cast<unsigned>(n), kThreads, 0, stream()>>>(
      out.data<Q>(), scales.data<float>(), groups, x.data<T>(), x.stride(0), residual, res_stride, weight.data<W>(),
      static_cast<int>(d), eps);
  check_launch("rms_norm_quant_kernel");
}

template <bool kResidual>
void dispatch_norm_quant(const char* op, Tensor& out, Tensor& scales, const Tensor& x, Tensor* residual,
                         const Tensor& weight, float eps) {
  dispatch_float(x.dtype(), op, [&](auto t) {
    dispatch_float(weight.dtype(), op, [&](auto w) {
      dispatch_quant(out.dtype(), [&](auto q) {
        using T = decltype(t);
        T* res = kResidual ? residual->data<T>() : nullptr;
        const int64_t res_stride = kResidual ? residual->stride(0) : 0;
        launch_quant<T, decltype(w), decltype(q), kResidual>(out, scales, x, res, res_stride, weight, eps);
      });
    });
  });
}

}  // namespace

void rms_norm_quant(Tensor& out, Tensor& scales, const Tensor& x, const Tensor& weight, float eps) {
  dispatch_norm_quant<false>("rms_norm_quant", out, scales, x, nullptr, weight, eps);
}

void fused_add_rms_norm_quant(Tensor& out, Tensor& scales, const Tensor& x, Tensor& residual, const Tensor& weight,
                              float eps) {
  dispatch_norm_quant<true>("fused_add_rms_norm_quant", out, scales, x, &residual, weight, eps);
}

void rms_norm(Tensor& out, const Tensor& x, const Tensor& weight, float eps) {
  dispatch_float(x.dtype(), "rms_norm", [&](auto t) {
    dispatch_float(weight.dtype(), "rms_norm",
                   [&](auto w) { launch_rms_norm<decltype(t), decltype(w)>(out, x, weight, eps); });
  });
}

void fused_add_rms_norm(Tensor& x, Tensor& residual, const Tensor& weight, float eps) {
  dispatch_float(x.dtype(), "fused_add_rms_norm", [&](auto t) {
    dispatch_float(weight.dtype(), "fused_add_rms_norm",
                   [&](auto w) { launch_fused<decltype(t), decltype(w)>(x, residual, weight, eps); });
  });
}

// One rms_norm_vec_kernel reading the combine (MoeCombineIn) where the unfused pair would run moe_combine's and
// fused_add_rms_norm's vectorised kernels (the same sums in the same order, so the same bits), else the two ops.
void moe_combine_add_rms_norm(Tensor& x, Tensor& residual, const Tensor& expert_out, const Tensor& topk_weights,
                              const Tensor& pair_rows, const Tensor* shared_out, const Tensor* shared_gate,
                              const Tensor& weight, float eps) {
  const int64_t n = x.size(0), d = x.size(1), chunks = d / 8;
  if (n == 0) return;
  const bool fits = d % 8 == 0 && chunks > 32 && chunks <= kVecMaxThreads * kVecMaxChunks && x.stride(0) % 8 == 0 &&
                    residual.stride(0) % 8 == 0 && expert_out.stride(0) % 8 == 0 && aligned16(x.raw_data()) &&
                    aligned16(residual.raw_data()) && aligned16(expert_out.raw_data()) &&
                    aligned16(weight.raw_data()) &&
                    (shared_out == nullptr || (shared_out->stride(0) % 8 == 0 && aligned16(shared_out->raw_data())));
  if (!fits) {
    ops::moe_combine(x, expert_out, topk_weights, pair_rows, shared_out, shared_gate);
    ops::fused_add_rms_norm(x, residual, weight, eps);
    return;
  }
  dispatch_float(x.dtype(), "moe_combine_add_rms_norm", [&](auto t) {
    dispatch_float(weight.dtype(), "moe_combine_add_rms_norm", [&](auto w) {
      using T = decltype(t);
      using W = decltype(w);
      const MoeCombineIn<T> in{expert_out.data<T>(),
                               expert_out.stride(0),
                               topk_weights.data<float>(),
                               topk_weights.stride(0),
                               pair_rows.data<int32_t>(),
                               static_cast<int>(topk_weights.size(1)),
                               shared_out != nullptr ? shared_out->data<T>() : nullptr,
                               shared_out != nullptr ? shared_out->stride(0) : 0,
                               shared_gate != nullptr ? shared_gate->data<T>() : nullptr,
                               shared_gate != nullptr ? shared_gate->stride(0) : 0};
      launch_vec_rows<T, W, true, void>(n, d, x.data<T>(), x.stride(0), nullptr, 1, in, residual.data<T>(),
                                        residual.stride(0), weight.data<W>(), eps);
    });
  });
}

void register_norm_kernels() {
  ops::rms_norm.register_kernel(DeviceType::kCUDA, rms_norm);
  ops::fused_add_rms_norm.register_kernel(DeviceType::kCUDA, fused_add_rms_norm);
  ops::rms_norm_quant.register_kernel(DeviceType::kCUDA, rms_norm_quant);
  ops::fused_add_rms_norm_quant.register_kernel(DeviceType::kCUDA, fused_add_rms_norm_quant);
  ops::moe_combine_add_rms_norm.register_kernel(DeviceType::kCUDA, moe_combine_add_rms_norm);
}

}  // namespace llmserve::cuda

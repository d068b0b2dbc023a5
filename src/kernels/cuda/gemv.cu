// ops::linear for single-token products (m = kMaxGemvRows = 1) with 16-bit operands: a weight-streaming GEMV
// (bench/RESULTS.md: faster than cuBLASLt at m = 1 on the S and Mistral-7B shapes, slower at m = 4). Each output
// column j (a weight row) is owned by `splits` warps of one block that stream interleaved 16-byte pieces of the row,
// several in flight, and dot them with every x row (x stays in L1/L2); f32 accumulation, warp-shuffle then shared
// memory reduction, bias added in f32 before the one rounding to out's dtype. Narrow products with long rows (the
// Mistral-7B down: 4096 rows of 14336) split each row over more warps so the GPU has enough loads in flight.
// Launched with programmatic dependent launch: the first weight loads overlap the previous kernel. Memory-bound by
// design: its floor is weight bytes / bandwidth. The weight must not be written by the kernel launched just before.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemv_common.cuh"

namespace llmserve::cuda {
namespace {

constexpr int kWarpsPerBlock = kGemvWarpsPerBlock;
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane

template <typename T>
__device__ __forceinline__ void word_to_floats(const uint4& w, float (&f)[8]) {
  load8(reinterpret_cast<const T*>(&w), f);
}

template <typename T, int M>
__device__ __forceinline__ void dot_word(const uint4& w, const T* x, int64_t x_stride, int64_t word, float (&acc)[M]) {
  float wf[8];
  word_to_floats<T>(w, wf);
#pragma unroll
  for (int r = 0; r < M; ++r) {
    float xf[8];
    word_to_floats<T>(__ldg(reinterpret_cast<const uint4*>(x + r * x_stride) + word), xf);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[r] = fmaf(wf[e], xf[e], acc[r]);
  }
}

template <typename T, typename O, typename B, int M>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    gemv_kernel(O* out, int64_t out_stride, const T* x, int64_t x_stride, const T* weight, const B* bias, int64_t n,
                int64_t k, int splits) {
  __shared__ float partial[kWarpsPerBlock][M];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int cols_per_block = kWarpsPerBlock / splits, part = warp % splits;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * cols_per_block + warp / splits;
  float acc[M];
#pragma unroll
  for (int r = 0; r < M; ++r) acc[r] = 0.f;
  const uint4* w = reinterpret_cast<const uint4*>(weight + j * k);
  const int64_t k8 = k / 8;  // 16-byte words per row
  const int64_t step = 32 * splits;
  int64_t i = part * 32 + lane;
  // The first round of weight loads goes out before pdl_wait: the weight is constant, so it streams while the
  // kernel producing x finishes. No early return: the whole block meets at the barrier below.
  const bool first_round = j < n && i + step * (kUnroll - 1) < k8;
  uint4 wv[kUnroll];
  if (first_round) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = load_stream(w + i + step * u);
  }
  pdl_wait();
  if (first_round) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dot_word<T, M>(wv[u], x, x_stride, i + step * u, acc);
    i += step * kUnroll;
  }
  if (j < n) {
    for (; i + step * (kUnroll - 1) < k8; i += step * kUnroll) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) wv[u] = load_stream(w + i + step * u);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) dot_word<T, M>(wv[u], x, x_stride, i + step * u, acc);
    }
    for (; i < k8; i += step) dot_word<T, M>(load_stream(w + i), x, x_stride, i, acc);
  }
  pdl_trigger();
#pragma unroll
  for (int r = 0; r < M; ++r) {
    for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
    if (lane == 0) partial[warp][r] = acc[r];
  }
  if (splits > 1) __syncthreads();
  if (lane != 0 || part != 0 || j >= n) return;
#pragma unroll
  for (int r = 0; r < M; ++r) {
    float v = 0.f;
    for (int p = 0; p < splits; ++p) v += partial[warp + p][r];
    if (bias != nullptr) v += load_f(bias + j);
    store_f(out + r * out_stride + j, v);
  }
}

// Warps per column (gemv_common.cuh): a round is kUnroll 16-byte loads of each of the warp's 32 lanes. A split warp
// keeps at least two rounds, so that it loads its second round while it multiplies its first: with one round per warp
// (the S model's 2048-column qkv and o_proj at 2 warps, its down at 4) the GEMVs measured 5-10% slower and S b1
// decode 1.3% slower (bench/RESULTS.md, ninth session).
int choose_splits(int64_t n, int64_t k) { return choose_gemv_splits(n, k / 8 / (int64_t{32} * kUnroll) / 2); }

template <typename T, typename O, typename B>
void launch(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor* bias) {
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  const B* b = bias != nullptr ? bias->data<B>() : nullptr;
  const int splits = choose_splits(n, k);
  const unsigned grid = ceil_div(n, kWarpsPerBlock / splits);
  const int threads = kWarpsPerBlock * 32;
  O* o = out.data<O>();
  const T* xp = x.data<T>();
  const T* w = weight.data<T>();
  CHECK_LE(m, kMaxGemvRows) << "gemv: m " << m;  // rows 2..4 compile, but cuBLASLt measured faster there
  launch_pdl("gemv_kernel", gemv_kernel<T, O, B, 1>, grid, threads, o, out.stride(0), xp, x.stride(0), w, b, n, k,
             splits);
}

}  // namespace

bool gemv_applies(const Tensor& out, const Tensor& x, const Tensor& weight) {
  const int64_t m = x.size(0), k = x.size(1);
  return m >= 1 && m <= kMaxGemvRows && (x.dtype() == DType::kBF16 || x.dtype() == DType::kF16) && k % 8 == 0 &&
         x.stride(0) % 8 == 0 && aligned16(x.raw_data()) && aligned16(weight.raw_data()) && out.numel() > 0;
}

void gemv(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor* bias) {
  // Bias: f32, or out's dtype (so a 16-bit bias only with a 16-bit out).
  const bool f32_bias = bias == nullptr || bias->dtype() == DType::kF32;
  const bool f32_out = out.dtype() == DType::kF32;
  if (x.dtype() == DType::kBF16) {
    using T = __nv_bfloat16;
    if (f32_out) return launch<T, float, float>(out, x, weight, bias);
    return f32_bias ? launch<T, T, float>(out, x, weight, bias) : launch<T, T, T>(out, x, weight, bias);
  }
  using T = __half;
  if (f32_out) return launch<T, float, float>(out, x, weight, bias);
  f32_bias ? launch<T, T, float>(out, x, weight, bias) : launch<T, T, T>(out, x, weight, bias);
}

}  // namespace llmserve::cuda

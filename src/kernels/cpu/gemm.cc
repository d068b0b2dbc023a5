// `linear` on CPU: out[m, n] = x[m, k] @ W[n, k]^T (+ bias). Primary backend: oneDNN matmul (chosen by
// measurement, bench/RESULTS.md); bf16 weights are the fast form (AMX / AVX512-BF16), f32 weights the exact one.
// Fallback (no oneDNN kernel, or LLMSERVE_GEMM=openblas): OpenBLAS sgemm, with bf16 weights widened blockwise.
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu/vec.h"

namespace llmserve::cpu {
namespace {

// Rows of x up to which bf16 weights go through the GEMV (memory-bound: reads bf16 directly).
constexpr int64_t kBf16GemvMaxRows = 4;
// Elements of W widened per sgemm call on the bf16 path (4 MiB of f32).
constexpr int64_t kBf16BlockElems = int64_t{1} << 20;

GemmBackend backend_from_env() {
  const char* env = std::getenv("LLMSERVE_GEMM");
  if (env != nullptr && std::strcmp(env, "openblas") == 0) return GemmBackend::kOpenblas;
  if (env != nullptr && std::strcmp(env, "onednn-omp") == 0) return GemmBackend::kOnednnOmp;
  return GemmBackend::kOnednn;
}

std::atomic<GemmBackend>& backend() {
  static std::atomic<GemmBackend> value{backend_from_env()};
  return value;
}

// out[i, :] += bias for every row (after a matmul that wrote out without it).
void add_bias(Tensor& out, const Tensor& bias, int64_t m, int64_t n) {
  std::vector<float> widened;
  const float* b = bias.data<float>();
  if (bias.dtype() == DType::kBF16) {
    widened.resize(static_cast<size_t>(n));
    bf16_to_f32_n(bias.data<bf16_t>(), widened.data(), n);
    b = widened.data();
  }
  for (int64_t i = 0; i < m; ++i) axpy_f32(1.0f, b, row_ptr<float>(out, i), n);
}

// OpenBLAS keeps its own threads; match the global pool's size (LLMSERVE_NUM_THREADS) whenever it changes.
void sync_blas_threads() {
  static std::atomic<int> configured{-1};
  const int want = ThreadPool::global().num_threads();
  if (configured.exchange(want) != want) openblas_set_num_threads(want);
}

// out[i, :] = bias (or 0): the sgemm then accumulates into it with beta = 1.
void init_rows(Tensor& out, const Tensor* bias, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i) {
    float* o = row_ptr<float>(out, i);
    if (bias == nullptr) {
      std::fill(o, o + n, 0.f);
    } else if (bias->dtype() == DType::kBF16) {
      bf16_to_f32_n(bias->data<bf16_t>(), o, n);
    } else {
      std::copy(bias->data<float>(), bias->data<float>() + n, o);
    }
  }
}

void linear_bf16_gemv(Tensor& out, const Tensor& x, const Tensor& weight, int64_t m, int64_t n, int64_t k) {
  const bf16_t* w = weight.data<bf16_t>();
  parallel_for(n, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, k)), [&](int64_t begin, int64_t end) {
    for (int64_t i = 0; i < m; ++i) {
      const float* xr = row_ptr<float>(x, i);
      float* o = row_ptr<float>(out, i);
      for (int64_t j = begin; j < end; ++j) o[j] += dot_f32_bf16(xr, w + j * k, k);
    }
  });
}

void linear_bf16_blocked(Tensor& out, const Tensor& x, const Tensor& weight, int64_t m, int64_t n, int64_t k) {
  const int64_t rows = std::max<int64_t>(1, std::min(n, kBf16BlockElems / std::max<int64_t>(1, k)));
  std::vector<float> block(static_cast<size_t>(rows * k));
  for (int64_t j0 = 0; j0 < n; j0 += rows) {
    const int64_t nb = std::min(rows, n - j0);
    parallel_for(nb, 16, [&](int64_t begin, int64_t end) {
      bf16_to_f32_n(weight.data<bf16_t>() + (j0 + begin) * k, block.data() + begin * k, (end - begin) * k);
    });
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(nb), static_cast<int>(k),
                1.f, x.data<float>(), static_cast<int>(x.stride(0)), block.data(), static_cast<int>(k), 1.f,
                row_ptr<float>(out, 0) + j0, static_cast<int>(out.stride(0)));
  }
}

}  // namespace

void set_gemm_backend(GemmBackend value) { backend().store(value); }
GemmBackend gemm_backend() { return backend().load(); }

void linear(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor* bias) {
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  if (m == 0 || n == 0) return;
  const GemmBackend b = gemm_backend();
  if (k > 0 && b != GemmBackend::kOpenblas &&
      onednn_linear(out, x, weight, b == GemmBackend::kOnednnOmp ? OnednnThreading::kOpenmp : OnednnThreading::kPool)) {
    if (bias != nullptr) add_bias(out, *bias, m, n);
    return;
  }
  init_rows(out, bias, m, n);
  if (k == 0) return;
  sync_blas_threads();
  if (weight.dtype() == DType::kF32) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                1.f, x.data<float>(), static_cast<int>(x.stride(0)), weight.data<float>(), static_cast<int>(k), 1.f,
                out.data<float>(), static_cast<int>(out.stride(0)));
  } else if (m <= kBf16GemvMaxRows) {
    linear_bf16_gemv(out, x, weight, m, n, k);
  } else {
    linear_bf16_blocked(out, x, weight, m, n, k);
  }
}

void register_gemm_kernels() { ops::linear.register_kernel(DeviceType::kCPU, linear); }

}  // namespace llmserve::cpu

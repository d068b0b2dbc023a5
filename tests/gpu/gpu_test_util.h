// Helpers for the GPU tests: host <-> device copies, NaN-poisoned outputs, row-strided device views, bitwise
// comparison, and the per-dtype tolerance of an output rounded to that dtype. Tests compare CUDA ops with the CPU ops
// or with double-precision references computed here.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../kernels/test_util.h"
#include "core/cuda_stream.h"
#include "core/tensor.h"

namespace llmserve::gpu_testing {

inline bool have_cuda_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// Skips the test on a machine without a GPU.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  }
};

inline void sync_device() {
  const cudaError_t err = cudaDeviceSynchronize();
  CHECK(err == cudaSuccess) << "cudaDeviceSynchronize: " << cudaGetErrorString(err);
}

inline Tensor to_device(const Tensor& host) {
  Tensor c = host.contiguous();
  Tensor dev = Tensor::empty(c.shape(), c.dtype(), Device::cuda());
  if (c.nbytes() > 0) {
    CHECK(cudaMemcpy(dev.raw_data(), c.raw_data(), c.nbytes(), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  return dev;
}

// A contiguous host copy of a (possibly row-strided) device tensor, after every queued kernel has finished.
inline Tensor to_host(const Tensor& dev) {
  sync_device();
  Tensor host = Tensor::empty(dev.shape(), dev.dtype());
  if (dev.numel() == 0) return host;
  const size_t elem = dtype_size(dev.dtype());
  if (dev.is_contiguous()) {
    CHECK(cudaMemcpy(host.raw_data(), dev.raw_data(), dev.nbytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
  } else {  // 2-D row-strided
    CHECK_EQ(dev.dim(), 2);
    const size_t row = static_cast<size_t>(dev.size(1)) * elem;
    CHECK(cudaMemcpy2D(host.raw_data(), row, dev.raw_data(), dev.stride(0) * elem, row, dev.size(0),
                       cudaMemcpyDeviceToHost) == cudaSuccess);
  }
  return host;
}

// A device tensor whose bytes are all 0xff: NaN in f32, f16 and bf16, -1 in integers.
inline Tensor poisoned_device(const Shape& shape, DType dtype) {
  Tensor dev = Tensor::empty(shape, dtype, Device::cuda());
  if (dev.nbytes() > 0) CHECK(cudaMemset(dev.raw_data(), 0xff, dev.nbytes()) == cudaSuccess);
  return dev;
}

// A poisoned [rows, cols] view into a wider [rows, cols + pad] device buffer: rows are (cols + pad) apart.
inline Tensor poisoned_strided(int64_t rows, int64_t cols, int64_t pad, DType dtype) {
  return poisoned_device({rows, cols + pad}, dtype).slice(1, pad, pad + cols);
}

// The same [rows, cols] contents as `host`, on the device as a column slice of a wider buffer (poisoned padding).
inline Tensor to_device_strided(const Tensor& host, int64_t pad) {
  Tensor dev = poisoned_strided(host.size(0), host.size(1), pad, host.dtype());
  const size_t elem = dtype_size(host.dtype());
  const size_t row = static_cast<size_t>(host.size(1)) * elem;
  Tensor c = host.contiguous();
  CHECK(cudaMemcpy2D(dev.raw_data(), dev.stride(0) * elem, c.raw_data(), row, row, host.size(0),
                     cudaMemcpyHostToDevice) == cudaSuccess);
  return dev;
}

// Whether a and b (either on the host or the device) hold the same shape and the same bytes.
inline bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.device().is_cpu() ? a.contiguous() : to_host(a);
  const Tensor hb = b.device().is_cpu() ? b.contiguous() : to_host(b);
  return ha.shape() == hb.shape() && std::memcmp(ha.raw_data(), hb.raw_data(), ha.nbytes()) == 0;
}

// Relative tolerance of a value rounded once to `dtype` (plus a little for f32 math).
inline double rounding_rtol(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return 1.6e-2;  // a few bf16 ulps (2^-8 each)
    case DType::kF16:
      return 2e-3;  // a few f16 ulps (2^-11 each)
    default:
      return 1e-5;
  }
}
inline double rounding_atol(DType dtype) { return dtype == DType::kF32 ? 1e-5 : 1e-3; }

// Benches: mean microseconds per call of f(i) on the current stream over `reps` calls (after one untimed warm-up
// call f(0)); i is the call's index (benches rotate weight copies with it so L2 does not serve them).
inline double mean_call_us(const std::function<void(int)>& f, int reps) {
  f(0);
  sync_device();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, cuda::current_stream());
  for (int i = 0; i < reps; ++i) f(i);
  cudaEventRecord(stop, cuda::current_stream());
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms * 1e3 / reps;
}

inline std::string dtype_str(DType dtype) { return std::string(dtype_name(dtype)); }

}  // namespace llmserve::gpu_testing

// CUDA kernels vs the CPU ops (the reference), llama.cpp test-backend-ops style: random inputs of several shapes,
// every CUDA output poisoned with NaN before the run, tolerances per dtype. Skips when no CUDA device is present.
// f32: |gpu - cpu| <= 1e-5 + 1e-5 |cpu|. bf16: inputs are rounded to bf16 first and the CPU runs on those values
// in f32; the GPU rounds its output (and, in fused_add_rms_norm, the residual) to bf16, so allow a few bf16 ulps:
// |gpu - cpu| <= 1e-3 + 1.6e-2 |cpu|.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "../kernels/test_util.h"
#include "kernels/ops.h"

namespace llmserve {
namespace {

using testing::expect_close;
using testing::random_tensor;
using testing::to_doubles;

bool have_cuda_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

Tensor to_device(const Tensor& host) {
  Tensor c = host.contiguous();
  Tensor dev = Tensor::empty(c.shape(), c.dtype(), Device::cuda());
  CHECK(cudaMemcpy(dev.raw_data(), c.raw_data(), c.nbytes(), cudaMemcpyHostToDevice) == cudaSuccess);
  return dev;
}

Tensor to_host(const Tensor& dev) {
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  Tensor host = Tensor::empty(dev.shape(), dev.dtype());
  CHECK(cudaMemcpy(host.raw_data(), dev.raw_data(), dev.nbytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}

// All-ones bytes are NaN in both f32 and bf16.
Tensor poisoned_device(const Shape& shape, DType dtype) {
  Tensor dev = Tensor::empty(shape, dtype, Device::cuda());
  CHECK(cudaMemset(dev.raw_data(), 0xff, dev.nbytes()) == cudaSuccess);
  return dev;
}

void expect_matches(const Tensor& gpu_host, const Tensor& cpu_ref, DType dtype, const std::string& what) {
  const bool bf16 = dtype == DType::kBF16;
  expect_close(gpu_host, to_doubles(cpu_ref), bf16 ? 1e-3 : 1e-5, bf16 ? 1.6e-2 : 1e-5, what);
}

class CudaKernelsTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  }
};

const std::pair<int64_t, int64_t> kShapes[] = {{1, 16}, {7, 768}, {33, 100}, {4, 5000}, {300, 64}};

std::string label(const char* op, int64_t n, int64_t d, DType x, DType w) {
  return std::string(op) + " [" + std::to_string(n) + ", " + std::to_string(d) + "] x " + std::string(dtype_name(x)) +
         " weight " + std::string(dtype_name(w));
}

TEST_P(CudaKernelsTest, RmsNormMatchesCpu) {
  const DType dtype = GetParam();
  uint32_t seed = 1;
  for (auto [n, d] : kShapes) {
    for (DType wd : {DType::kF32, DType::kBF16}) {
      Tensor x = random_tensor({n, d}, seed++, dtype, -3.f, 3.f);  // rounded to dtype: both sides see the same values
      Tensor w = random_tensor({d}, seed++, wd, 0.5f, 1.5f);
      Tensor ref = Tensor::empty({n, d}, DType::kF32);
      ops::rms_norm(ref, x.to(DType::kF32), w, 1e-5f);
      Tensor x_dev = to_device(x), w_dev = to_device(w), out_dev = poisoned_device({n, d}, dtype);
      ops::rms_norm(out_dev, x_dev, w_dev, 1e-5f);
      expect_matches(to_host(out_dev), ref, dtype, label("rms_norm", n, d, dtype, wd));
      ops::rms_norm(x_dev, x_dev, w_dev, 1e-5f);  // in place
      expect_matches(to_host(x_dev), ref, dtype, label("rms_norm in place", n, d, dtype, wd));
    }
  }
}

TEST_P(CudaKernelsTest, FusedAddRmsNormMatchesCpu) {
  const DType dtype = GetParam();
  uint32_t seed = 100;
  for (auto [n, d] : kShapes) {
    for (DType wd : {DType::kF32, DType::kBF16}) {
      Tensor x = random_tensor({n, d}, seed++, dtype, -2.f, 2.f);
      Tensor res = random_tensor({n, d}, seed++, dtype, -2.f, 2.f);
      Tensor w = random_tensor({d}, seed++, wd, 0.5f, 1.5f);
      Tensor x_ref = x.to(DType::kF32), res_ref = res.to(DType::kF32);
      ops::fused_add_rms_norm(x_ref, res_ref, w, 1e-6f);
      // Poison first, then copy the inputs in: the op must overwrite both tensors in place.
      Tensor x_dev = poisoned_device({n, d}, dtype), res_dev = poisoned_device({n, d}, dtype);
      Tensor x_in = to_device(x), res_in = to_device(res);
      CHECK(cudaMemcpy(x_dev.raw_data(), x_in.raw_data(), x_in.nbytes(), cudaMemcpyDeviceToDevice) == cudaSuccess);
      CHECK(cudaMemcpy(res_dev.raw_data(), res_in.raw_data(), res_in.nbytes(), cudaMemcpyDeviceToDevice) ==
            cudaSuccess);
      Tensor w_dev = to_device(w);
      ops::fused_add_rms_norm(x_dev, res_dev, w_dev, 1e-6f);
      expect_matches(to_host(res_dev), res_ref, dtype, label("fused_add_rms_norm residual", n, d, dtype, wd));
      expect_matches(to_host(x_dev), x_ref, dtype, label("fused_add_rms_norm x", n, d, dtype, wd));
    }
  }
}

TEST_P(CudaKernelsTest, SiluAndMulMatchesCpu) {
  const DType dtype = GetParam();
  uint32_t seed = 200;
  for (auto [n, d] : kShapes) {
    Tensor x = random_tensor({n, 2 * d}, seed++, dtype, -8.f, 8.f);
    Tensor ref = Tensor::empty({n, d}, DType::kF32);
    ops::silu_and_mul(ref, x.to(DType::kF32));
    Tensor x_dev = to_device(x), out_dev = poisoned_device({n, d}, dtype);
    ops::silu_and_mul(out_dev, x_dev);
    expect_matches(to_host(out_dev), ref, dtype, label("silu_and_mul", n, d, dtype, dtype));
  }
}

TEST_P(CudaKernelsTest, ReadsRowStridedRows) {
  // x as a column slice of a wider device buffer: rows are stride 2d apart.
  const DType dtype = GetParam();
  const int64_t n = 9, d = 96;
  Tensor wide = random_tensor({n, 2 * d}, 300, dtype);
  Tensor w = random_tensor({d}, 301, DType::kF32, 0.5f, 1.5f);
  Tensor ref = Tensor::empty({n, d}, DType::kF32);
  ops::rms_norm(ref, wide.slice(1, d, 2 * d).to(DType::kF32), w, 1e-5f);
  Tensor wide_dev = to_device(wide), w_dev = to_device(w), out_dev = poisoned_device({n, d}, dtype);
  ops::rms_norm(out_dev, wide_dev.slice(1, d, 2 * d), w_dev, 1e-5f);
  expect_matches(to_host(out_dev), ref, dtype, "rms_norm strided");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaKernelsTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace llmserve

// CUDA kernels vs the CPU ops (the reference), llama.cpp test-backend-ops style: random inputs of several shapes,
// every CUDA output poisoned with NaN before the run, tolerances per dtype. Skips when no CUDA device is present.
// f32: |gpu - cpu| <= 1e-5 + 1e-5 |cpu|. f16 / bf16: inputs are rounded to the dtype first and the CPU runs on
// those values in f32; the GPU rounds its output (and, in fused_add_rms_norm, the residual) to the dtype, so allow
// a few ulps: |gpu - cpu| <= 1e-3 + rtol |cpu|, rtol 2e-3 (f16) or 1.6e-2 (bf16). This file: normalisation,
// activation, add, embedding, rotary; gemm_gpu_test.cc, logits_gpu_test.cc and sampling_gpu_test.cc the rest.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "gpu_test_util.h"
#include "kernels/ops.h"

namespace llmserve {
namespace {

using testing::expect_close;
using testing::random_tensor;
using testing::to_doubles;

using gpu_testing::have_cuda_device;
using gpu_testing::poisoned_device;
using gpu_testing::to_device;
using gpu_testing::to_host;

void expect_matches(const Tensor& gpu_host, const Tensor& cpu_ref, DType dtype, const std::string& what) {
  expect_close(gpu_host, to_doubles(cpu_ref), gpu_testing::rounding_atol(dtype), gpu_testing::rounding_rtol(dtype),
               what);
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
    for (DType wd : {DType::kF32, DType::kF16, DType::kBF16}) {
      Tensor x = random_tensor({n, d}, seed++, dtype, -3.f, 3.f);  // rounded to dtype: both sides see the same values
      Tensor w = random_tensor({d}, seed++, wd, 0.5f, 1.5f);
      Tensor ref = Tensor::empty({n, d}, DType::kF32);
      ops::rms_norm(ref, x.to(DType::kF32), w.to(DType::kF32), 1e-5f);  // the CPU takes no f16 weight
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
    for (DType wd : {DType::kF32, DType::kF16, DType::kBF16}) {
      Tensor x = random_tensor({n, d}, seed++, dtype, -2.f, 2.f);
      Tensor res = random_tensor({n, d}, seed++, dtype, -2.f, 2.f);
      Tensor w = random_tensor({d}, seed++, wd, 0.5f, 1.5f);
      Tensor x_ref = x.to(DType::kF32), res_ref = res.to(DType::kF32);
      ops::fused_add_rms_norm(x_ref, res_ref, w.to(DType::kF32), 1e-6f);
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

TEST_P(CudaKernelsTest, AddMatchesCpu) {
  const DType dtype = GetParam();
  uint32_t seed = 400;
  for (auto [n, d] : kShapes) {
    Tensor a = random_tensor({n, d}, seed++, dtype, -4.f, 4.f);
    Tensor b = random_tensor({n, d}, seed++, dtype, -4.f, 4.f);
    Tensor ref = a.to(DType::kF32);
    ops::add(ref, b.to(DType::kF32));
    // a row-strided in place, b row-strided too.
    Tensor a_dev = gpu_testing::to_device_strided(a, 3), b_dev = gpu_testing::to_device_strided(b, 5);
    ops::add(a_dev, b_dev);
    expect_matches(to_host(a_dev), ref, dtype, label("add", n, d, dtype, dtype));
  }
}

TEST_P(CudaKernelsTest, EmbeddingMatchesCpu) {
  const DType out_dtype = GetParam();
  uint32_t seed = 500;
  for (auto [vocab, hidden] : {std::pair<int64_t, int64_t>{17, 8}, {1000, 77}, {32768, 512}}) {
    for (DType table_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      Tensor table = random_tensor({vocab, hidden}, seed++, table_dtype, -2.f, 2.f);
      std::vector<int32_t> ids = {0, static_cast<int32_t>(vocab - 1)};
      std::mt19937 rng(seed++);
      for (int i = 0; i < 61; ++i) ids.push_back(static_cast<int32_t>(rng() % vocab));
      const int64_t n = static_cast<int64_t>(ids.size());
      Tensor ids_t = Tensor::from_i32(ids, {n});
      Tensor ref = Tensor::empty({n, hidden}, out_dtype);
      ops::embedding(ref, ids_t, table);  // the CPU converts with the same round-to-nearest-even: exact equality
      Tensor out_dev = gpu_testing::poisoned_strided(n, hidden, 4, out_dtype);
      ops::embedding(out_dev, to_device(ids_t), to_device(table));
      expect_close(to_host(out_dev), to_doubles(ref), 0, 0, label("embedding", vocab, hidden, out_dtype, table_dtype));
    }
  }
}

TEST_P(CudaKernelsTest, RotaryMatchesCpu) {
  const DType dtype = GetParam();
  uint32_t seed = 600;
  struct Case {
    int64_t n, num_heads, num_kv_heads, head_dim;
  };
  for (const Case& c : {Case{1, 4, 2, 64}, Case{13, 8, 8, 16}, Case{37, 32, 8, 128}, Case{300, 6, 1, 32}}) {
    const int64_t q_cols = c.num_heads * c.head_dim, k_cols = c.num_kv_heads * c.head_dim, max_position = 4096;
    // q and k as column slices of one fused [n, q + k + v] buffer, as the model's QKV projection leaves them.
    Tensor qkv = random_tensor({c.n, q_cols + 2 * k_cols}, seed++, dtype, -2.f, 2.f);
    std::vector<float> cache(static_cast<size_t>(max_position * c.head_dim));
    for (int64_t p = 0; p < max_position; ++p) {
      for (int64_t i = 0; i < c.head_dim / 2; ++i) {
        const double angle = p * std::pow(10000.0, -2.0 * i / c.head_dim);
        cache[p * c.head_dim + i] = static_cast<float>(std::cos(angle));
        cache[p * c.head_dim + c.head_dim / 2 + i] = static_cast<float>(std::sin(angle));
      }
    }
    Tensor cache_t = Tensor::from_f32(cache, {max_position, c.head_dim});
    std::vector<int64_t> positions;
    std::mt19937 rng(seed++);
    for (int64_t t = 0; t < c.n; ++t) positions.push_back(t == 0 ? max_position - 1 : rng() % max_position);
    Tensor pos = Tensor::from_i64(positions, {c.n});
    Tensor ref = qkv.to(DType::kF32);
    Tensor q_ref = ref.slice(1, 0, q_cols), k_ref = ref.slice(1, q_cols, q_cols + k_cols);
    ops::rotary_embedding(pos, q_ref, k_ref, c.head_dim, cache_t);
    Tensor qkv_dev = to_device(qkv);
    Tensor q_dev = qkv_dev.slice(1, 0, q_cols), k_dev = qkv_dev.slice(1, q_cols, q_cols + k_cols);
    ops::rotary_embedding(to_device(pos), q_dev, k_dev, c.head_dim, to_device(cache_t));
    // v (the rest of the buffer) must be untouched: compare the whole fused row.
    expect_matches(to_host(qkv_dev), ref, dtype, label("rotary", c.n, c.head_dim, dtype, DType::kF32));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaKernelsTest, ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace llmserve

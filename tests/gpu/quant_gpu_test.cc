// The quantized-GEMM ops on CUDA against the CPU ops (the references): activation quantization bit-exact (same
// IEEE division and rounding), scaled_mm (GEMV for m <= 8, cuBLASLt above; fp8 per-tensor, per-token x per-channel,
// group-128 x block-128; int8 per-token x per-channel), each case also through the fallbacks forced by
// LLMSERVE_SCALED_MM_FORCE_FALLBACK (1: unit-scaled cuBLASLt GEMMs + epilogues, 2: the tiled kernel; the op logs the
// path each mode took once), plus shapes cuBLASLt has no algorithm for (k % 16 != 0, odd n), and w4a16_linear (GEMV for
// m <= 16, dequantize + cuBLASLt above; with and without the act-order permutation), m from 1 to 8192 with odd m,
// NaN-poisoned outputs. Tolerance: the output's dtype rounding plus f32 accumulation-order error (2e-6 of sum |a b|).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "core/logging.h"
#include "gpu_test_util.h"
#include "kernels/ops.h"

namespace llmserve {
namespace {

using gpu_testing::poisoned_device;
using gpu_testing::to_device;
using gpu_testing::to_host;
using testing::random_tensor;
using testing::to_doubles;

class CudaQuantTest : public gpu_testing::GpuTest {};

// |gpu - cpu| <= rtol(bf16) |cpu| + 1e-3 + 2e-3 * magnitude, elementwise (magnitude: sum of |products|). 2e-3 ~ 2^-9:
// the tensor-core paths round every product's operand to bf16 (W4A16 above m = 16 dequantizes to bf16) or keep
// ~14-bit partial sums (Hopper's FP8 MMA); on an H200 they differed from the f32 reference by up to 0.026 on
// cancelling sums (2026-11-26) while a wrong scale, zero or permutation is off by the order of the magnitude itself.
void expect_close_to(const Tensor& gpu, const Tensor& cpu, const std::vector<double>& magnitude,
                     const std::string& what) {
  const std::vector<double> g = to_doubles(gpu), c = to_doubles(cpu);
  ASSERT_EQ(g.size(), c.size());
  int64_t bad = 0;
  size_t worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double tol = 1.6e-2 * std::abs(c[i]) + 1e-3 + 2e-3 * magnitude[i];
    if (!(std::abs(g[i] - c[i]) <= tol)) {
      if (bad++ == 0) worst = i;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": first bad element " << worst << ": gpu " << g[worst] << ", cpu " << c[worst];
}

std::vector<double> magnitudes(const Tensor& a_deq, const Tensor& b_deq) {  // sum_k |a[i,k] b[j,k]|, f32 inputs
  const int64_t m = a_deq.size(0), n = b_deq.size(0), k = a_deq.size(1);
  std::vector<double> mag(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t c = 0; c < k; ++c)
        s += std::abs(double(a_deq.data<float>()[i * k + c]) * b_deq.data<float>()[j * k + c]);
      mag[i * n + j] = s;
    }
  }
  return mag;
}

Tensor abs_dequantized(const Tensor& q) {  // |values| of a quantized tensor as f32 (for the magnitude bound)
  Tensor f = Tensor::empty(q.shape(), DType::kF32);
  for (int64_t i = 0; i < q.numel(); ++i) {
    f.data<float>()[i] =
        std::abs(q.dtype() == DType::kFP8E4M3 ? fp8_e4m3_to_f32(q.data<fp8_e4m3_t>()[i]) : float(q.data<int8_t>()[i]));
  }
  return f;
}

TEST_F(CudaQuantTest, DynamicQuantizeIsBitExact) {
  uint32_t seed = 1;
  for (DType qtype : {DType::kFP8E4M3, DType::kI8}) {
    for (auto [m, k, groups] : {std::tuple<int64_t, int64_t, int64_t>{1, 128, 1},
                                {7, 4096, 1},
                                {33, 384, 3},
                                {4097, 512, 4},
                                {3, 7168, 56}}) {
      Tensor x = random_tensor({m, k}, seed++, DType::kBF16, -6.f, 6.f);
      Tensor q_cpu = Tensor::empty({m, k}, qtype), s_cpu = Tensor::empty({m, groups}, DType::kF32);
      ops::dynamic_scaled_quantize(q_cpu, s_cpu, x.to(DType::kF32));
      Tensor q_dev = poisoned_device({m, k}, qtype), s_dev = poisoned_device({m, groups}, DType::kF32);
      ops::dynamic_scaled_quantize(q_dev, s_dev, to_device(x));
      Tensor q = to_host(q_dev), s = to_host(s_dev);
      EXPECT_EQ(std::memcmp(s.raw_data(), s_cpu.raw_data(), s.nbytes()), 0) << "scales m " << m << " k " << k;
      EXPECT_EQ(std::memcmp(q.raw_data(), q_cpu.raw_data(), q.nbytes()), 0) << "values m " << m << " k " << k;
    }
    Tensor x = random_tensor({5, 256}, seed++, DType::kBF16, -6.f, 6.f);
    Tensor scale = Tensor::from_f32({0.01f}, {1});
    Tensor q_cpu = Tensor::empty({5, 256}, qtype);
    ops::static_scaled_quantize(q_cpu, x.to(DType::kF32), scale);
    Tensor q_dev = poisoned_device({5, 256}, qtype);
    ops::static_scaled_quantize(q_dev, to_device(x), to_device(scale));
    EXPECT_EQ(std::memcmp(to_host(q_dev).raw_data(), q_cpu.raw_data(), q_cpu.nbytes()), 0) << "static";
  }
}

enum class Mode { kTensor, kTokenChannel, kGroupBlock, kTensorChannel };

void run_scaled_mm(DType qtype, Mode mode, int64_t m, int64_t n, int64_t k, uint32_t seed) {
  Tensor af = random_tensor({m, k}, seed, DType::kF32, -4.f, 4.f), bf = random_tensor({n, k}, seed + 1, DType::kF32);
  const int64_t a_groups = mode == Mode::kGroupBlock ? k / 128 : 1;
  Tensor a = Tensor::empty({m, k}, qtype), sa = Tensor::empty({m, a_groups}, DType::kF32);
  ops::dynamic_scaled_quantize(a, sa, af);
  Tensor b = Tensor::empty({n, k}, qtype), sb_rows = Tensor::empty({n, 1}, DType::kF32);
  ops::dynamic_scaled_quantize(b, sb_rows, bf);
  Tensor sb = sb_rows.view({n});
  if (mode == Mode::kTensor || mode == Mode::kTensorChannel) {  // static activations (x per-tensor / per-channel)
    sa = Tensor::from_f32({0.02f}, {1});
    if (mode == Mode::kTensor) sb = Tensor::from_f32({0.003f}, {1});
  } else if (mode == Mode::kGroupBlock) {
    sb = random_tensor({(n + 127) / 128, k / 128}, seed + 2, DType::kF32, 0.001f, 0.01f);
  }
  Tensor bias = random_tensor({n}, seed + 3);
  Tensor out_cpu = Tensor::empty({m, n}, DType::kF32);
  ops::scaled_mm(out_cpu, a, sa, b, sb, &bias);
  // Magnitude bound from unscaled |a||b| times the largest scales (a loose but sound accumulation bound).
  double max_sa = 0, max_sb = 0;
  for (int64_t i = 0; i < sa.numel(); ++i) max_sa = std::max<double>(max_sa, sa.data<float>()[i]);
  for (int64_t i = 0; i < sb.numel(); ++i) max_sb = std::max<double>(max_sb, sb.data<float>()[i]);
  std::vector<double> mag = magnitudes(abs_dequantized(a), abs_dequantized(b));
  for (double& v : mag) v *= max_sa * max_sb;
  const Tensor a_dev = to_device(a), sa_dev = to_device(sa), b_dev = to_device(b), sb_dev = to_device(sb);
  const Tensor bias_dev = to_device(bias);
  for (const char* force : {"0", "1", "2"}) {  // fast paths, then the epilogue fallbacks, then the tiled kernel
    ASSERT_EQ(setenv("LLMSERVE_SCALED_MM_FORCE_FALLBACK", force, 1), 0);
    Tensor out_dev = poisoned_device({m, n}, DType::kBF16);
    ops::scaled_mm(out_dev, a_dev, sa_dev, b_dev, sb_dev, &bias_dev);
    expect_close_to(to_host(out_dev), out_cpu, mag,
                    std::string(dtype_name(qtype)) + " mode " + std::to_string(int(mode)) + " m " + std::to_string(m) +
                        " n " + std::to_string(n) + " k " + std::to_string(k) + " forced fallback " + force);
  }
  ASSERT_EQ(unsetenv("LLMSERVE_SCALED_MM_FORCE_FALLBACK"), 0);
}

TEST_F(CudaQuantTest, ScaledMMMatchesCpu) {
  const LogLevel level = min_log_level();
  set_min_log_level(LogLevel::kInfo);  // the op logs once which path each mode took on this machine
  uint32_t seed = 100;
  for (int64_t m : {1, 3, 8, 9, 16, 17, 255, 2048, 8192}) {  // <= 8: the GEMV; above: cuBLASLt
    run_scaled_mm(DType::kFP8E4M3, Mode::kTokenChannel, m, 384, 512, seed += 10);
    run_scaled_mm(DType::kFP8E4M3, Mode::kTensor, m, 256, 256, seed += 10);
    run_scaled_mm(DType::kFP8E4M3, Mode::kGroupBlock, m, 384, 512, seed += 10);
    run_scaled_mm(DType::kFP8E4M3, Mode::kTensorChannel, m, 256, 512, seed += 10);
    run_scaled_mm(DType::kI8, Mode::kTokenChannel, m, 384, 512, seed += 10);
  }
  // Shapes without a cuBLASLt algorithm (k % 16 != 0, n % 8 != 0) and partial 128-blocks of n: never an abort.
  for (int64_t m : {5, 33}) {
    run_scaled_mm(DType::kFP8E4M3, Mode::kTokenChannel, m, 100, 200, seed += 10);
    run_scaled_mm(DType::kFP8E4M3, Mode::kTensor, m, 100, 200, seed += 10);
    run_scaled_mm(DType::kFP8E4M3, Mode::kTensorChannel, m, 100, 200, seed += 10);
    run_scaled_mm(DType::kI8, Mode::kTokenChannel, m, 100, 200, seed += 10);
    run_scaled_mm(DType::kFP8E4M3, Mode::kGroupBlock, m, 200, 384, seed += 10);
  }
  set_min_log_level(level);
}

void run_w4a16(int64_t m, int64_t n, int64_t k, int64_t groups, bool permuted, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor x = random_tensor({m, k}, seed, DType::kBF16);
  Tensor qweight = Tensor::empty({n, k / 2}, DType::kU8);
  for (int64_t i = 0; i < qweight.numel(); ++i) qweight.data<uint8_t>()[i] = static_cast<uint8_t>(rng() & 0xff);
  Tensor scales = random_tensor({n, groups}, seed + 1, DType::kF32, 0.005f, 0.05f);
  Tensor zeros = Tensor::empty({n, groups}, DType::kU8);
  for (int64_t i = 0; i < zeros.numel(); ++i) zeros.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 17);
  std::vector<int32_t> p(k);
  std::iota(p.begin(), p.end(), 0);
  if (permuted) std::shuffle(p.begin(), p.end(), rng);
  Tensor perm = Tensor::from_i32(p, {k});
  Tensor bias = random_tensor({n}, seed + 2);
  Tensor out_cpu = Tensor::empty({m, n}, DType::kF32);
  ops::w4a16_linear(out_cpu, x.to(DType::kF32), qweight, scales, zeros, permuted ? &perm : nullptr, &bias);
  Tensor perm_dev = to_device(perm), bias_dev = to_device(bias);
  Tensor out_dev = poisoned_device({m, n}, DType::kBF16);
  ops::w4a16_linear(out_dev, to_device(x), to_device(qweight), to_device(scales), to_device(zeros),
                    permuted ? &perm_dev : nullptr, &bias_dev);
  std::vector<double> mag(m * n, 16.0 * 0.05 * k);  // |x| <= 1, |w| <= 16 * max scale
  expect_close_to(to_host(out_dev), out_cpu, mag,
                  "w4a16 m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) +
                      (permuted ? " permuted" : ""));
}

TEST_F(CudaQuantTest, W4A16MatchesCpu) {
  uint32_t seed = 1000;
  for (int64_t m : {1, 2, 3, 8, 13, 16, 17, 300, 8192}) {
    for (bool permuted : {false, true}) {
      run_w4a16(m, 264, 512, 4, permuted, seed += 10);  // group 128
      run_w4a16(m, 96, 384, 1, permuted, seed += 10);   // per channel
    }
  }
}

}  // namespace
}  // namespace llmserve

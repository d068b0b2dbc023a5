// The fused per-token quantizing ops on CUDA (rms_norm_quant, fused_add_rms_norm_quant, silu_and_mul_quant; part of
// quant_gpu_test): bit-identical to the unfused CUDA pair (the op, then dynamic_scaled_quantize) in f32, f16 and bf16,
// per token and per group (128 columns; other sizes in the scalar kernels), on the vectorised kernels and the scalar
// fallbacks (odd widths, rows too wide for registers, row-strided inputs), zero rows, NaN-poisoned outputs; and against
// the CPU ops within one quantization step (the CPU normalises in f32 with another summation order and an exact
// 1 / sqrt; CUDA's rsqrtf and, in 16-bit, the rounding of the normed row to the activation dtype move a value across
// a rounding boundary at most once; two steps for int8 after the bf16 residual form, which rounds twice).
// `quant_gpu_test --bench` prints run_fused_quant_bench's table.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/ops.h"

namespace llmserve {
namespace {

using gpu_testing::poisoned_device;
using gpu_testing::poisoned_strided;
using gpu_testing::same_bytes;
using gpu_testing::to_device;
using gpu_testing::to_device_strided;
using gpu_testing::to_host;
using testing::random_tensor;

class CudaFusedQuantTest : public gpu_testing::GpuTest {};

struct DeviceQuantized {
  Tensor q, scales;
};
DeviceQuantized poisoned_quantized(int64_t n, int64_t d, DType qtype, int64_t groups) {
  return {poisoned_device({n, d}, qtype), poisoned_device({n, groups}, DType::kF32)};
}

// Per token (1) and, where 128 divides d, DeepSeek's groups of 128 columns (the registers' group kernels; other
// group sizes: the scalar kernels' warp per group, at 100 / 1000 columns: 50 / 8 groups).
std::vector<int64_t> group_counts(int64_t d) {
  if (d % 128 == 0 && d > 128) return {1, d / 128};
  if (d == 100 || d == 1000) return {1, d == 100 ? 50 : 8};
  return {1};
}

void expect_same(const DeviceQuantized& fused, const DeviceQuantized& unfused, const std::string& what) {
  EXPECT_TRUE(same_bytes(fused.scales, unfused.scales)) << what << ": scales";
  EXPECT_TRUE(same_bytes(fused.q, unfused.q)) << what << ": quantized values";
}

// The unfused pair's second op on the device: dynamic_scaled_quantize of y (groups per row).
DeviceQuantized quantize(const Tensor& y, DType qtype, int64_t groups) {
  DeviceQuantized r = poisoned_quantized(y.size(0), y.size(1), qtype, groups);
  ops::dynamic_scaled_quantize(r.q, r.scales, y);
  return r;
}

// A quantized value's position among its dtype's values in order (adjacent values differ by one): int8 itself; fp8
// sign-magnitude bits as a signed index.
int ordinal(const Tensor& q, int64_t i) {
  if (q.dtype() == DType::kI8) return q.data<int8_t>()[i];
  const uint8_t bits = static_cast<const uint8_t*>(q.raw_data())[i];
  return (bits & 0x80) ? -(bits & 0x7f) : (bits & 0x7f);
}

// CUDA vs the CPU op: scales within 2^-7 relative (16-bit rounding of the amax element; f32: rsqrtf's error), values
// at most max_steps quantization steps apart (one, or two where two 16-bit roundings precede an int8 quantization).
void expect_within_steps(const DeviceQuantized& gpu, const Tensor& cpu_q, const Tensor& cpu_scales,
                         const std::string& what, int max_steps = 1) {
  const Tensor q = to_host(gpu.q), s = to_host(gpu.scales);
  for (int64_t i = 0; i < s.numel(); ++i) {
    const float a = s.data<float>()[i], b = cpu_scales.data<float>()[i];
    ASSERT_LE(std::fabs(a - b), b / 128) << what << ": scale of row " << i << " gpu " << a << " cpu " << b;
  }
  int64_t worst = 0;
  for (int64_t i = 0; i < q.numel(); ++i) {
    worst = std::max<int64_t>(worst, std::abs(ordinal(q, i) - ordinal(cpu_q, i)));
  }
  EXPECT_LE(worst, max_steps) << what << ": quantized values more than " << max_steps << " step(s) apart";
}

std::string describe(const char* op, DType t, DType q, int64_t n, int64_t d, int64_t pad, int64_t groups) {
  return std::string(op) + " " + gpu_testing::dtype_str(t) + " -> " + gpu_testing::dtype_str(q) + " n " +
         std::to_string(n) + " d " + std::to_string(d) + " pad " + std::to_string(pad) + " groups " +
         std::to_string(groups);
}

// x on the device: contiguous (pad 0) or a column slice of wider rows (pad columns; 8: still 16-byte aligned rows,
// 3: the scalar kernels).
Tensor device_rows(const Tensor& host, int64_t pad) {
  return pad == 0 ? to_device(host) : to_device_strided(host, pad);
}

struct NormCase {
  int64_t n, d, pad;
};
// Vectorised (d % 8, rows up to 8192 wide), unaligned and odd rows (scalar), rows past 8192 (scalar), zero rows.
const NormCase kNormCases[] = {{1, 4096, 0}, {32, 4096, 0}, {257, 4096, 8}, {5, 5120, 0}, {3, 8192, 0},
                               {4, 4096, 3}, {6, 100, 0},   {2, 10000, 0},  {0, 4096, 0}};

TEST_F(CudaFusedQuantTest, RmsNormQuantIsBitIdenticalToTheUnfusedPair) {
  uint32_t seed = 1;
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (DType qtype : {DType::kFP8E4M3, DType::kI8}) {
      for (const NormCase& c : kNormCases) {
        for (int64_t groups : group_counts(c.d)) {
          const std::string what = describe("rms_norm_quant", t, qtype, c.n, c.d, c.pad, groups);
          const Tensor x_host = random_tensor({c.n, c.d}, seed++, t, -4.f, 4.f);
          const Tensor w = to_device(random_tensor({c.d}, seed++, DType::kF32, -2.f, 2.f));
          const Tensor x = device_rows(x_host, c.pad);
          Tensor y = poisoned_device({c.n, c.d}, t);
          ops::rms_norm(y, x, w, 1e-5f);
          DeviceQuantized fused = poisoned_quantized(c.n, c.d, qtype, groups);
          ops::rms_norm_quant(fused.q, fused.scales, x, w, 1e-5f);
          expect_same(fused, quantize(y, qtype, groups), what);
          if (t == DType::kF16 || c.n == 0) continue;
          Tensor q_cpu = Tensor::empty({c.n, c.d}, qtype), s_cpu = Tensor::empty({c.n, groups}, DType::kF32);
          ops::rms_norm_quant(q_cpu, s_cpu, x_host.to(DType::kF32), to_host(w), 1e-5f);
          expect_within_steps(fused, q_cpu, s_cpu, what + " vs cpu");
        }
      }
    }
  }
}

TEST_F(CudaFusedQuantTest, FusedAddRmsNormQuantIsBitIdenticalToTheUnfusedPair) {
  uint32_t seed = 100;
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (DType qtype : {DType::kFP8E4M3, DType::kI8}) {
      for (const NormCase& c : kNormCases) {
        const int64_t groups = group_counts(c.d).back();
        const std::string what = describe("fused_add_rms_norm_quant", t, qtype, c.n, c.d, c.pad, groups);
        const Tensor x_host = random_tensor({c.n, c.d}, seed++, t, -3.f, 3.f);
        const Tensor r_host = random_tensor({c.n, c.d}, seed++, t, -3.f, 3.f);
        const Tensor w = to_device(random_tensor({c.d}, seed++, DType::kBF16, -2.f, 2.f));
        Tensor x_ref = device_rows(x_host, c.pad), r_ref = device_rows(r_host, c.pad);
        ops::fused_add_rms_norm(x_ref, r_ref, w, 1e-6f);
        // contiguous, as the model's
        const DeviceQuantized unfused = quantize(to_device(to_host(x_ref)), qtype, groups);
        const Tensor x = device_rows(x_host, c.pad);
        Tensor r = device_rows(r_host, c.pad);
        DeviceQuantized fused = poisoned_quantized(c.n, c.d, qtype, groups);
        ops::fused_add_rms_norm_quant(fused.q, fused.scales, x, r, w, 1e-6f);
        expect_same(fused, unfused, what);
        EXPECT_TRUE(same_bytes(r, r_ref)) << what << ": residual";
        EXPECT_TRUE(same_bytes(x, x_host)) << what << ": x must be left as it was";
        if (t == DType::kF16 || c.n == 0) continue;
        Tensor q_cpu = Tensor::empty({c.n, c.d}, qtype), s_cpu = Tensor::empty({c.n, groups}, DType::kF32);
        Tensor r_cpu = r_host.to(DType::kF32);
        ops::fused_add_rms_norm_quant(q_cpu, s_cpu, x_host.to(DType::kF32), r_cpu, to_host(w).to(DType::kF32), 1e-6f);
        // In bf16 the device rounds the residual sum and then the normed row (each up to 2^-9 relative) where the CPU
        // keeps f32: near an int8 group's amax (127 steps) that is up to ~1 step, and the group's scale moves by as
        // much (measured on an H200: 2 steps in g128 groups). fp8's steps are relative (2^-3): one still covers it.
        const int max_steps = t == DType::kBF16 && qtype == DType::kI8 ? 2 : 1;
        expect_within_steps(fused, q_cpu, s_cpu, what + " vs cpu", max_steps);
      }
    }
  }
}

TEST_F(CudaFusedQuantTest, SiluAndMulQuantIsBitIdenticalToTheUnfusedPair) {
  struct Case {
    int64_t n, d, pad;
  };
  // Vectorised with 1, 2 and 4 chunks per thread (d up to 32768), odd / unaligned (scalar), too wide, zero rows;
  // 300 and 280 rows: the two-pass kernel of many rows (per token; strided rows too); 512 rows and more: rows staged
  // in shared memory (per token and g128, strided rows, the widest row it takes in 16 bits, past it in f32).
  const Case cases[] = {{1, 14336, 0},  {32, 14336, 0},  {129, 4096, 0}, {3, 32768, 0},  {2, 256, 8},
                        {3, 9, 0},      {4, 1000, 3},    {2, 40000, 0},  {0, 14336, 0},  {300, 14336, 0},
                        {280, 1032, 8}, {600, 14336, 0}, {520, 1032, 8}, {700, 4096, 0}, {512, 32768, 0}};
  uint32_t seed = 200;
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (DType qtype : {DType::kFP8E4M3, DType::kI8}) {
      for (const Case& c : cases) {
        for (int64_t groups : group_counts(c.d)) {
          const std::string what = describe("silu_and_mul_quant", t, qtype, c.n, c.d, c.pad, groups);
          const Tensor x_host = random_tensor({c.n, 2 * c.d}, seed++, t, -6.f, 6.f);
          const Tensor x = device_rows(x_host, c.pad);
          Tensor y = poisoned_device({c.n, c.d}, t);
          ops::silu_and_mul(y, x);
          DeviceQuantized fused = poisoned_quantized(c.n, c.d, qtype, groups);
          ops::silu_and_mul_quant(fused.q, fused.scales, x);
          expect_same(fused, quantize(y, qtype, groups), what);
          if (t == DType::kF16 || c.n == 0) continue;
          Tensor q_cpu = Tensor::empty({c.n, c.d}, qtype), s_cpu = Tensor::empty({c.n, groups}, DType::kF32);
          ops::silu_and_mul_quant(q_cpu, s_cpu, x_host.to(DType::kF32));
          expect_within_steps(fused, q_cpu, s_cpu, what + " vs cpu");
        }
      }
    }
  }
}

}  // namespace

// ---- --bench ----

// The fused kernels against the unfused pairs they replace, at the Mistral-7B widths: the decoder's residual norm
// before QKV / gate_up (hidden 4096: fused_add_rms_norm then dynamic_scaled_quantize, vs fused_add_rms_norm_quant) and
// the SiLU before down (intermediate 14336: silu_and_mul then dynamic_scaled_quantize, vs silu_and_mul_quant), bf16
// activations, fp8 out, per token and per group of 128 (block fp8), rows 1, 32, 2048. Each beside the bytes floor of
// the fused op (what it must read and write once; the unfused pair moves more: the 16-bit row written and read again)
// at the copy bandwidth measured by the caller, and GB/s as those bytes over the time. As in a model the inputs are
// what the kernel before wrote, so L2 may hold them (up to ~60 MB here): small rows can beat the HBM floor.
void run_fused_quant_bench(double bandwidth) {
  std::printf("\nfused per-token activation quantization (bf16 -> fp8), floor = the fused op's bytes at %.0f GB/s\n",
              bandwidth / 1e9);
  std::printf("%-36s %6s %5s %9s %11s %7s %9s %9s %7s %9s\n", "op", "width", "rows", "floor MB", "unfused us", "GB/s",
              "of floor", "fused us", "GB/s", "of floor");
  const int reps = 200;
  for (const bool silu : {false, true}) {
    const int64_t d = silu ? 14336 : 4096;
    for (const int64_t groups : {int64_t{1}, d / 128}) {
      for (const int64_t m : {1, 32, 2048}) {
        // Bytes the fused op must move: norm: read x and residual, write residual, write q; SiLU: read gate_up,
        // write q; plus the f32 scales (and the norm's f32 weight, read once).
        const double bytes =
            silu ? m * (2.0 * 2 * d + d + 4.0 * groups) : m * (3.0 * 2 * d + d + 4.0 * groups) + 4.0 * d;
        Tensor x = to_device(random_tensor({m, silu ? 2 * d : d}, 40, DType::kBF16, -2.f, 2.f));
        Tensor residual = silu ? Tensor() : to_device(random_tensor({m, d}, 50, DType::kBF16, -2.f, 2.f));
        const Tensor w = to_device(random_tensor({d}, 60, DType::kF32, -1.f, 1.f));
        Tensor act = Tensor::empty({m, d}, DType::kBF16, Device::cuda());
        Tensor q = Tensor::empty({m, d}, DType::kFP8E4M3, Device::cuda());
        Tensor s = Tensor::empty({m, groups}, DType::kF32, Device::cuda());
        const double unfused_us = gpu_testing::mean_call_us(
            [&](int) {
              if (silu) {
                ops::silu_and_mul(act, x);
                ops::dynamic_scaled_quantize(q, s, act);
              } else {
                ops::fused_add_rms_norm(x, residual, w, 1e-5f);
                ops::dynamic_scaled_quantize(q, s, x);
              }
            },
            reps);
        const double fused_us = gpu_testing::mean_call_us(
            [&](int) {
              if (silu) {
                ops::silu_and_mul_quant(q, s, x);
              } else {
                ops::fused_add_rms_norm_quant(q, s, x, residual, w, 1e-5f);
              }
            },
            reps);
        const double floor_us = bytes / bandwidth * 1e6;
        const char* name =
            silu ? (groups == 1 ? "silu_and_mul (+quantize)" : "silu_and_mul (+quantize g128)")
                 : (groups == 1 ? "fused_add_rms_norm (+quantize)" : "fused_add_rms_norm (+quantize g128)");
        std::printf("%-36s %6lld %5lld %9.3f %11.2f %7.0f %8.0f%% %9.2f %7.0f %8.0f%%\n", name,
                    static_cast<long long>(d), static_cast<long long>(m), bytes / 1e6, unfused_us,
                    bytes / unfused_us / 1e3, 100.0 * floor_us / unfused_us, fused_us, bytes / fused_us / 1e3,
                    100.0 * floor_us / fused_us);
      }
    }
  }
}

}  // namespace llmserve

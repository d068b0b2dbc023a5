// The quantized-GEMM ops on CUDA against the CPU ops (the references): activation quantization bit-exact (same
// IEEE division and rounding), scaled_mm (tensor-core GEMV for m <= 16, CUTLASS above on Hopper
// (ScaledMMCutlassMatchesCpu: both M buckets, every scale mode, int8, block-FP8, f16 out; block-FP8 also through
// DeepGEMM: DeepGemmBlockFp8MatchesCpu, and each block case with and without it), cuBLASLt elsewhere; fp8
// per-tensor, per-token x per-channel, group-128 x block-128; int8 per-token x per-channel), each case also through the
// fallbacks forced by LLMSERVE_SCALED_MM_FORCE_FALLBACK (1: unit-scaled cuBLASLt GEMMs + epilogues, 2: the tiled
// kernel; the op logs the path each mode took once), plus shapes cuBLASLt has no algorithm for (k % 16 != 0, odd n),
// and w4a16_linear (GEMV for m <= 32, dequantize + cuBLASLt above; with and without the act-order permutation), m from
// 1 to 8192 with odd m, NaN-poisoned outputs. The GEMVs' own branches: every m up to their limit (1, 2, 4 8-token
// tiles), n not a multiple of the 16-row tile, k with a partial last 128-column block, one and eight warps per tile,
// bias absent / f32 / 16-bit; the W4A16 GEMV also against a tighter bound of its own (exact products:
// W4A16GemvDecodeMatchesCpuTightly). Tolerance: the output's dtype rounding plus f32 accumulation-order error (2e-6 of
// sum |a b|). w4a16_gemm (the GEMM layout of w4a16_gemm_pack, CUTLASS's mixed-input GEMM; W4A16GemmMatchesCpu, its
// fallbacks).
// `--bench` (`--bench-gemm`: the first table only; `--bench-gemv`: the GEMV table only): the prefill GEMMs (bf16,
// fp8, block-FP8, int8) at the Mistral-7B MLP shapes in TFLOP/s beside the FP8 peak, the SM clock NVML read meanwhile
// and a large fp8 GEMM of the same run; each GEMV at the Mistral-7B shapes beside the copy bandwidth measured in the
// same process, then the W4A16 GEMM beside the bf16 GEMM at m = 32, 64, 256, 2048 (bytes / FLOP floors), then the
// fused per-token activation quantization beside the unfused pairs (fused_quant_gpu_test.cc, also its tests).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>

#include "core/cuda_stream.h"
#include "core/logging.h"
#include "gpu_test_util.h"
#include "kernels/cuda/cutlass_scaled_mm.h"
#include "kernels/cuda/deep_gemm_block_fp8.h"
#include "kernels/ops.h"
#include "sm_clock_meter.h"

namespace llmserve {

void run_fused_quant_bench(double bandwidth);  // fused_quant_gpu_test.cc

namespace {

using gpu_testing::poisoned_device;
using gpu_testing::poisoned_strided;
using gpu_testing::to_device;
using gpu_testing::to_device_strided;
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
                                {3, 7168, 56},
                                {1, 14336, 1},
                                {2, 32768, 1},     // the register-resident kernel's largest block (1024 threads)
                                {2, 100, 1},       // a group not a multiple of 8: the two-pass kernel
                                {1, 40960, 1}}) {  // a group too long for the registers: the two-pass kernel
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

enum class Mode { kTensor, kTokenChannel, kGroupBlock, kTensorChannel, kTokenTensor };
// The bias a case passes: none, f32, or in out's dtype (bf16; the CPU reference gets the same rounded values).
enum class Bias { kNone, kF32, kOut };

// The bias of a case: `host` for the CPU reference (f32) and `dev` as the CUDA op gets it (undefined: no bias).
struct CaseBias {
  Tensor host, dev;
  const Tensor* cpu() const { return host.defined() ? &host : nullptr; }
  const Tensor* gpu() const { return dev.defined() ? &dev : nullptr; }
};
CaseBias make_bias(Bias kind, int64_t n, uint32_t seed, DType out_dtype = DType::kBF16) {
  if (kind == Bias::kNone) return {};
  Tensor b = random_tensor({n}, seed);
  if (kind == Bias::kF32) return {b, to_device(b)};
  Tensor b16 = b.to(out_dtype);
  return {b16.to(DType::kF32), to_device(b16)};
}

bool is_sm90() {
  int device = 0, major = 0, minor = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major == 9 && minor == 0;
}

// expect_cutlass: on an sm_90 device, first require that the CUTLASS kernels accept the shape and operands (so the
// case cannot pass through another path unnoticed).
void run_scaled_mm(DType qtype, Mode mode, int64_t m, int64_t n, int64_t k, uint32_t seed, Bias bias_kind = Bias::kF32,
                   bool forced_fallbacks = true, DType out_dtype = DType::kBF16, bool expect_cutlass = false) {
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
  } else if (mode == Mode::kTokenTensor) {
    sb = Tensor::from_f32({0.003f}, {1});
  } else if (mode == Mode::kGroupBlock) {
    sb = random_tensor({(n + 127) / 128, k / 128}, seed + 2, DType::kF32, 0.001f, 0.01f);
  }
  const CaseBias bias = make_bias(bias_kind, n, seed + 3, out_dtype);
  Tensor out_cpu = Tensor::empty({m, n}, DType::kF32);
  ops::scaled_mm(out_cpu, a, sa, b, sb, bias.cpu());
  // Magnitude bound from unscaled |a||b| times the largest scales (a loose but sound accumulation bound).
  double max_sa = 0, max_sb = 0;
  for (int64_t i = 0; i < sa.numel(); ++i) max_sa = std::max<double>(max_sa, sa.data<float>()[i]);
  for (int64_t i = 0; i < sb.numel(); ++i) max_sb = std::max<double>(max_sb, sb.data<float>()[i]);
  std::vector<double> mag = magnitudes(abs_dequantized(a), abs_dequantized(b));
  for (double& v : mag) v *= max_sa * max_sb;
  const Tensor a_dev = to_device(a), sa_dev = to_device(sa), b_dev = to_device(b), sb_dev = to_device(sb);
  const std::string what = std::string(dtype_name(qtype)) + " mode " + std::to_string(int(mode)) + " m " +
                           std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) + " bias " +
                           std::to_string(int(bias_kind)) + " out " + std::string(dtype_name(out_dtype));
  if (expect_cutlass && is_sm90()) {
    Tensor out_dev = poisoned_device({m, n}, out_dtype);
    cuda::CutlassScaledMM p;
    p.out = out_dev.raw_data();
    p.a = a_dev.raw_data();
    p.b = b_dev.raw_data();
    p.m = m;
    p.n = n;
    p.k = k;
    p.b_scales = sb_dev.data<float>();
    p.b_per_channel = sb.numel() > 1;
    p.a_scales_ld = (m + 3) / 4 * 4;
    const char* why = cuda::cutlass_scaled_mm_rejects(p, mode == Mode::kGroupBlock);
    EXPECT_EQ(why, nullptr) << what << ": CUTLASS rejects it: " << why;
  }
  for (const char* force : {"0", "1", "2"}) {  // fast paths, then the epilogue fallbacks, then the tiled kernel
    if (!forced_fallbacks && force[0] != '0') break;
    ASSERT_EQ(setenv("LLMSERVE_SCALED_MM_FORCE_FALLBACK", force, 1), 0);
    // Block scales on the fast paths: DeepGEMM's kernel where it applies, then without it (CUTLASS's).
    for (const char* deep_gemm : {"1", "0"}) {
      if (deep_gemm[0] == '0' && (force[0] != '0' || mode != Mode::kGroupBlock)) break;
      ASSERT_EQ(setenv("LLMSERVE_DEEP_GEMM", deep_gemm, 1), 0);
      Tensor out_dev = poisoned_device({m, n}, out_dtype);
      ops::scaled_mm(out_dev, a_dev, sa_dev, b_dev, sb_dev, bias.gpu());
      expect_close_to(to_host(out_dev), out_cpu, mag,
                      what + " forced fallback " + force + " LLMSERVE_DEEP_GEMM " + deep_gemm);
    }
  }
  ASSERT_EQ(unsetenv("LLMSERVE_SCALED_MM_FORCE_FALLBACK"), 0);
  ASSERT_EQ(unsetenv("LLMSERVE_DEEP_GEMM"), 0);
}

// DeepGEMM's block-FP8 kernel called directly: on an sm_90 device it must accept each case and compile its kernel (a
// false return, NVRTC failing, fails the test). m: 1, odd, 64-row tiles (m <= 64), 128-row tiles, two-CTA clusters
// (m >= 1024 with n a multiple of two tiles); n a multiple of 8 but not of the tile (partial n tiles, tiles spanning
// two 128-row weight-scale blocks); k of 1, 3, 4, 8 and 32 128-column blocks (stage counts that do and do not divide
// them). Poisoned bf16 output against the CPU op with expect_close_to's bound.
TEST_F(CudaQuantTest, DeepGemmBlockFp8MatchesCpu) {
  if (!is_sm90()) GTEST_SKIP() << "DeepGEMM's kernel is sm_90 only";
  struct Case {
    int64_t m, n, k;
  };
  uint32_t seed = 15000;
  for (const Case c : {Case{1, 264, 128}, Case{17, 264, 384}, Case{64, 136, 512}, Case{65, 4096, 1024},
                       Case{300, 264, 4096}, Case{1024, 2304, 256}, Case{2051, 1024, 1024}}) {
    const int64_t m = c.m, n = c.n, k = c.k, groups = k / 128, ld = (m + 3) / 4 * 4;
    Tensor af = random_tensor({m, k}, seed += 10, DType::kF32, -4.f, 4.f);
    Tensor bf = random_tensor({n, k}, seed + 1, DType::kF32);
    Tensor a = Tensor::empty({m, k}, DType::kFP8E4M3), sa = Tensor::empty({m, groups}, DType::kF32);
    ops::dynamic_scaled_quantize(a, sa, af);
    Tensor b = Tensor::empty({n, k}, DType::kFP8E4M3), sb_rows = Tensor::empty({n, 1}, DType::kF32);
    ops::dynamic_scaled_quantize(b, sb_rows, bf);
    Tensor sb = random_tensor({(n + 127) / 128, groups}, seed + 2, DType::kF32, 0.001f, 0.01f);
    Tensor out_cpu = Tensor::empty({m, n}, DType::kF32);
    ops::scaled_mm(out_cpu, a, sa, b, sb, nullptr);
    double max_sa = 0, max_sb = 0;
    for (int64_t i = 0; i < sa.numel(); ++i) max_sa = std::max<double>(max_sa, sa.data<float>()[i]);
    for (int64_t i = 0; i < sb.numel(); ++i) max_sb = std::max<double>(max_sb, sb.data<float>()[i]);
    std::vector<double> mag = magnitudes(abs_dequantized(a), abs_dequantized(b));
    for (double& v : mag) v *= max_sa * max_sb;
    // The activation scales token-major [groups, ld], the rows past m poisoned (the kernel must not read them into
    // stored rows).
    Tensor sa_t = Tensor::empty({groups, ld}, DType::kF32);
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t i = 0; i < ld; ++i) sa_t.data<float>()[g * ld + i] = i < m ? sa.data<float>()[i * groups + g] : NAN;
    }
    const Tensor a_dev = to_device(a), sa_dev = to_device(sa_t), b_dev = to_device(b), sb_dev = to_device(sb);
    Tensor out_dev = poisoned_device({m, n}, DType::kBF16);
    cuda::CutlassScaledMM p;
    p.out = out_dev.raw_data();
    p.a = a_dev.raw_data();
    p.b = b_dev.raw_data();
    p.a_scales = sa_dev.data<float>();
    p.b_scales = sb_dev.data<float>();
    p.m = m;
    p.n = n;
    p.k = k;
    p.a_scales_ld = ld;
    const std::string what = "m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k);
    const char* why = cuda::deep_gemm_block_fp8_rejects(p);
    ASSERT_EQ(why, nullptr) << what << ": " << why;
    ASSERT_TRUE(cuda::deep_gemm_block_fp8(p)) << what << ": the kernel did not compile (see the log)";
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
    expect_close_to(to_host(out_dev), out_cpu, mag, what);
  }
}

TEST_F(CudaQuantTest, ScaledMMMatchesCpu) {
  const LogLevel level = min_log_level();
  set_min_log_level(LogLevel::kInfo);  // the op logs once which path each mode took on this machine
  uint32_t seed = 100;
  for (int64_t m : {1, 3, 8, 9, 16, 17, 255, 2048, 8192}) {  // <= 16: the GEMV; above: CUTLASS (Hopper) or cuBLASLt
    run_scaled_mm(DType::kFP8E4M3, Mode::kTokenChannel, m, 384, 512, seed += 10);
    run_scaled_mm(DType::kFP8E4M3, Mode::kTensor, m, 256, 256, seed += 10);
    run_scaled_mm(DType::kFP8E4M3, Mode::kGroupBlock, m, 384, 512, seed += 10);
    run_scaled_mm(DType::kFP8E4M3, Mode::kTensorChannel, m, 256, 512, seed += 10);
    run_scaled_mm(DType::kI8, Mode::kTokenChannel, m, 384, 512, seed += 10);
  }
  // f32 out: CUTLASS writes only 16-bit outputs, so on Hopper too these take cuBLASLt's own scale modes.
  for (int64_t m : {33, 2048}) {
    run_scaled_mm(DType::kFP8E4M3, Mode::kTokenChannel, m, 384, 512, seed += 10, Bias::kF32, false, DType::kF32);
    run_scaled_mm(DType::kFP8E4M3, Mode::kTensor, m, 256, 256, seed += 10, Bias::kNone, false, DType::kF32);
    run_scaled_mm(DType::kFP8E4M3, Mode::kGroupBlock, m, 384, 512, seed += 10, Bias::kOut, false, DType::kF32);
    run_scaled_mm(DType::kI8, Mode::kTokenChannel, m, 384, 512, seed += 10, Bias::kF32, false, DType::kF32);
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

// The CUTLASS kernels (Hopper, m above the GEMV's 16): the M buckets and their edges (64-row tiles up to m = 256, fp8's
// 128 x 128 up to 1024, 128 x 256 above, swizzled from m = 4097), odd m, n and k not multiples of the tiles (partial
// tiles, k % 128 != 0 outside block mode), every scale mode (per-tensor / per-token activations x per-tensor /
// per-channel weights, group-128 x block-128), int8, bias absent / f32 / 16-bit, bf16 and f16 out, poisoned outputs. On
// an sm_90 device each case first checks that CUTLASS takes it.
TEST_F(CudaQuantTest, ScaledMMCutlassMatchesCpu) {
  const LogLevel level = min_log_level();
  set_min_log_level(LogLevel::kInfo);  // the op logs the path each mode took
  uint32_t seed = 9000;
  int i = 0;
  for (int64_t m : {17, 64, 127, 255, 256, 257, 1001, 1024, 1025, 4097}) {
    const Bias bias = static_cast<Bias>(i % 3);
    const DType out = i++ % 2 == 0 ? DType::kBF16 : DType::kF16;
    run_scaled_mm(DType::kFP8E4M3, Mode::kTokenChannel, m, 264, 272, seed += 10, bias, false, out, true);
    run_scaled_mm(DType::kFP8E4M3, Mode::kTensor, m, 136, 400, seed += 10, bias, false, out, true);
    run_scaled_mm(DType::kFP8E4M3, Mode::kTensorChannel, m, 264, 272, seed += 10, bias, false, out, true);
    run_scaled_mm(DType::kFP8E4M3, Mode::kTokenTensor, m, 520, 144, seed += 10, bias, false, out, true);
    run_scaled_mm(DType::kFP8E4M3, Mode::kGroupBlock, m, 264, 384, seed += 10, bias, false, out, true);
    run_scaled_mm(DType::kI8, Mode::kTokenChannel, m, 264, 272, seed += 10, bias, false, out, true);
    run_scaled_mm(DType::kI8, Mode::kTensor, m, 136, 400, seed += 10, bias, false, out, true);
  }
  // Block-FP8's mainloop alternates two partial sums over the k tiles: 1, 2, 3 (above) and 4 tiles take every path
  // of the alternation; 144 output tiles give some CTAs of the persistent grid a second tile.
  for (int64_t k : {128, 256, 512}) {
    run_scaled_mm(DType::kFP8E4M3, Mode::kGroupBlock, 300, 264, k, seed += 10, Bias::kNone, false, DType::kBF16, true);
  }
  run_scaled_mm(DType::kFP8E4M3, Mode::kGroupBlock, 1024, 2304, 256, seed += 10, Bias::kF32, false, DType::kBF16, true);
  set_min_log_level(level);
}

// scaled_mm inside CUDA graphs at the row counts graphs capture for a quantized model (m from 17, where CUTLASS takes
// over from the GEMV, to 256 for FULL decode graphs; 264 and 512, fp8's 128 x 128 bucket, for PIECEWISE ones, whose
// capture sizes reach min(2 max_num_seqs, 512)): dynamic per-token fp8 and int8, block-FP8. Each size is captured
// once, then replayed over new activations and scales written into the captured buffers: every replay must equal an
// eager call on the same inputs bit for bit (same kernel, same operands) — nothing of the capture-time values (scale
// pointers, problem shape, a host-chosen split) may be baked in.
TEST_F(CudaQuantTest, ScaledMMReplaysInAGraphAsEager) {
  struct Case {
    DType qtype;
    Mode mode;
  };
  const int64_t n = 264, k = 384;
  uint32_t seed = 12000;
  for (const Case c : {Case{DType::kFP8E4M3, Mode::kTokenChannel}, Case{DType::kI8, Mode::kTokenChannel},
                       Case{DType::kFP8E4M3, Mode::kGroupBlock}}) {
    for (int64_t m : {17, 24, 32, 64, 128, 136, 256, 264, 512}) {
      const int64_t a_groups = c.mode == Mode::kGroupBlock ? k / 128 : 1;
      Tensor bf = random_tensor({n, k}, ++seed, DType::kF32);
      Tensor b = Tensor::empty({n, k}, c.qtype), sb_rows = Tensor::empty({n, 1}, DType::kF32);
      ops::dynamic_scaled_quantize(b, sb_rows, bf);
      Tensor sb = c.mode == Mode::kGroupBlock
                      ? random_tensor({(n + 127) / 128, k / 128}, ++seed, DType::kF32, 0.001f, 0.01f)
                      : sb_rows.view({n});
      const Tensor b_dev = to_device(b), sb_dev = to_device(sb);
      Tensor a_dev = Tensor::empty({m, k}, c.qtype, Device::cuda());
      Tensor sa_dev = Tensor::empty({m, a_groups}, DType::kF32, Device::cuda());
      Tensor out = poisoned_device({m, n}, DType::kBF16), eager = poisoned_device({m, n}, DType::kBF16);
      auto write_inputs = [&](uint32_t s) {  // new activations into the captured buffers
        Tensor af = random_tensor({m, k}, s, DType::kF32, -4.f, 4.f);
        Tensor a = Tensor::empty({m, k}, c.qtype), sa = Tensor::empty({m, a_groups}, DType::kF32);
        ops::dynamic_scaled_quantize(a, sa, af);
        a_dev.copy_from(to_device(a));
        sa_dev.copy_from(to_device(sa));
      };
      write_inputs(++seed);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      cudaStream_t stream;
      ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
      cudaGraph_t graph;
      {
        cuda::StreamGuard guard(stream);
        ops::scaled_mm(out, a_dev, sa_dev, b_dev, sb_dev, nullptr);  // eager first: one-time set-up outside capture
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
        ops::scaled_mm(out, a_dev, sa_dev, b_dev, sb_dev, nullptr);
        ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
      }
      cudaGraphExec_t exec;
      ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
      for (int replay = 0; replay < 2; ++replay) {
        write_inputs(++seed);
        ASSERT_EQ(cudaMemset(out.raw_data(), 0xff, out.nbytes()), cudaSuccess);  // NaN poison
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        {
          cuda::StreamGuard guard(stream);
          ops::scaled_mm(eager, a_dev, sa_dev, b_dev, sb_dev, nullptr);
          ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        }
        const Tensor got = to_host(out), want = to_host(eager);
        for (double v : to_doubles(got)) ASSERT_TRUE(std::isfinite(v)) << "m " << m << ": a poisoned output survived";
        ASSERT_EQ(std::memcmp(got.raw_data(), want.raw_data(), got.nbytes()), 0)
            << dtype_name(c.qtype) << " mode " << int(c.mode) << " m " << m << " replay " << replay
            << ": the graph's output differs from an eager call on the same inputs";
      }
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaStreamDestroy(stream);
    }
  }
}

// The GEMV's branches (only its path: m <= 16): every m (one 8-token tile up to 8, two above), n = 40 (the last
// 16-row tile partial, a block of 8 tiles partly past n), k = 2048 (eight warps per tile), k = 208 (one warp per
// tile, a partial last 128-column block), every scale mode, bias absent / f32 / bf16.
TEST_F(CudaQuantTest, ScaledGemvBranchesMatchCpu) {
  uint32_t seed = 5000;
  for (int64_t m = 1; m <= 16; ++m) {
    const Bias bias = static_cast<Bias>(m % 3);
    run_scaled_mm(DType::kFP8E4M3, Mode::kTokenChannel, m, 40, 2048, seed += 10, bias, false);
    run_scaled_mm(DType::kFP8E4M3, Mode::kTensor, m, 40, 208, seed += 10, bias, false);
    run_scaled_mm(DType::kFP8E4M3, Mode::kTensorChannel, m, 40, 208, seed += 10, bias, false);
    run_scaled_mm(DType::kFP8E4M3, Mode::kGroupBlock, m, 136, 2048, seed += 10, bias, false);
    run_scaled_mm(DType::kI8, Mode::kTokenChannel, m, 40, 2048, seed += 10, bias, false);
    run_scaled_mm(DType::kI8, Mode::kTokenChannel, m, 40, 208, seed += 10, bias, false);
  }
}

struct W4Case {
  int64_t m, n, k, groups;
  bool permuted = false;       // GPTQ act-order (g_idx)
  DType dtype = DType::kBF16;  // x and out
  Bias bias = Bias::kF32;
  int64_t pad = 0;  // x and out as column slices of rows `pad` wider (row-strided)
  // The GEMV's own bound instead of the shared one: 8e-3 |cpu| + 1e-3 + 5e-4 sum_k |x w| (its products are exact;
  // only f32 accumulation, its zero-point correction and the output's rounding remain), with x drawn from
  // [x_min, 1] (x_min = 0: every x positive, the correction sum_k x at its largest against the result).
  bool tight = false;
  float x_min = -1.f;
};

// sum_c |x[i, perm[c]] W[j, c]| with W dequantized ((q - z) s; perm: the identity without act-order).
std::vector<double> w4_magnitudes(const Tensor& x, const Tensor& qweight, const Tensor& scales, const Tensor& zeros,
                                  const std::vector<int32_t>& perm) {
  const int64_t m = x.size(0), k = x.size(1), n = qweight.size(0), groups = scales.size(1), g = k / groups;
  Tensor w = Tensor::empty({n, k}, DType::kF32), xg = Tensor::empty({m, k}, DType::kF32);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const int q = (qweight.data<uint8_t>()[r * (k / 2) + c / 2] >> (4 * (c & 1))) & 0xf;
      const int64_t gi = r * groups + c / g;
      w.data<float>()[r * k + c] = std::abs((q - float(zeros.data<uint8_t>()[gi])) * scales.data<float>()[gi]);
    }
  }
  const Tensor xf = x.to(DType::kF32);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < k; ++c) xg.data<float>()[i * k + c] = std::abs(xf.data<float>()[i * k + perm[c]]);
  }
  return magnitudes(xg, w);
}

void expect_tight(const Tensor& gpu, const Tensor& cpu, const std::vector<double>& magnitude, const std::string& what) {
  const std::vector<double> g = to_doubles(gpu), c = to_doubles(cpu);
  ASSERT_EQ(g.size(), c.size());
  int64_t bad = 0;
  size_t worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!(std::abs(g[i] - c[i]) <= 8e-3 * std::abs(c[i]) + 1e-3 + 5e-4 * magnitude[i])) {
      if (bad++ == 0) worst = i;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": first bad element " << worst << ": gpu " << g[worst] << ", cpu " << c[worst]
                    << ", sum |x w| " << magnitude[worst];
}

void run_w4a16(const W4Case& c, uint32_t seed) {
  const int64_t m = c.m, n = c.n, k = c.k;
  std::mt19937 rng(seed);
  Tensor x = random_tensor({m, k}, seed, c.dtype, c.x_min, 1.f);
  Tensor qweight = Tensor::empty({n, k / 2}, DType::kU8);
  for (int64_t i = 0; i < qweight.numel(); ++i) qweight.data<uint8_t>()[i] = static_cast<uint8_t>(rng() & 0xff);
  Tensor scales = random_tensor({n, c.groups}, seed + 1, DType::kF32, 0.005f, 0.05f);
  Tensor zeros = Tensor::empty({n, c.groups}, DType::kU8);  // 0..16: AWQ's zeros and GPTQ v1's stored zero + 1
  for (int64_t i = 0; i < zeros.numel(); ++i) zeros.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 17);
  std::vector<int32_t> p(k);
  std::iota(p.begin(), p.end(), 0);
  if (c.permuted) std::shuffle(p.begin(), p.end(), rng);
  Tensor perm = Tensor::from_i32(p, {k});
  CaseBias bias = make_bias(c.bias, n, seed + 2);
  if (c.bias == Bias::kOut && c.dtype != DType::kBF16) bias.dev = to_device(bias.host.to(c.dtype));
  Tensor out_cpu = Tensor::empty({m, n}, DType::kF32);
  ops::w4a16_linear(out_cpu, x.to(DType::kF32), qweight, scales, zeros, c.permuted ? &perm : nullptr, bias.cpu());
  Tensor perm_dev = to_device(perm);
  Tensor out_dev = c.pad > 0 ? poisoned_strided(m, n, c.pad, c.dtype) : poisoned_device({m, n}, c.dtype);
  const Tensor x_dev = c.pad > 0 ? to_device_strided(x, c.pad) : to_device(x);
  ops::w4a16_linear(out_dev, x_dev, to_device(qweight), to_device(scales), to_device(zeros),
                    c.permuted ? &perm_dev : nullptr, bias.gpu());
  const std::string what = "w4a16 m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) +
                           " groups " + std::to_string(c.groups) + (c.permuted ? " permuted " : " ") +
                           std::string(dtype_name(c.dtype)) + " bias " + std::to_string(int(c.bias)) + " pad " +
                           std::to_string(c.pad) + " x_min " + std::to_string(c.x_min);
  if (c.tight) return expect_tight(to_host(out_dev), out_cpu, w4_magnitudes(x, qweight, scales, zeros, p), what);
  std::vector<double> mag(m * n, 16.0 * 0.05 * k);  // |x| <= 1, |w| <= 16 * max scale
  expect_close_to(to_host(out_dev), out_cpu, mag, what);
}

TEST_F(CudaQuantTest, W4A16MatchesCpu) {
  uint32_t seed = 1000;
  for (int64_t m : {1, 2, 3, 8, 13, 16, 17, 32, 33, 300, 8192}) {  // <= 32: the GEMV; above: dequantize + cuBLASLt
    for (bool permuted : {false, true}) {
      run_w4a16({m, 264, 512, 4, permuted}, seed += 10);  // group 128
      run_w4a16({m, 96, 384, 1, permuted}, seed += 10);   // per channel
    }
  }
}

// The GEMV's branches (m <= 32): every m (one 8-token tile up to 8, two up to 16, four above); n = 40 (a partial last
// 16-row tile, a block of tiles partly past n); k = 8192 in groups of 128 (eight warps per tile); per channel with k =
// 416 (one warp per tile, a partial last 128-column block); act-order; f16; bias absent / f32 / 16-bit; row-strided x
// and out; and k % 32 != 0 (the dequantize path even at m = 1).
TEST_F(CudaQuantTest, W4A16GemvBranchesMatchCpu) {
  uint32_t seed = 7000;
  for (int64_t m = 1; m <= 32; ++m) {
    const Bias bias = static_cast<Bias>(m % 3);
    const bool permuted = m % 2 == 0;
    run_w4a16({m, 40, 8192, 64, permuted, DType::kBF16, bias}, seed += 10);
    run_w4a16({m, 40, 416, 1, permuted, DType::kBF16, bias}, seed += 10);
    run_w4a16({m, 72, 1024, 8, permuted, DType::kF16, bias}, seed += 10);
    run_w4a16({m, 40, 512, 4, false, DType::kBF16, bias, /*pad=*/8}, seed += 10);
  }
  for (int64_t m : {1, 5}) run_w4a16({m, 24, 200, 1}, seed += 10);
}

// The decode GEMV (m <= 8: 16- or 32-row warps; 9..32: 16-row) against its own, tighter bound (W4Case::tight): every m
// to the switch point and past it, bf16 and f16, GPTQ act-order, bias absent / f32 / 16-bit; groups of 128, 256 and
// 512 columns and per channel with k % 128 != 0 (a partial last block); an odd and an even number of blocks per warp
// (the ring of blocks in flight); n = 24 (one partial 32-row tile), 40 and 264 (several tiles, the last partial);
// and x all positive, where the zero-point correction (bias + z) sum x is largest against the result.
TEST_F(CudaQuantTest, W4A16GemvDecodeMatchesCpuTightly) {
  uint32_t seed = 9000;
  for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 16, 17, 32}) {
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      const Bias bias = static_cast<Bias>(m % 3);
      const bool permuted = m % 2 == 1;
      auto tight = [&](int64_t n, int64_t k, int64_t groups, float x_min) {
        W4Case c{m, n, k, groups, permuted, dtype, bias};
        c.tight = true;
        c.x_min = x_min;
        run_w4a16(c, seed += 10);
      };
      tight(264, 4096, 32, -1.f);  // 32 blocks: several per warp
      tight(40, 4096, 32, 0.f);    // x positive
      tight(24, 384, 3, -1.f);     // 3 blocks: one warp, odd
      tight(40, 1280, 10, 0.f);    // 10 blocks, 2 warps: 5 each
      tight(40, 1024, 4, -1.f);    // groups of 256
      tight(40, 2048, 4, 0.f);     // groups of 512
      tight(72, 416, 1, 0.f);      // per channel, partial last block
    }
  }
  // 32-row warps (m <= 8 on a weight whose grid gives every SM two blocks: at k = 4096, n >= 64 x SMs; 10248 covers
  // up to 160 SMs and ends in a partial 32-row tile), with groups of 128 and per channel with a partial last block.
  for (int64_t m : {1, 4, 8}) {
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      W4Case c{m, 10248, m == 4 ? 4064 : 4096, m == 4 ? 1 : 32, m == 1, dtype, static_cast<Bias>(m % 3)};
      c.tight = true;
      c.x_min = m == 8 ? 0.f : -1.f;
      run_w4a16(c, seed += 10);
    }
  }
  // 16-row warps with two blocks in flight (the cases above take three: their grids run in one wave): at k = 4096 a
  // grid of 1.5 blocks of 32-row warps per SM is too small for them and 3 blocks of 16-row warps per SM are more than
  // the three-block kernel's two resident ones.
  int device = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  for (int64_t m : {1, 5}) {
    W4Case c{m, 48 * sms, 4096, 32, m == 5, m == 1 ? DType::kBF16 : DType::kF16, static_cast<Bias>(m % 3)};
    c.tight = true;
    run_w4a16(c, seed += 10);
  }
}

// ---- w4a16_gemm (the GEMM layout: CUTLASS's mixed-input GEMM above the GEMV's batch) ----

// How the zeros of a GEMM case look: AWQ (0..15), GPTQ asymmetric (its stored zero + 1: 1..16), GPTQ symmetric (every
// zero 8: no zero terms, the scale-only kernel).
enum class Zeros { kAwq, kGptqAsym, kGptqSym };

struct W4GemmCase {
  int64_t m, n, k, groups;
  Zeros zeros = Zeros::kAwq;
  bool permuted = false;
  Bias bias = Bias::kNone;
  int64_t pad = 0;                     // x and out row-strided
  int64_t row_begin = 0, row_end = 0;  // a row slice [begin, end) of the packed weight (QKV's split); 0, 0: all rows
  DType dtype = DType::kBF16;          // f16: the dequantize fallback
};

// The GEMM's error bound: besides the output's rounding and f32 accumulation, each weight is (q - 8) s' + zt' with the
// scale s' and zero term zt' rounded to bf16, their product and sum rounded again: within ~2^-8 of |q - 8| s + |8 - z|
// s, so the bound is 4e-3 sum_c |x_c| (|q - 8| + |8 - z|) s (+ 8e-3 |cpu| + 1e-3). A wrong nibble, scale, zero term or
// permutation is off by the order of the whole sum.
std::vector<double> w4_gemm_magnitudes(const Tensor& x, const Tensor& qweight, const Tensor& scales,
                                       const Tensor& zeros, const std::vector<int32_t>& perm, int64_t r0, int64_t r1) {
  const int64_t m = x.size(0), k = x.size(1), n = r1 - r0, groups = scales.size(1), g = k / groups;
  Tensor w = Tensor::empty({n, k}, DType::kF32), xg = Tensor::empty({m, k}, DType::kF32);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const int q = (qweight.data<uint8_t>()[(r0 + r) * (k / 2) + c / 2] >> (4 * (c & 1))) & 0xf;
      const int64_t gi = (r0 + r) * groups + c / g;
      w.data<float>()[r * k + c] =
          (std::abs(q - 8.f) + std::abs(8.f - zeros.data<uint8_t>()[gi])) * scales.data<float>()[gi];
    }
  }
  const Tensor xf = x.to(DType::kF32);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < k; ++c) xg.data<float>()[i * k + c] = std::abs(xf.data<float>()[i * k + perm[c]]);
  }
  Tensor mag = Tensor::empty({m, n}, DType::kF32);
  ops::linear(mag, xg, w, nullptr);  // all terms positive: f32 accumulation is accurate to ~1e-7 here
  std::vector<double> out(m * n);
  for (int64_t i = 0; i < m * n; ++i) out[i] = mag.data<float>()[i];
  return out;
}

void run_w4a16_gemm(const W4GemmCase& c, uint32_t seed) {
  const int64_t m = c.m, n = c.n, k = c.k, groups = c.groups;
  const int64_t r0 = c.row_end > 0 ? c.row_begin : 0, r1 = c.row_end > 0 ? c.row_end : n, rows = r1 - r0;
  std::mt19937 rng(seed);
  Tensor x = random_tensor({m, k}, seed, c.dtype);
  Tensor qweight = Tensor::empty({n, k / 2}, DType::kU8);
  for (int64_t i = 0; i < qweight.numel(); ++i) qweight.data<uint8_t>()[i] = static_cast<uint8_t>(rng() & 0xff);
  Tensor scales = random_tensor({n, groups}, seed + 1, DType::kF32, 0.005f, 0.05f);
  Tensor zeros = Tensor::empty({n, groups}, DType::kU8);
  for (int64_t i = 0; i < zeros.numel(); ++i) {
    zeros.data<uint8_t>()[i] = static_cast<uint8_t>(c.zeros == Zeros::kGptqSym ? 8
                                                    : c.zeros == Zeros::kAwq   ? rng() % 16
                                                                               : 1 + rng() % 16);
  }
  std::vector<int32_t> p(k);
  std::iota(p.begin(), p.end(), 0);
  if (c.permuted) std::shuffle(p.begin(), p.end(), rng);
  Tensor perm = Tensor::from_i32(p, {k});
  CaseBias bias = make_bias(c.bias, rows, seed + 2);
  if (c.bias == Bias::kOut && c.dtype != DType::kBF16) bias.dev = to_device(bias.host.to(c.dtype));
  // The oracle: w4a16_linear on the CPU, on the rows of the case.
  Tensor out_cpu = Tensor::empty({m, rows}, DType::kF32);
  ops::w4a16_linear(out_cpu, x.to(DType::kF32), qweight.slice(0, r0, r1).contiguous(),
                    scales.slice(0, r0, r1).contiguous(), zeros.slice(0, r0, r1).contiguous(),
                    c.permuted ? &perm : nullptr, bias.cpu());
  // The pack on the device, bit-identical to the CPU's.
  Tensor packed = Tensor::empty({k / 16, 8 * n}, DType::kU8, Device::cuda());
  Tensor gs = Tensor::empty({groups, n}, c.dtype, Device::cuda()),
         gz = Tensor::empty({groups, n}, c.dtype, Device::cuda());
  ops::w4a16_gemm_pack(packed, gs, gz, to_device(qweight), to_device(scales), to_device(zeros));
  Tensor packed_cpu = Tensor::empty({k / 16, 8 * n}, DType::kU8);
  Tensor gs_cpu = Tensor::empty({groups, n}, c.dtype), gz_cpu = Tensor::empty({groups, n}, c.dtype);
  ops::w4a16_gemm_pack(packed_cpu, gs_cpu, gz_cpu, qweight, scales, zeros);
  for (const auto& [dev, host, name] :
       {std::tuple<const Tensor*, const Tensor*, const char*>{&packed, &packed_cpu, "packed"},
        {&gs, &gs_cpu, "gemm_scales"},
        {&gz, &gz_cpu, "gemm_zeros"}}) {
    const Tensor back = to_host(*dev);
    ASSERT_EQ(std::memcmp(back.raw_data(), host->raw_data(), host->nbytes()), 0) << "w4a16_gemm_pack: " << name;
  }
  const Tensor packed_rows = packed.slice(1, 8 * r0, 8 * r1), gs_rows = gs.slice(1, r0, r1),
               gz_rows = gz.slice(1, r0, r1);
  Tensor perm_dev = to_device(perm);
  Tensor out_dev = c.pad > 0 ? poisoned_strided(m, rows, c.pad, c.dtype) : poisoned_device({m, rows}, c.dtype);
  const Tensor x_dev = c.pad > 0 ? to_device_strided(x, c.pad) : to_device(x);
  ops::w4a16_gemm(out_dev, x_dev, packed_rows, gs_rows, c.zeros == Zeros::kGptqSym ? nullptr : &gz_rows,
                  c.permuted ? &perm_dev : nullptr, bias.gpu());
  const std::string what = "w4a16_gemm m " + std::to_string(m) + " n " + std::to_string(n) + " rows " +
                           std::to_string(r0) + ".." + std::to_string(r1) + " k " + std::to_string(k) + " groups " +
                           std::to_string(groups) + " zeros " + std::to_string(int(c.zeros)) +
                           (c.permuted ? " permuted " : " ") + std::string(dtype_name(c.dtype)) + " bias " +
                           std::to_string(int(c.bias)) + " pad " + std::to_string(c.pad);
  const std::vector<double> mag = w4_gemm_magnitudes(x, qweight, scales, zeros, p, r0, r1);
  const std::vector<double> g = to_doubles(to_host(out_dev)), want = to_doubles(out_cpu);
  int64_t bad = 0;
  size_t worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!(std::abs(g[i] - want[i]) <= 8e-3 * std::abs(want[i]) + 1e-3 + 4e-3 * mag[i])) {
      if (bad++ == 0) worst = i;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": first bad element " << worst << ": gpu " << g[worst] << ", cpu " << want[worst]
                    << ", bound's sum " << mag[worst];
}

// Every m the model sends past the GEMV (17 .. 8192, odd ones; 32 / 33 and 64 / 65 across the decode / small / large
// tile switches; and 1, should LLMSERVE_W4A16_GEMM_MIN_ROWS move the switch to the bottom), GPTQ
// symmetric (scale-only kernel), GPTQ asymmetric and AWQ (zero terms), act-order, groups of 128 and 256 and per
// channel, n = 272 (a partial 128-row tile), bias absent / f32 / bf16, row-strided x and out, QKV's row slices.
TEST_F(CudaQuantTest, W4A16GemmMatchesCpu) {
  uint32_t seed = 12000;
  for (int64_t m : {1, 17, 32, 33, 47, 64, 65, 100, 129, 300, 1000, 2048}) {
    const Bias bias = static_cast<Bias>(m % 3);
    run_w4a16_gemm({m, 272, 512, 4, Zeros::kGptqSym, false, bias}, seed += 10);
    run_w4a16_gemm({m, 272, 512, 4, Zeros::kAwq, false, bias}, seed += 10);
    run_w4a16_gemm({m, 272, 512, 4, Zeros::kGptqAsym, true, bias}, seed += 10);  // act-order
    run_w4a16_gemm({m, 272, 512, 4, Zeros::kGptqSym, true, bias}, seed += 10);
    run_w4a16_gemm({m, 128, 1024, 4, Zeros::kAwq, false, bias}, seed += 10);     // groups of 256
    run_w4a16_gemm({m, 144, 384, 1, Zeros::kGptqSym, false, bias}, seed += 10);  // per channel
    run_w4a16_gemm({m, 144, 384, 1, Zeros::kAwq, true, bias}, seed += 10);
    W4GemmCase strided{m, 272, 512, 4, Zeros::kAwq, m % 2 == 0, bias, /*pad=*/8};
    run_w4a16_gemm(strided, seed += 10);
    W4GemmCase qkv{m, 384, 512, 4, Zeros::kGptqSym, false, bias};  // q 0..256, k 256..320, v 320..384
    for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 256}, {256, 320}, {320, 384}}) {
      qkv.row_begin = b, qkv.row_end = e;
      run_w4a16_gemm(qkv, seed += 10);
    }
  }
  run_w4a16_gemm({8192, 272, 512, 4, Zeros::kGptqSym, false, Bias::kF32}, seed += 10);
  run_w4a16_gemm({8192, 272, 512, 4, Zeros::kAwq, true, Bias::kOut}, seed += 10);
}

// Where CUTLASS does not apply, the op dequantizes the GEMM layout and runs ops::linear: k % 64 != 0, f16, x rows not
// 16-byte aligned (pad 4 with bf16: 8-byte steps).
TEST_F(CudaQuantTest, W4A16GemmFallbacksMatchCpu) {
  uint32_t seed = 13000;
  for (int64_t m : {1, 33, 300}) {
    run_w4a16_gemm({m, 48, 208, 1, Zeros::kAwq, true, Bias::kF32}, seed += 10);
    W4GemmCase f16{m, 272, 512, 4, Zeros::kGptqAsym, false, Bias::kOut};
    f16.dtype = DType::kF16;
    run_w4a16_gemm(f16, seed += 10);
    run_w4a16_gemm({m, 272, 512, 4, Zeros::kGptqSym, false, Bias::kNone, /*pad=*/4}, seed += 10);
  }
}

// ---- --bench ----

// Device-to-device copy bandwidth (bytes read + written per second) of a 1 GiB buffer: the floor's bandwidth.
double copy_bandwidth() {
  const int64_t bytes = int64_t{1} << 30;
  Tensor src = Tensor::empty({bytes}, DType::kU8, Device::cuda()),
         dst = Tensor::empty({bytes}, DType::kU8, Device::cuda());
  CHECK(cudaMemset(src.raw_data(), 1, bytes) == cudaSuccess);
  const double us = gpu_testing::mean_call_us(
      [&](int) {
        CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), bytes, cudaMemcpyDeviceToDevice,
                              cuda::current_stream()) == cudaSuccess);
      },
      20);
  return 2.0 * bytes / (us * 1e-6);
}

// `copies` device copies of one host tensor: the bench cycles through them so that the weights it reads per call
// come from memory, not from the 50 MB L2.
std::vector<Tensor> device_copies(const Tensor& host, int copies) {
  std::vector<Tensor> out{to_device(host)};
  for (int i = 1; i < copies; ++i) {
    out.push_back(Tensor::empty(host.shape(), host.dtype(), Device::cuda()));
    CHECK(cudaMemcpy(out.back().raw_data(), out[0].raw_data(), host.nbytes(), cudaMemcpyDeviceToDevice) == cudaSuccess);
  }
  return out;
}

Tensor random_bytes(Shape shape, DType dtype, uint32_t seed) {  // fp8: no NaN pattern (S.1111.111)
  Tensor t = Tensor::empty(std::move(shape), dtype);
  std::mt19937 rng(seed);
  uint8_t* p = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i) {
    p[i] = static_cast<uint8_t>(rng());
    if (dtype == DType::kFP8E4M3 && (p[i] & 0x7f) == 0x7f) p[i] ^= 1;
  }
  return t;
}

// Dense FP8 tensor-core peak of this device: SMs x peak clock x 8192 FLOP per clock per SM (Hopper's e4m3 wgmma;
// bf16 is half). Only sm_90 has the figure here; 0 elsewhere.
double fp8_peak_flops() {
  int device = 0, major = 0, sms = 0, khz = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device);
  return major == 9 ? 8192.0 * sms * khz * 1e3 : 0.0;
}

// The prefill-sized GEMMs at the Mistral-7B MLP shapes (gate_up 28672 x 4096, down 4096 x 14336), m = 32 to 8192:
// TFLOP/s of bf16 ops::linear, fp8 per-token x per-channel and per-tensor, block-FP8 (group-128 x 128-block; by default
// and with LLMSERVE_DEEP_GEMM=0) and int8 per-token x per-channel ops::scaled_mm, each beside the FP8 peak
// (fp8_peak_flops), the SM clock NVML read while the row ran (whether the 700 W part held its peak clock: the mean of
// the samples, and the clock-event reasons seen), the rate of a large per-tensor fp8 GEMM (8192^3) measured in the
// same run, and the speed-up over bf16 of the same shape. NVML's reading is coarse for rows of ~10 ms (bench/
// RESULTS.md, 2026-12-02: rows of one kernel at m = 8192 read 1575-1948 MHz at the same TFLOP/s), so the share is
// taken of the peak clock's rate only.
void run_gemm_bench() {
  const double peak = fp8_peak_flops();
  unsigned long long reasons_seen = 0;
  // Mean microseconds per call and what NVML read while they ran.
  auto timed = [&](const std::function<void(int)>& f, int reps) {
    double us = 0;
    const gpu_testing::SmClockReading clock =
        gpu_testing::read_sm_clock_during([&] { us = gpu_testing::mean_call_us(f, reps); });
    reasons_seen |= clock.reasons;
    return std::pair<double, gpu_testing::SmClockReading>{us, clock};
  };
  auto tflops = [](int64_t m, int64_t n, int64_t k, double us) { return 2.0 * m * n * k / (us * 1e-6) / 1e12; };
  auto random_scales = [](Shape shape, uint32_t seed) {
    return to_device(random_tensor(std::move(shape), seed, DType::kF32, 1e-4f, 1e-3f));
  };
  double plain = 0;
  {
    const int64_t s = 8192;
    Tensor a = to_device(random_bytes({s, s}, DType::kFP8E4M3, 20)),
           b = to_device(random_bytes({s, s}, DType::kFP8E4M3, 21));
    Tensor one = to_device(Tensor::from_f32({1e-3f}, {1})), out = Tensor::empty({s, s}, DType::kBF16, Device::cuda());
    const auto [us, clock] = timed([&](int) { ops::scaled_mm(out, a, one, b, one, nullptr); }, 20);
    plain = tflops(s, s, s, us);
    std::printf(
        "FP8 dense peak (SMs x peak clock x 8192 FLOP/clk): %.0f TFLOP/s (NVML: SM clock max %u MHz); a per-tensor "
        "fp8 GEMM 8192^3 measured here: %.0f TFLOP/s (NVML: mean SM clock %.0f MHz, board power %.0f W)\n",
        peak / 1e12, gpu_testing::max_sm_clock_mhz(), plain, clock.mean_mhz, clock.mean_watts);
  }
  std::printf("%-26s %-20s %5s %10s %9s %9s %6s %10s %8s\n", "GEMM", "n x k", "m", "us", "TFLOP/s", "of peak", "MHz",
              "of 8192^3", "x bf16");
  struct Shape2 {
    const char* name;
    int64_t n, k;
  };
  for (const Shape2& sh : {Shape2{"gate_up", 28672, 4096}, Shape2{"down", 4096, 14336}}) {
    const int64_t n = sh.n, k = sh.k;
    char dims[32];
    std::snprintf(dims, sizeof(dims), "%s %lldx%lld", sh.name, static_cast<long long>(n), static_cast<long long>(k));
    Tensor w16 = to_device(random_tensor({n, k}, 22, DType::kF32, -0.05f, 0.05f).to(DType::kBF16));
    Tensor w8 = to_device(random_bytes({n, k}, DType::kFP8E4M3, 23)),
           wi8 = to_device(random_bytes({n, k}, DType::kI8, 24));
    Tensor w_channel = random_scales({n}, 25), w_tensor = random_scales({1}, 26);
    Tensor w_block = random_scales({(n + 127) / 128, k / 128}, 27);
    // The activations once at the largest m; each m takes their first rows (making ~100M random values per m
    // would dominate the bench's time).
    const int64_t max_m = 8192;
    const Tensor x16_all = to_device(random_tensor({max_m, k}, 28, DType::kBF16));
    const Tensor x8_all = to_device(random_bytes({max_m, k}, DType::kFP8E4M3, 29)),
                 xi8_all = to_device(random_bytes({max_m, k}, DType::kI8, 30));
    const Tensor x_token_all = random_scales({max_m, 1}, 31), x_tensor = random_scales({1}, 32),
                 x_group_all = random_scales({max_m, k / 128}, 33);
    Tensor out_all = Tensor::empty({max_m, n}, DType::kBF16, Device::cuda());
    // 256: the largest m of the 64-row-tile bucket; 32-1024: where block-FP8 switches from CUTLASS to DeepGEMM.
    for (int64_t m : {32, 128, 256, 512, 1024, 2048, 4096, 8192}) {
      const Tensor x16 = x16_all.slice(0, 0, m), x8 = x8_all.slice(0, 0, m), xi8 = xi8_all.slice(0, 0, m);
      const Tensor x_token = x_token_all.slice(0, 0, m), x_group = x_group_all.slice(0, 0, m);
      Tensor out = out_all.slice(0, 0, m);
      const int reps = 10;
      const auto [bf16_us, bf16_clock] = timed([&](int) { ops::linear(out, x16, w16, nullptr); }, reps);
      // "of peak": of this dtype's dense tensor-core peak (bf16: half the fp8 / int8 one); MHz: NVML's mean reading.
      auto report = [&](const char* kernel, double us, double mhz, double dtype_peak) {
        const double t = tflops(m, n, k, us);
        std::printf("%-26s %-20s %5lld %10.1f %9.0f %8.0f%% %6.0f %9.0f%% %8.2f\n", kernel, dims,
                    static_cast<long long>(m), us, t, dtype_peak > 0 ? 100.0 * t * 1e12 / dtype_peak : 0.0, mhz,
                    100.0 * t / plain, bf16_us / us);
      };
      report("bf16 linear", bf16_us, bf16_clock.mean_mhz, peak / 2);
      auto scaled = [&](const char* kernel, const Tensor& x, const Tensor& xs, const Tensor& w, const Tensor& ws) {
        const auto [us, clock] = timed([&](int) { ops::scaled_mm(out, x, xs, w, ws, nullptr); }, reps);
        report(kernel, us, clock.mean_mhz, peak);
      };
      scaled("fp8 per-token x channel", x8, x_token, w8, w_channel);
      scaled("fp8 per-tensor", x8, x_tensor, w8, w_tensor);
      scaled("block-fp8 group x 128-blk", x8, x_group, w8, w_block);
      setenv("LLMSERVE_DEEP_GEMM", "0", 1);  // the same op without DeepGEMM: CUTLASS's blockwise kernel
      scaled("block-fp8 (CUTLASS)", x8, x_group, w8, w_block);
      unsetenv("LLMSERVE_DEEP_GEMM");
      scaled("int8 per-token x channel", xi8, x_token, wi8, w_channel);
    }
  }
  std::printf("NVML clock-event reasons seen while the rows ran: %s\n\n",
              gpu_testing::clock_reasons_text(reasons_seen).c_str());
}

// The W4A16 GEMM (ops::w4a16_gemm on the packed layout: CUTLASS's mixed-input GEMM) at the Mistral-7B shapes and
// m = 32, 64, 256, 2048 beside the bf16 GEMM (ops::linear) of the same shape and w4a16_linear (the GEMV at m = 32, the
// dequantize + cuBLASLt path above): microseconds, TFLOP/s, the floor (the larger of the bytes at the copy bandwidth
// and 2 m n k at DESIGN.md's 790 TFLOP/s bf16 rate) and the share of it, and the speed-up over bf16.
void run_w4a16_gemm_bench(double bandwidth) {
  constexpr double kPeakFlops = 790e12;
  std::printf(
      "\nW4A16 GEMM (g128) vs bf16 at the Mistral-7B shapes; floor = max(bytes / %.0f GB/s, 2mnk / 790 "
      "TFLOP/s)\n",
      bandwidth / 1e9);
  std::printf("%-26s %-12s %5s %10s %8s %10s %9s %8s\n", "kernel", "n x k", "m", "us", "TFLOP/s", "floor us",
              "of floor", "vs bf16");
  struct Shape2 {
    const char* name;
    int64_t n, k;
  };
  const Shape2 shapes[] = {
      {"qkv", 6144, 4096}, {"o_proj", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};
  for (const Shape2& sh : shapes) {
    const int64_t n = sh.n, k = sh.k, groups = k / 128;
    char dims[32];
    std::snprintf(dims, sizeof(dims), "%lldx%lld", static_cast<long long>(n), static_cast<long long>(k));
    auto copies_for = [](double bytes) { return static_cast<int>(std::max(2.0, std::ceil(400e6 / bytes))); };
    std::vector<Tensor> w16 =
        device_copies(random_tensor({n, k}, 1, DType::kF32, -0.05f, 0.05f).to(DType::kBF16), copies_for(2.0 * n * k));
    const int copies = copies_for(0.5 * n * k);
    std::vector<Tensor> q = device_copies(random_bytes({n, k / 2}, DType::kU8, 6), copies);
    Tensor scales = to_device(random_tensor({n, groups}, 7, DType::kF32, 0.005f, 0.05f));
    Tensor zeros_host = random_bytes({n, groups}, DType::kU8, 8);
    for (size_t i = 0; i < zeros_host.nbytes(); ++i) zeros_host.data<uint8_t>()[i] %= 16;
    Tensor zeros = to_device(zeros_host);
    std::vector<Tensor> packed;
    Tensor gs = Tensor::empty({groups, n}, DType::kBF16, Device::cuda());
    Tensor gz = Tensor::empty({groups, n}, DType::kBF16, Device::cuda());
    for (const Tensor& qi : q) {
      packed.push_back(Tensor::empty({k / 16, 8 * n}, DType::kU8, Device::cuda()));
      ops::w4a16_gemm_pack(packed.back(), gs, gz, qi, scales, zeros);
    }
    for (int64_t m : {32, 64, 256, 2048}) {
      Tensor x = to_device(random_tensor({m, k}, 10, DType::kBF16));
      Tensor out = Tensor::empty({m, n}, DType::kBF16, Device::cuda());
      const double act_bytes = 2.0 * m * k + 2.0 * m * n, flop_us = 2.0 * m * n * k / kPeakFlops * 1e6;
      const int reps = m >= 2048 ? 50 : 200;
      const double bf16_us =
          gpu_testing::mean_call_us([&](int i) { ops::linear(out, x, w16[i % w16.size()], nullptr); }, reps);
      auto report = [&](const char* kernel, double us, double bytes) {
        const double floor_us = std::max(bytes / bandwidth * 1e6, flop_us);
        std::printf("%-26s %-12s %5lld %10.2f %8.1f %10.2f %8.0f%% %7.2fx\n", kernel, dims, static_cast<long long>(m),
                    us, 2.0 * m * n * k / us / 1e6, floor_us, 100.0 * floor_us / us, bf16_us / us);
      };
      report("bf16 linear", bf16_us, 2.0 * n * k + act_bytes);
      const double q_bytes = 0.5 * n * k + act_bytes;
      report(m <= 32 ? "w4a16_linear (GEMV)" : "w4a16_linear (dequant)",
             gpu_testing::mean_call_us(
                 [&](int i) { ops::w4a16_linear(out, x, q[i % q.size()], scales, zeros, nullptr, nullptr); }, reps),
             q_bytes + 5.0 * n * groups);
      report(
          "w4a16_gemm gptq sym",
          gpu_testing::mean_call_us(
              [&](int i) { ops::w4a16_gemm(out, x, packed[i % packed.size()], gs, nullptr, nullptr, nullptr); }, reps),
          q_bytes + 2.0 * n * groups);
      report("w4a16_gemm awq (zeros)",
             gpu_testing::mean_call_us(
                 [&](int i) { ops::w4a16_gemm(out, x, packed[i % packed.size()], gs, &gz, nullptr, nullptr); }, reps),
             q_bytes + 4.0 * n * groups);
    }
  }
}

// Each GEMV at the Mistral-7B linear shapes, m = 1, 4, 16 (and 32 for bf16 and W4A16: batch-32 decode): microseconds
// per call, the bytes it must read (weights, their scales and zeros), GB/s, and the share of the floor (those bytes at
// the copy bandwidth). fp8 / int8 also with the per-token activation quantization that precedes them in a model
// (`+quant`).
int run_bench(bool gemv_only) {
  if (!gemv_only) run_gemm_bench();
  const double bandwidth = copy_bandwidth();
  std::printf("device-to-device copy bandwidth: %.0f GB/s (the floor's)\n", bandwidth / 1e9);
  std::printf("%-22s %-12s %3s %10s %10s %8s %9s %10s %9s\n", "kernel", "n x k", "m", "us", "MB", "GB/s", "of floor",
              "us +quant", "of floor");
  struct Shape2 {
    const char* name;
    int64_t n, k;
  };
  const Shape2 shapes[] = {
      {"qkv", 6144, 4096}, {"o_proj", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};
  const int reps = 200;
  for (const Shape2& sh : shapes) {
    const int64_t n = sh.n, k = sh.k, groups = k / 128;
    char dims[32];
    std::snprintf(dims, sizeof(dims), "%lldx%lld", static_cast<long long>(n), static_cast<long long>(k));
    auto copies_for = [](double bytes) { return static_cast<int>(std::max(2.0, std::ceil(400e6 / bytes))); };
    auto report = [&](const char* kernel, int64_t m, double bytes, double us, double us_quant) {
      const double floor_us = bytes / bandwidth * 1e6;
      std::printf("%-22s %-12s %3lld %10.2f %10.2f %8.0f %8.0f%%", kernel, dims, static_cast<long long>(m), us,
                  bytes / 1e6, bytes / us / 1e3, 100.0 * floor_us / us);
      if (us_quant > 0) std::printf(" %10.2f %8.0f%%", us_quant, 100.0 * floor_us / us_quant);
      std::printf("\n");
    };
    // bf16: ops::linear (the GEMV at m = 1, cuBLASLt above).
    {
      const double bytes = 2.0 * n * k;
      std::vector<Tensor> w =
          device_copies(random_tensor({n, k}, 1, DType::kF32, -0.05f, 0.05f).to(DType::kBF16), copies_for(bytes));
      for (int64_t m : {1, 4, 16, 32}) {
        Tensor x = to_device(random_tensor({m, k}, 2, DType::kBF16));
        Tensor out = Tensor::empty({m, n}, DType::kBF16, Device::cuda());
        const double us =
            gpu_testing::mean_call_us([&](int i) { ops::linear(out, x, w[i % w.size()], nullptr); }, reps);
        report("bf16 linear", m, bytes, us, 0);
      }
    }
    // fp8 per-channel weights x dynamic per-token activations; int8 the same.
    for (DType qtype : {DType::kFP8E4M3, DType::kI8}) {
      const double bytes = 1.0 * n * k + 4.0 * n;
      std::vector<Tensor> w = device_copies(random_bytes({n, k}, qtype, 3), copies_for(bytes));
      Tensor ws = to_device(random_tensor({n}, 4, DType::kF32, 1e-4f, 1e-3f));
      for (int64_t m : {1, 4, 16}) {
        Tensor x = to_device(random_tensor({m, k}, 5, DType::kBF16));
        Tensor xq = Tensor::empty({m, k}, qtype, Device::cuda()),
               xs = Tensor::empty({m, 1}, DType::kF32, Device::cuda());
        Tensor out = Tensor::empty({m, n}, DType::kBF16, Device::cuda());
        ops::dynamic_scaled_quantize(xq, xs, x);
        const double us =
            gpu_testing::mean_call_us([&](int i) { ops::scaled_mm(out, xq, xs, w[i % w.size()], ws, nullptr); }, reps);
        const double us_quant = gpu_testing::mean_call_us(
            [&](int i) {
              ops::dynamic_scaled_quantize(xq, xs, x);
              ops::scaled_mm(out, xq, xs, w[i % w.size()], ws, nullptr);
            },
            reps);
        report(qtype == DType::kFP8E4M3 ? "fp8 per-channel" : "int8 per-channel", m, bytes, us, us_quant);
      }
    }
    // W4A16 group 128: GPTQ (zeros 1..16 after load), GPTQ act-order (x gathered first), AWQ (zeros 0..15). The
    // op sees the same layout for all three; the zeros differ only in value.
    {
      const double bytes = 0.5 * n * k + 5.0 * n * groups;
      std::vector<Tensor> q = device_copies(random_bytes({n, k / 2}, DType::kU8, 6), copies_for(bytes));
      Tensor scales = to_device(random_tensor({n, groups}, 7, DType::kF32, 0.005f, 0.05f));
      Tensor zeros_host = random_bytes({n, groups}, DType::kU8, 8);
      for (size_t i = 0; i < zeros_host.nbytes(); ++i) zeros_host.data<uint8_t>()[i] %= 16;
      Tensor zeros_awq = to_device(zeros_host);  // 0..15; GPTQ's are its stored zeros (0..15) + 1
      for (size_t i = 0; i < zeros_host.nbytes(); ++i) zeros_host.data<uint8_t>()[i] += 1;
      Tensor zeros_gptq = to_device(zeros_host);
      std::vector<int32_t> p(k);
      std::iota(p.begin(), p.end(), 0);
      std::shuffle(p.begin(), p.end(), std::mt19937(9));
      Tensor perm = to_device(Tensor::from_i32(p, {k}));
      for (int64_t m : {1, 4, 16, 32}) {
        Tensor x = to_device(random_tensor({m, k}, 10, DType::kBF16));
        Tensor out = Tensor::empty({m, n}, DType::kBF16, Device::cuda());
        for (int variant = 0; variant < 3; ++variant) {
          const Tensor& zeros = variant == 2 ? zeros_awq : zeros_gptq;
          const Tensor* pm = variant == 1 ? &perm : nullptr;
          const double us = gpu_testing::mean_call_us(
              [&](int i) { ops::w4a16_linear(out, x, q[i % q.size()], scales, zeros, pm, nullptr); }, reps);
          report(variant == 0 ? "gptq g128" : variant == 1 ? "gptq g128 act-order" : "awq g128", m, bytes, us, 0);
        }
      }
    }
  }
  if (gemv_only) return 0;
  run_w4a16_gemm_bench(bandwidth);
  run_fused_quant_bench(bandwidth);
  return 0;
}

}  // namespace
}  // namespace llmserve

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const bool gemm_only = std::strcmp(argv[i], "--bench-gemm") == 0;
    const bool gemv_only = std::strcmp(argv[i], "--bench-gemv") == 0;
    if (gemm_only || gemv_only || std::strcmp(argv[i], "--bench") == 0) {
      if (!llmserve::gpu_testing::have_cuda_device()) {
        std::fprintf(stderr, "quant_gpu_test %s: no CUDA device\n", argv[i]);
        return 1;
      }
      if (!gemm_only) return llmserve::run_bench(gemv_only);
      llmserve::run_gemm_bench();
      return 0;
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

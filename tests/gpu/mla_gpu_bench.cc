// `mla_gpu_test --bench`: MLA decode attention at DeepSeek-V3's shape (128 heads, L 512, R 64, bf16, block 16; and
// 16 heads, V3 under tensor parallel 8) at 4k context for batch 1, 16 and 64, each row beside its bandwidth floor (the
// latent rows read once, at the device copy bandwidth measured in the same run) and with its tensor-core FLOP rate
// (QK^T over 576 and PV over 512 columns per head and row: ~242 FLOP per cache byte at 128 heads, near the H200's
// tensor-core / bandwidth balance, so both columns matter); both head groupings of the kernel, split-K on and off. Then
// a 2048-token prefill beside the bf16 matmul rate of the same run. Each decode call reads a different slice of a >=
// 512 MB cache so L2 never holds it; times are means of back-to-back calls with CUDA events.
// Then the same decode shapes on the tensor-core kernel (its default grouping, split-K) beside FlashInfer's SM90 kernel
// (mla_attention_sm90.cu) over work lists planned once on the host before the timed calls (one plan serves every
// block table: the lists hold lengths and table rows, not blocks), with its FLOP floor at the bf16 peak and the SM
// clock NVML read meanwhile; `--bench-mla-sm90` prints only that table.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "sm_clock_meter.h"

namespace llmserve {
namespace {

#define BENCH_CHECK(x) CHECK((x) == cudaSuccess) << #x << ": " << cudaGetErrorString(cudaGetLastError())

constexpr int kPrefillHeads = 128, kLatent = 512, kRope = 64, kRow = kLatent + kRope, kBlock = 16;

// Device-to-device copy of 1 GiB: (read + write) bytes per second.
double copy_bandwidth_gbs() {
  const size_t bytes = size_t{1} << 30;
  void *src = nullptr, *dst = nullptr;
  BENCH_CHECK(cudaMalloc(&src, bytes));
  BENCH_CHECK(cudaMalloc(&dst, bytes));
  BENCH_CHECK(cudaMemset(src, 1, bytes));
  const double us = gpu_testing::mean_call_us(
      [&](int) { BENCH_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda::current_stream())); },
      10);
  BENCH_CHECK(cudaFree(src));
  BENCH_CHECK(cudaFree(dst));
  return 2.0 * bytes / us * 1e-3;
}

// A [num_blocks, block, row] bf16 cache of random (non-zero) contents, filled from a 64 MiB device pattern.
Tensor random_cache(int64_t num_blocks) {
  Tensor cache = Tensor::empty({num_blocks, kBlock, kRow}, DType::kBF16, Device::cuda());
  const int64_t chunk = 32 << 20;
  Tensor pattern = gpu_testing::to_device(testing::random_tensor({chunk}, 5, DType::kBF16));
  for (int64_t off = 0; off < cache.numel(); off += chunk) {
    const int64_t n = std::min(chunk, cache.numel() - off);
    BENCH_CHECK(cudaMemcpy(static_cast<char*>(cache.raw_data()) + off * 2, pattern.raw_data(), n * 2,
                           cudaMemcpyDeviceToDevice));
  }
  return cache;
}

struct DecodeRow {
  double us, cache_bytes, flops;
  bool sm90_ran = false;  // every timed call took the SM90 kernel
  double mhz = 0;         // the mean SM clock NVML read during the calls (0: NVML unavailable)
};

// The SM90 kernel's work lists for a decode batch (plan outside the timed loop), uploaded to the device; the split-K
// partials bounded by the workspace (after its counters). num_works 0 when the device is not sm_90.
ops::MlaSchedule plan_decode(const std::vector<int32_t>& qsl, const std::vector<int32_t>& seq, int heads,
                             int64_t table_stride, const Tensor& workspace) {
  const int64_t ctas = ops::sm90_mla_ctas(Device::cuda());
  if (ctas == 0) return {};
  const int64_t num_reqs = static_cast<int64_t>(seq.size());
  const int64_t width = ops::mla_schedule_width(qsl.back(), num_reqs, heads, ctas);
  int64_t max_partial_rows = 0;
  if (workspace.defined()) {
    const int64_t scratch = (workspace.numel() - ops::kPagedAttentionWorkspaceCounters) * int64_t{sizeof(float)};
    max_partial_rows = ops::mla_partial_capacity(scratch, kLatent, 2);
  }
  std::vector<int32_t> rows(static_cast<size_t>(ops::kMlaScheduleRows * width));
  ops::MlaSchedule s = ops::plan_mla_schedule(rows.data(), width, qsl.data(), seq.data(), num_reqs, table_stride, heads,
                                              ctas, max_partial_rows);
  s.rows = gpu_testing::to_device(Tensor::from_i32(rows, {ops::kMlaScheduleRows, width}));
  return s;
}

// heads_per_cta: the tensor-core kernel's grouping (0: its default); sm90: FlashInfer's kernel instead.
DecodeRow bench_decode(int heads, int batch, int ctx, int heads_per_cta, bool split, bool sm90 = false) {
  const int blocks_per_seq = (ctx + kBlock - 1) / kBlock;
  const double cache_bytes = static_cast<double>(batch) * ctx * kRow * 2;
  const int sets = std::max(2, static_cast<int>(512e6 / cache_bytes));  // consecutive calls never share L2 data
  Tensor cache = random_cache(static_cast<int64_t>(sets) * batch * blocks_per_seq);
  std::vector<int32_t> qsl(batch + 1), seq(batch, ctx);
  std::iota(qsl.begin(), qsl.end(), 0);
  std::vector<Tensor> tables;
  for (int s = 0; s < sets; ++s) {
    std::vector<int32_t> t(static_cast<size_t>(batch) * blocks_per_seq);
    std::iota(t.begin(), t.end(), s * batch * blocks_per_seq);
    tables.push_back(gpu_testing::to_device(Tensor::from_i32(t, {batch, blocks_per_seq})));
  }
  ops::AttentionMetadata md;
  md.query_start_loc = gpu_testing::to_device(Tensor::from_i32(qsl, {batch + 1}));
  md.seq_lens = gpu_testing::to_device(Tensor::from_i32(seq, {batch}));
  md.num_reqs = batch;
  md.num_decode_tokens = batch;
  md.max_query_len = 1;
  md.max_seq_len = ctx;
  if (split) {
    const int64_t elems = ops::paged_attention_workspace_elems(batch, heads, kLatent, ctx);
    if (elems > 0) md.workspace = Tensor::zeros({elems}, DType::kF32, Device::cuda());  // counters start at 0
  }
  Tensor q = gpu_testing::to_device(testing::random_tensor({batch, heads, kRow}, 6, DType::kBF16, -2.f, 2.f));
  Tensor out = Tensor::empty({batch, heads, kLatent}, DType::kBF16, Device::cuda());
  if (sm90) {
    md.mla_schedule = plan_decode(qsl, seq, heads, blocks_per_seq, md.workspace);
    if (md.mla_schedule.num_works == 0) return {0, cache_bytes, 0, false};
  }
  cuda::set_mla_heads_per_cta(heads_per_cta);
  const float scale = 1.f / std::sqrt(192.f);
  constexpr int kReps = 50;
  const int64_t sm90_before = cuda::mla_sm90_calls();
  double us = 0;
  const gpu_testing::SmClockReading clock = gpu_testing::read_sm_clock_during([&] {
    us = gpu_testing::mean_call_us(
        [&](int i) {
          md.block_table = tables[i % sets];
          ops::mla_attention(out, q, cache, md, scale);
        },
        kReps);
  });
  cuda::set_mla_heads_per_cta(0);
  const double flops = 2.0 * batch * ctx * heads * (kRow + kLatent);
  return {us, cache_bytes, flops, cuda::mla_sm90_calls() - sm90_before == kReps + 1,  // + mean_call_us's warm-up
          clock.mean_mhz};
}

// The decode shapes on the tensor-core kernel (default grouping, split-K) and the SM90 kernel; floor and FLOP rate
// as in run_bench's decode table. At 128 heads the FLOPs set a floor as high as the bytes' (~242 FLOP per cache byte):
// the SM90 rows also print the FLOP floor at the bf16 tensor-core peak (SMs x peak clock x 4096 FLOP per clock), their
// share of the larger of the two floors, and the SM clock NVML read while they ran.
void print_sm90_table(double copy_gbs) {
  int sms = 0, khz = 0;
  BENCH_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  BENCH_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  const double bf16_peak = 4096.0 * sms * khz * 1e3;  // FLOP/s
  std::printf(
      "MLA decode attention, the tensor-core kernel (default heads / CTA, split-K) vs FlashInfer's SM90 kernel\n"
      "(planned work lists), DeepSeek-V3 rows (L 512, R 64), bf16, block %d, context 4096;\n"
      "floor = latent rows read once / copy bandwidth; FLOP = 2 x heads x rows x (576 + 512); FLOP floor = FLOP at\n"
      "the bf16 peak, %d SMs x %d MHz x 4096 FLOP per clock = %.0f TFLOP/s; MHz: NVML's mean SM clock during the "
      "calls\n",
      kBlock, sms, khz / 1000, bf16_peak * 1e-12);
  std::printf(
      "| heads | batch | kernel | us / call | cache MB | floor us | of floor | TFLOP/s | vs tensor-core | MHz | FLOP "
      "floor us | of the larger floor |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int heads : {128, 16}) {
    for (int batch : {1, 16, 64}) {
      const DecodeRow mma = bench_decode(heads, batch, 4096, 0, true);
      const DecodeRow sm90 = bench_decode(heads, batch, 4096, 0, true, true);
      const double floor_us = mma.cache_bytes / copy_gbs * 1e-3;
      std::printf("| %d | %d | tensor-core | %.1f | %.1f | %.1f | %.0f%% | %.0f | |\n", heads, batch, mma.us,
                  mma.cache_bytes * 1e-6, floor_us, 100.0 * floor_us / mma.us, mma.flops / mma.us * 1e-6);
      if (!sm90.sm90_ran) {
        std::printf("| %d | %d | SM90 | not run (no sm_90 device, or a call fell back to another kernel) |\n", heads,
                    batch);
        continue;
      }
      const double flop_floor_us = sm90.flops / bf16_peak * 1e6;
      std::printf("| %d | %d | SM90 | %.1f | %.1f | %.1f | %.0f%% | %.0f | %.2fx | %.0f | %.1f | %.0f%% |\n", heads,
                  batch, sm90.us, sm90.cache_bytes * 1e-6, floor_us, 100.0 * floor_us / sm90.us,
                  sm90.flops / sm90.us * 1e-6, mma.us / sm90.us, sm90.mhz, flop_floor_us,
                  100.0 * std::max(floor_us, flop_floor_us) / sm90.us);
    }
  }
}

// One causal prefill of `len` tokens on an empty context; returns microseconds per call.
double bench_prefill(int len, int heads_per_cta) {
  const int blocks = (len + kBlock - 1) / kBlock;
  Tensor cache = random_cache(blocks);
  std::vector<int32_t> t(blocks);
  std::iota(t.begin(), t.end(), 0);
  ops::AttentionMetadata md;
  md.query_start_loc = gpu_testing::to_device(Tensor::from_i32({0, len}, {2}));
  md.seq_lens = gpu_testing::to_device(Tensor::from_i32({len}, {1}));
  md.block_table = gpu_testing::to_device(Tensor::from_i32(t, {1, blocks}));
  md.num_reqs = 1;
  md.max_query_len = len;
  md.max_seq_len = len;
  Tensor q = gpu_testing::to_device(testing::random_tensor({len, kPrefillHeads, kRow}, 9, DType::kBF16, -2.f, 2.f));
  Tensor out = Tensor::empty({len, kPrefillHeads, kLatent}, DType::kBF16, Device::cuda());
  cuda::set_mla_heads_per_cta(heads_per_cta);
  const double us =
      gpu_testing::mean_call_us([&](int) { ops::mla_attention(out, q, cache, md, 1.f / std::sqrt(192.f)); }, 5);
  cuda::set_mla_heads_per_cta(0);
  return us;
}

// ops::linear (cuBLASLt) in bf16 at 8192^3 on random data: the tensor-core rate the prefill row is read against.
double bench_matmul_tflops() {
  constexpr int64_t n = 8192;
  Tensor x = gpu_testing::to_device(testing::random_tensor({n, n}, 11, DType::kBF16));
  Tensor w = gpu_testing::to_device(testing::random_tensor({n, n}, 12, DType::kBF16));
  Tensor out = Tensor::empty({n, n}, DType::kBF16, Device::cuda());
  const double us = gpu_testing::mean_call_us([&](int) { ops::linear(out, x, w, nullptr); }, 5);
  return 2.0 * n * n * n / us * 1e-6;
}

}  // namespace

int run_bench() {
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy = copy_bandwidth_gbs();
  const double matmul = bench_matmul_tflops();
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  std::printf("copy bandwidth (D2D 1 GiB, read + write): %.0f GB/s\n", copy);
  std::printf("matmul rate (ops::linear / cuBLASLt, bf16, 8192^3, random data): %.0f TFLOP/s\n\n", matmul);
  std::printf(
      "MLA decode attention, DeepSeek-V3 rows (L 512, R 64), bf16, block %d, context 4096: 128 heads (one GPU) and 16\n"
      "(tensor parallel 8: ~30 FLOP per byte, bandwidth-bound); floor = latent rows read once / copy bandwidth;\n"
      "FLOP = 2 x heads x rows x (576 + 512)\n",
      kBlock);
  std::printf(
      "| heads | batch | heads / CTA | split-K | us / call | cache MB | floor us | GB/s | of floor | TFLOP/s | of "
      "matmul "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  struct Spec {
    int heads, batch, heads_per_cta;
    bool split;
  };
  const Spec specs[] = {{128, 1, 64, true},   {128, 1, 16, true},   {128, 1, 64, false}, {128, 16, 64, true},
                        {128, 16, 16, true},  {128, 16, 64, false}, {128, 64, 64, true}, {128, 64, 16, true},
                        {128, 64, 64, false}, {16, 1, 16, true},    {16, 16, 16, true},  {16, 64, 16, true},
                        {16, 64, 16, false}};
  for (const Spec& sp : specs) {
    const DecodeRow r = bench_decode(sp.heads, sp.batch, 4096, sp.heads_per_cta, sp.split);
    const double floor_us = r.cache_bytes / copy * 1e-3, tflops = r.flops / r.us * 1e-6;
    std::printf("| %d | %d | %d | %s | %.1f | %.1f | %.1f | %.0f | %.0f%% | %.0f | %.0f%% |\n", sp.heads, sp.batch,
                sp.heads_per_cta, sp.split ? "yes" : "no", r.us, r.cache_bytes * 1e-6, floor_us,
                r.cache_bytes / r.us * 1e-3, 100.0 * floor_us / r.us, tflops, 100.0 * tflops / matmul);
  }
  std::printf(
      "\nMLA prefill attention (one causal 2048-token prompt, empty context), 128 heads, bf16; every token is its\n"
      "own query (it re-reads its prefix: L2); floor = the causal FLOPs at the matmul rate\n");
  std::printf("| tokens | heads / CTA | us / call | TFLOP/s | of matmul |\n|---|---|---|---|---|\n");
  for (int hpc : {64, 16}) {
    const int len = 2048;
    const double us = bench_prefill(len, hpc);
    const double flops = 2.0 * kPrefillHeads * (kRow + kLatent) * len * (len + 1.0) / 2;
    std::printf("| %d | %d | %.0f | %.0f | %.0f%% |\n", len, hpc, us, flops / us * 1e-6,
                100.0 * flops / us * 1e-6 / matmul);
  }
  std::printf("\n");
  print_sm90_table(copy);
  return 0;
}

// `--bench-mla-sm90`: the copy bandwidth (the floor's) and the decode comparison only.
int run_bench_sm90() {
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy = copy_bandwidth_gbs();
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  std::printf("copy bandwidth (D2D 1 GiB, read + write): %.0f GB/s\n\n", copy);
  print_sm90_table(copy);
  return 0;
}

}  // namespace llmserve

// `attention_gpu_test --bench`: decode paged-attention bandwidth vs the measured device copy bandwidth
// (DESIGN.md section 4), bf16, block 16. Shapes: M = Mistral-7B attention (32 query heads, 8 kv heads, head_dim
// 128) at batch 1 and 128, contexts 256 and 2048, and batch 64 / 256 at context 1024 (serving / offline steps);
// S = the 1.1B model (32 / 8 heads, head_dim 64) at batch 1 context 256 and batch 128 contexts 192 and 256. Each row
// prints its floor (K+V bytes / copy bandwidth) and the ratio. Bytes counted: K and V of every context token once
// (query and output are < 1% here). Each timed call reads a different slice of a >= 512 MB cache so L2 (50-60 MB)
// never holds the data; times are medians of 15 samples of 20 back-to-back calls, with CUDA events. Also the
// prefill kernel's TFLOP/s on causal prompts: one of 512, 2048, 8192 tokens and 8 of 1024 (M), one of 2048 (S), and
// 64 of 48 (M: short chunks, where fixed costs dominate), each beside the bf16 matmul rate measured in the same run.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

#include "../kernels/test_util.h"
#include "core/cuda_stream.h"
#include "kernels/ops.h"

namespace llmserve {
namespace {

#define BENCH_CHECK(x) CHECK((x) == cudaSuccess) << #x << ": " << cudaGetErrorString(cudaGetLastError())

Tensor upload(const Tensor& host) {
  Tensor dev = Tensor::empty(host.shape(), host.dtype(), Device::cuda());
  BENCH_CHECK(cudaMemcpy(dev.raw_data(), host.raw_data(), host.nbytes(), cudaMemcpyHostToDevice));
  return dev;
}

// Median of samples of `calls` calls of fn, in microseconds per call.
template <typename Fn>
double time_us(Fn fn, int calls) {
  cudaStream_t stream = cuda::current_stream();
  cudaEvent_t a, b;
  BENCH_CHECK(cudaEventCreate(&a));
  BENCH_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) fn(i);  // warm-up: module load, attribute setup
  std::vector<double> samples;
  for (int s = 0; s < 15; ++s) {
    BENCH_CHECK(cudaEventRecord(a, stream));
    for (int i = 0; i < calls; ++i) fn(s * calls + i);
    BENCH_CHECK(cudaEventRecord(b, stream));
    BENCH_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    BENCH_CHECK(cudaEventElapsedTime(&ms, a, b));
    samples.push_back(1e3 * ms / calls);
  }
  BENCH_CHECK(cudaEventDestroy(a));
  BENCH_CHECK(cudaEventDestroy(b));
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

// Device-to-device copy of 1 GiB: (read + write) bytes per second.
double copy_bandwidth_gbs() {
  const size_t bytes = size_t{1} << 30;
  void *src = nullptr, *dst = nullptr;
  BENCH_CHECK(cudaMalloc(&src, bytes));
  BENCH_CHECK(cudaMalloc(&dst, bytes));
  BENCH_CHECK(cudaMemset(src, 1, bytes));
  const double us = time_us(
      [&](int) { BENCH_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda::current_stream())); }, 2);
  BENCH_CHECK(cudaFree(src));
  BENCH_CHECK(cudaFree(dst));
  return 2.0 * bytes / us * 1e-3;
}

// Attention shapes of the two models: M (Mistral-7B: 32 / 8 heads, head_dim 128) and S (1.1B: 32 / 8
// heads, head_dim 64).
struct Shape3 {
  const char* name;
  int num_heads, num_kv_heads, head_dim;
};
constexpr Shape3 kShapeM{"M", 32, 8, 128}, kShapeS{"S", 32, 8, 64};

struct Row {
  int batch, ctx;
  bool split;
  double us, kv_bytes;
};

Row bench_decode(const Shape3& shape, int batch, int ctx, bool split) {
  const int nh = shape.num_heads, nkv = shape.num_kv_heads, hd = shape.head_dim, bs = 16;
  const int blocks_per_seq = (ctx + bs - 1) / bs;
  const double kv_bytes = 2.0 * batch * ctx * nkv * hd * 2;  // K and V, bf16
  // Enough disjoint block sets that consecutive calls never share data in L2.
  const int sets = std::max(2, static_cast<int>(512e6 / kv_bytes));
  const int num_blocks = sets * batch * blocks_per_seq;
  const Shape cs{num_blocks, bs, nkv, hd};
  Tensor kc = Tensor::empty(cs, DType::kBF16, Device::cuda()), vc = Tensor::empty(cs, DType::kBF16, Device::cuda());
  // Random (non-zero) contents, filled once from a 64 MiB host pattern.
  {
    const int64_t chunk = 32 << 20;
    Tensor pattern = upload(testing::random_tensor({chunk}, 5, DType::kBF16));
    for (Tensor* t : {&kc, &vc}) {
      for (int64_t off = 0; off < t->numel(); off += chunk) {
        const int64_t n = std::min(chunk, t->numel() - off);
        BENCH_CHECK(cudaMemcpy(static_cast<char*>(t->raw_data()) + off * 2, pattern.raw_data(), n * 2,
                               cudaMemcpyDeviceToDevice));
      }
    }
  }
  std::vector<int32_t> qsl(batch + 1), seq(batch, ctx);
  std::iota(qsl.begin(), qsl.end(), 0);
  std::vector<Tensor> tables;
  for (int s = 0; s < sets; ++s) {
    std::vector<int32_t> t(static_cast<size_t>(batch) * blocks_per_seq);
    std::iota(t.begin(), t.end(), s * batch * blocks_per_seq);
    tables.push_back(upload(Tensor::from_i32(t, {batch, blocks_per_seq})));
  }
  ops::AttentionMetadata md;
  md.query_start_loc = upload(Tensor::from_i32(qsl, {batch + 1}));
  md.seq_lens = upload(Tensor::from_i32(seq, {batch}));
  md.num_reqs = batch;
  md.num_decode_tokens = batch;
  md.max_query_len = 1;
  md.max_seq_len = ctx;
  if (split) {
    const int64_t elems = ops::paged_attention_workspace_elems(batch, nh, hd, ctx);
    if (elems > 0) md.workspace = Tensor::zeros({elems}, DType::kF32, Device::cuda());  // counters start at 0
  }
  Tensor q = upload(testing::random_tensor({batch, nh, hd}, 6, DType::kBF16));
  Tensor out = Tensor::empty({batch, nh, hd}, DType::kBF16, Device::cuda());
  const double us = time_us(
      [&](int i) {
        md.block_table = tables[i % sets];
        ops::paged_attention(out, q, kc, vc, md, 0.088f, 0);
      },
      20);
  return {batch, ctx, split, us, kv_bytes};
}

// `prompts` causal prefills of `len` new tokens each on empty contexts, in one call; returns achieved TFLOP/s
// counting QK^T and PV over the causal triangles only (4 * head_dim * num_heads * len * (len + 1) / 2 FLOP each).
double bench_prefill_tflops(const Shape3& shape, int prompts, int len, double* us_out) {
  const int nh = shape.num_heads, nkv = shape.num_kv_heads, hd = shape.head_dim, bs = 16;
  const int blocks_per = (len + bs - 1) / bs, blocks = prompts * blocks_per;
  const Shape cs{blocks, bs, nkv, hd};
  Tensor kc = upload(testing::random_tensor(cs, 7, DType::kBF16));
  Tensor vc = upload(testing::random_tensor(cs, 8, DType::kBF16));
  std::vector<int32_t> t(blocks), starts(prompts + 1), seqs(prompts, len);
  std::iota(t.begin(), t.end(), 0);
  for (int i = 0; i <= prompts; ++i) starts[i] = i * len;
  ops::AttentionMetadata md;
  md.query_start_loc = upload(Tensor::from_i32(starts, {prompts + 1}));
  md.seq_lens = upload(Tensor::from_i32(seqs, {prompts}));
  md.block_table = upload(Tensor::from_i32(t, {prompts, blocks_per}));
  md.num_reqs = prompts;
  md.max_query_len = len;
  md.max_seq_len = len;
  Tensor q = upload(testing::random_tensor({prompts * len, nh, hd}, 9, DType::kBF16, -2.f, 2.f));
  Tensor out = Tensor::empty({prompts * len, nh, hd}, DType::kBF16, Device::cuda());
  const double us = time_us([&](int) { ops::paged_attention(out, q, kc, vc, md, 0.088f, 0); }, 5);
  *us_out = us;
  return prompts * 4.0 * hd * nh * len * (len + 1.0) / 2 / us * 1e-6;
}

// The matmul rate the prefill rows are read against, measured in the same run: ops::linear (cuBLASLt) in bf16 at
// 8192 x 8192 x 8192 on random data (the rate the tensor cores reach on a large GEMM), TFLOP/s.
double bench_matmul_tflops() {
  constexpr int64_t n = 8192;
  Tensor x = upload(testing::random_tensor({n, n}, 11, DType::kBF16));
  Tensor w = upload(testing::random_tensor({n, n}, 12, DType::kBF16));
  Tensor out = Tensor::empty({n, n}, DType::kBF16, Device::cuda());
  const double us = time_us([&](int) { ops::linear(out, x, w, nullptr); }, 5);
  return 2.0 * n * n * n / us * 1e-6;
}

}  // namespace

int run_bench() {
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy = copy_bandwidth_gbs();
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  std::printf("copy bandwidth (D2D 1 GiB, read + write): %.0f GB/s\n\n", copy);
  std::printf("decode paged attention, bf16, block 16; floor = K+V bytes / copy bandwidth\n");
  std::printf(
      "| shape | batch | context | split-K workspace | us / call | KV bytes | floor us | KV GB/s | of copy bw |\n"
      "|---|---|---|---|---|---|---|---|---|\n");
  struct Spec {
    const Shape3* shape;
    int batch, ctx;
    bool split;
  };
  // batch 128 gets 1024+ CTAs already: the split-K heuristic picks 1 split, so only the workspace row runs.
  const Spec specs[] = {{&kShapeM, 1, 256, true},   {&kShapeM, 1, 256, false},   {&kShapeM, 1, 2048, true},
                        {&kShapeM, 1, 2048, false}, {&kShapeM, 128, 256, true},  {&kShapeM, 128, 2048, true},
                        {&kShapeM, 64, 1024, true}, {&kShapeM, 256, 1024, true}, {&kShapeS, 1, 256, true},
                        {&kShapeS, 128, 192, true}, {&kShapeS, 128, 256, true}};
  for (const Spec& sp : specs) {
    const Row r = bench_decode(*sp.shape, sp.batch, sp.ctx, sp.split);
    const double floor_us = r.kv_bytes / copy * 1e-3, gbs = r.kv_bytes / r.us * 1e-3;
    std::printf("| %s (%d/%d heads, hd %d) | %d | %d | %s | %.2f | %.2f MB | %.2f | %.0f | %.0f%% |\n", sp.shape->name,
                sp.shape->num_heads, sp.shape->num_kv_heads, sp.shape->head_dim, r.batch, r.ctx, r.split ? "yes" : "no",
                r.us, r.kv_bytes * 1e-6, floor_us, gbs, 100.0 * floor_us / r.us);
  }
  const double matmul = bench_matmul_tflops();
  std::printf("\nmatmul rate (ops::linear / cuBLASLt, bf16, 8192 x 8192 x 8192, random data): %.0f TFLOP/s\n", matmul);
  std::printf("prefill paged attention (causal, empty contexts), bf16; floor = its FLOPs at that matmul rate\n");
  std::printf("| shape | prompts x tokens | us / call | TFLOP/s | of matmul rate |\n|---|---|---|---|---|\n");
  struct PrefillSpec {
    const Shape3* shape;
    int prompts, len;
  };
  const PrefillSpec prefills[] = {{&kShapeM, 1, 512},  {&kShapeM, 1, 2048}, {&kShapeM, 1, 8192},
                                  {&kShapeM, 8, 1024}, {&kShapeS, 1, 2048}, {&kShapeM, 64, 48}};
  for (const PrefillSpec& sp : prefills) {
    double us = 0;
    const double tflops = bench_prefill_tflops(*sp.shape, sp.prompts, sp.len, &us);
    std::printf("| %s (hd %d) | %d x %d | %.1f | %.0f | %.0f%% |\n", sp.shape->name, sp.shape->head_dim, sp.prompts,
                sp.len, us, tflops, 100.0 * tflops / matmul);
  }
  return 0;
}

}  // namespace llmserve

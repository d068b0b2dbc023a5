// CUDA paged attention and reshape_and_cache vs the CPU ops (the reference; it takes f32 caches, so inputs are
// drawn in the tested dtype and widened), on random batches: ragged query/context lengths, mixed decode +
// prefill, block tables with holes and shared prefix blocks, long contexts (split-K, with and without a
// workspace), GQA / MQA, sliding windows, padding tokens, every head_dim path. Outputs are NaN-poisoned first;
// every case runs twice on one split-K workspace (its counters must come back to zero), and one workspace serves
// a run of differently shaped calls.
// Tolerances (|gpu - cpu| <= atol + rtol |cpu| elementwise, and ||gpu - cpu|| / ||cpu|| <= rel):
//   f32  2e-5 + 1e-4 |cpu|, rel 1e-5  (f32 math, different summation order and exp);
//   f16  2e-3 + 4e-3 |cpu|, rel 2e-3  (output rounded to f16; prefill rounds P to f16 for the PV mma);
//   bf16 1e-2 + 1.6e-2 |cpu|, rel 1e-2 (the same with bf16's 8-bit mantissa).
// `attention_gpu_test --bench` instead prints decode attention bandwidth vs the copy bandwidth (bench/RESULTS.md).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "../kernels/test_util.h"
#include "core/cuda_stream.h"
#include "kernels/ops.h"

namespace llmserve {
namespace {

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
  CHECK(cudaDeviceSynchronize() == cudaSuccess) << cudaGetErrorString(cudaGetLastError());
  Tensor host = Tensor::empty(dev.shape(), dev.dtype());
  CHECK(cudaMemcpy(host.raw_data(), dev.raw_data(), dev.nbytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}

// All-ones bytes are NaN in f32, f16 and bf16.
Tensor poisoned_device(const Shape& shape, DType dtype) {
  Tensor dev = Tensor::empty(shape, dtype, Device::cuda());
  CHECK(cudaMemset(dev.raw_data(), 0xff, dev.nbytes()) == cudaSuccess);
  return dev;
}

// A split-K workspace as the runner makes it: counters zeroed; the partials poisoned (never read before written).
Tensor workspace_device(int64_t elems) {
  Tensor ws = poisoned_device({elems}, DType::kF32);
  CHECK(cudaMemset(ws.raw_data(), 0, ops::kPagedAttentionWorkspaceCounters * sizeof(float)) == cudaSuccess);
  return ws;
}

struct Tolerance {
  double atol, rtol, rel_norm;
};
Tolerance tolerance(DType d) {
  if (d == DType::kBF16) return {1e-2, 1.6e-2, 1e-2};
  if (d == DType::kF16) return {2e-3, 4e-3, 2e-3};
  return {2e-5, 1e-4, 1e-5};
}

// Elementwise bound plus the relative L2 error; NaN anywhere fails.
void expect_matches(const Tensor& gpu_host, const Tensor& cpu_ref, DType dtype, const std::string& what) {
  const Tolerance tol = tolerance(dtype);
  const std::vector<double> want = to_doubles(cpu_ref);
  testing::expect_close(gpu_host, want, tol.atol, tol.rtol, what);
  const std::vector<double> got = to_doubles(gpu_host);
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  const double rel = std::sqrt(num / std::max(den, 1e-30));
  EXPECT_TRUE(rel <= tol.rel_norm) << what << ": relative L2 error " << rel;
}

struct Req {
  int cached;  // context already in the cache before this step
  int qlen;    // new tokens this step (their K/V are in the cache too)
};

struct Case {
  std::string name;
  DType dtype = DType::kBF16;
  int num_heads = 8, num_kv_heads = 2, head_dim = 128, block_size = 16;
  std::vector<Req> reqs;  // decode requests (qlen 1) first
  int pad_tokens = 0;
  int window = 0;
  bool workspace = true;
  bool share_prefix = true;  // request 1 reuses request 0's leading full blocks (a prefix-cache hit)
  bool hints = true;         // pass max_query_len / max_seq_len (else 0 = unknown)
  int max_seq_hint = 0;      // > 0: pass this max_seq_len instead (CUDA graphs pass the block table's reach)
  uint32_t seed = 1;
  const Tensor* shared_workspace = nullptr;  // use this (counters zero) instead of a fresh workspace
  bool sm90 = false;  // plan the SM90 prefill kernel's work lists (as the runner does) where it can run
};

// The SM90 prefill kernel's work lists for a batch, planned as the runner plans them, on the device; an undefined
// schedule where the kernel cannot run (not an SM90 device, a head size it lacks).
ops::PrefillSchedule sm90_schedule(const std::vector<int32_t>& qsl, const std::vector<int32_t>& seq_lens,
                                   int num_decode, int table_width, int num_heads, int head_dim) {
  const int64_t ctas = ops::sm90_prefill_ctas(Device::cuda());
  const int nr = static_cast<int>(seq_lens.size());
  if (ctas == 0 || ops::prefill_schedule_tile(head_dim) == 0 || nr == 0) return {};
  const int64_t w = ops::prefill_schedule_width(std::max(qsl[nr], 1), nr, num_heads, head_dim, ctas);
  Tensor rows = Tensor::empty({ops::kPrefillScheduleRows, w}, DType::kI32);
  const int64_t works = ops::plan_prefill_schedule(rows.data<int32_t>(), w, qsl.data(), seq_lens.data(), nr, num_decode,
                                                   table_width, num_heads, head_dim, ctas);
  return {to_device(rows), num_heads, head_dim, ctas, works};
}

std::string describe(const Case& c) {
  std::string s = c.name + " " + std::string(dtype_name(c.dtype)) + " heads " + std::to_string(c.num_heads) + "/" +
                  std::to_string(c.num_kv_heads) + " hd " + std::to_string(c.head_dim) + " bs " +
                  std::to_string(c.block_size) + " win " + std::to_string(c.window) + " reqs";
  for (const Req& r : c.reqs) s += " " + std::to_string(r.cached) + "+" + std::to_string(r.qlen);
  return s;
}

// Builds the batch, runs CPU and CUDA, compares.
void run_case(const Case& c) {
  std::mt19937 rng(c.seed);
  const int nr = static_cast<int>(c.reqs.size());
  int num_decode = 0;
  while (num_decode < nr && c.reqs[num_decode].qlen == 1) ++num_decode;
  std::vector<int32_t> qsl(nr + 1, 0), seq_lens(nr);
  int max_q = 0, max_s = 0, max_blocks = 0;
  for (int r = 0; r < nr; ++r) {
    qsl[r + 1] = qsl[r] + c.reqs[r].qlen;
    seq_lens[r] = c.reqs[r].cached + c.reqs[r].qlen;
    max_q = std::max(max_q, c.reqs[r].qlen);
    max_s = std::max(max_s, seq_lens[r]);
    max_blocks = std::max(max_blocks, (seq_lens[r] + c.block_size - 1) / c.block_size);
  }
  const int num_tokens = qsl[nr] + c.pad_tokens;
  // Physical blocks: a shuffled pool with spare (never referenced) blocks as holes between used ones.
  int total_blocks = 0;
  for (int r = 0; r < nr; ++r) total_blocks += (seq_lens[r] + c.block_size - 1) / c.block_size;
  const int num_blocks = total_blocks + total_blocks / 4 + 3;
  std::vector<int32_t> pool(num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  const int width = max_blocks + 2;
  std::vector<int32_t> table(static_cast<size_t>(std::max(nr, 1)) * width, -1);
  size_t next = 0;
  for (int r = 0; r < nr; ++r) {
    const int need = (seq_lens[r] + c.block_size - 1) / c.block_size;
    for (int b = 0; b < need; ++b) {
      next += rng() % 8 == 0;  // skip a block now and then: holes
      table[r * width + b] = pool[next++ % num_blocks];
    }
  }
  if (c.share_prefix && nr >= 2) {
    const int shared = std::min(seq_lens[0], seq_lens[1]) / c.block_size;  // full blocks only
    for (int b = 0; b < shared; ++b) table[1 * width + b] = table[0 * width + b];
  }
  const Shape cache_shape{num_blocks, c.block_size, c.num_kv_heads, c.head_dim};
  Tensor kc = random_tensor(cache_shape, c.seed * 7 + 1, c.dtype);
  Tensor vc = random_tensor(cache_shape, c.seed * 7 + 2, c.dtype);
  Tensor q = random_tensor({num_tokens, c.num_heads, c.head_dim}, c.seed * 7 + 3, c.dtype, -2.f, 2.f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  ops::AttentionMetadata md;
  md.query_start_loc = Tensor::from_i32(qsl, {nr + 1});
  md.seq_lens = Tensor::from_i32(seq_lens.empty() ? std::vector<int32_t>{0} : seq_lens, {std::max(nr, 1)});
  md.block_table = Tensor::from_i32(table, {std::max(nr, 1), width});
  md.num_reqs = nr;
  md.num_decode_tokens = num_decode;
  md.max_query_len = c.hints ? max_q : 0;
  md.max_seq_len = c.max_seq_hint > 0 ? c.max_seq_hint : c.hints ? max_s : 0;
  Tensor ref = Tensor::empty({num_tokens, c.num_heads, c.head_dim}, DType::kF32);
  ops::paged_attention(ref, q.to(DType::kF32), kc.to(DType::kF32), vc.to(DType::kF32), md, scale, c.window);

  ops::AttentionMetadata dmd = md;
  dmd.query_start_loc = to_device(md.query_start_loc);
  dmd.seq_lens = to_device(md.seq_lens);
  dmd.block_table = to_device(md.block_table);
  if (c.shared_workspace != nullptr) {
    dmd.workspace = *c.shared_workspace;
  } else if (c.workspace) {
    const int64_t elems = ops::paged_attention_workspace_elems(num_tokens, c.num_heads, c.head_dim, 16384);
    if (elems > 0) dmd.workspace = workspace_device(elems);
  }
  if (c.sm90) dmd.prefill_schedule = sm90_schedule(qsl, seq_lens, num_decode, width, c.num_heads, c.head_dim);
  Tensor kd = to_device(kc), vd = to_device(vc), qd = to_device(q);
  // Twice on the same workspace: the split-K arrival counters must be back at zero after every call (else the
  // second call's last CTA never recognises itself and the output stays poisoned).
  for (int call = 0; call < 2; ++call) {
    Tensor out = poisoned_device({num_tokens, c.num_heads, c.head_dim}, c.dtype);
    ops::paged_attention(out, qd, kd, vd, dmd, scale, c.window);
    expect_matches(to_host(out), ref, c.dtype, describe(c) + " call " + std::to_string(call));
  }
}

class AttentionGpuTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  }
};

// Random requests: num_decode decodes with contexts up to max_ctx, then num_prefill chunks of up to max_q tokens
// on top of up to max_ctx cached tokens.
std::vector<Req> random_reqs(std::mt19937& rng, int num_decode, int num_prefill, int max_ctx, int max_q) {
  std::vector<Req> reqs;
  for (int i = 0; i < num_decode; ++i) reqs.push_back({static_cast<int>(rng() % max_ctx), 1});
  for (int i = 0; i < num_prefill; ++i) {
    const int cached = rng() % 3 == 0 ? 0 : static_cast<int>(rng() % max_ctx);
    reqs.push_back({cached, 2 + static_cast<int>(rng() % (max_q - 1))});
  }
  return reqs;
}

const std::pair<int, int> kHeadLayouts[] = {{8, 8}, {8, 2}, {32, 8}, {32, 1}, {12, 4}, {14, 2}, {4, 1}};

TEST_P(AttentionGpuTest, DecodeOnly) {
  std::mt19937 rng(11);
  uint32_t seed = 100;
  for (int hd : {64, 128}) {
    for (auto [nh, nkv] : kHeadLayouts) {
      Case c{"decode", GetParam(), nh, nkv, hd, 16, {}};
      c.reqs = random_reqs(rng, 1 + rng() % 9, 0, 700, 2);
      c.pad_tokens = static_cast<int>(rng() % 3);
      c.seed = seed++;
      run_case(c);
    }
  }
}

TEST_P(AttentionGpuTest, PrefillOnlyRagged) {
  std::mt19937 rng(12);
  uint32_t seed = 200;
  for (int hd : {64, 128}) {
    for (auto [nh, nkv] : kHeadLayouts) {
      Case c{"prefill", GetParam(), nh, nkv, hd, 16, {}};
      c.reqs = random_reqs(rng, 0, 1 + rng() % 4, 300, 150);
      c.pad_tokens = static_cast<int>(rng() % 4);
      c.seed = seed++;
      run_case(c);
    }
  }
}

TEST_P(AttentionGpuTest, MixedBatchesAllHeadDims) {
  std::mt19937 rng(13);
  uint32_t seed = 300;
  // 16 and 32 are the fixture models' head_dims; 8 (stories260K), 80 and 96 run the generic kernel.
  for (int hd : {16, 32, 64, 128, 8, 80, 96}) {
    for (int bs : {16, 8, 32}) {
      Case c{"mixed", GetParam(), 8, 2, hd, bs, {}};
      c.reqs = random_reqs(rng, 1 + rng() % 5, 1 + rng() % 3, 400, 100);
      c.pad_tokens = static_cast<int>(rng() % 3);
      c.seed = seed++;
      run_case(c);
    }
  }
}

// FlashInfer's Hopper prefill kernel over the runner's work lists: decodes and chunked prefills over cached
// prefixes (shared blocks, holes), prompts past several tiles, GQA layouts, block sizes 16 and 32, padding rows.
TEST_P(AttentionGpuTest, Sm90PrefillMatchesTheCpu) {
  if (ops::sm90_prefill_ctas(Device::cuda()) == 0) GTEST_SKIP() << "not an SM90 device (or LLMSERVE_SM90_PREFILL=0)";
  std::mt19937 rng(15);
  uint32_t seed = 500;
  for (int hd : {64, 128}) {
    for (auto [nh, nkv] : kHeadLayouts) {
      for (int bs : {16, 32}) {
        Case c{"sm90", GetParam(), nh, nkv, hd, bs, {}};
        c.reqs = random_reqs(rng, static_cast<int>(rng() % 4), 1 + rng() % 4, 900, 700);
        c.pad_tokens = static_cast<int>(rng() % 3);
        c.seed = seed++;
        c.sm90 = true;
        run_case(c);
      }
    }
  }
}

// The schedule is what runs: with its work lists emptied the prefill rows stay poisoned while the decode rows
// (the decode kernel's) are right, so the cases above did not pass through the portable kernel.
TEST_P(AttentionGpuTest, Sm90PrefillRunsTheScheduledWorks) {
  if (ops::sm90_prefill_ctas(Device::cuda()) == 0) GTEST_SKIP() << "not an SM90 device (or LLMSERVE_SM90_PREFILL=0)";
  if (GetParam() == DType::kF32) GTEST_SKIP() << "the SM90 kernel takes bf16 / f16";
  const int nh = 8, nkv = 2, hd = 128, bs = 16;
  const std::vector<int32_t> qsl = {0, 1, 301}, lens = {40, 300};
  const int width = 20;
  std::vector<int32_t> table(2 * width);
  std::iota(table.begin(), table.end(), 0);
  Tensor kc = random_tensor({40, bs, nkv, hd}, 61, GetParam()), vc = random_tensor({40, bs, nkv, hd}, 62, GetParam());
  Tensor q = random_tensor({301, nh, hd}, 63, GetParam(), -2.f, 2.f);
  ops::AttentionMetadata md;
  md.query_start_loc = to_device(Tensor::from_i32(qsl, {3}));
  md.seq_lens = to_device(Tensor::from_i32(lens, {2}));
  md.block_table = to_device(Tensor::from_i32(table, {2, width}));
  md.num_reqs = 2;
  md.num_decode_tokens = 1;
  md.max_query_len = 300;
  md.max_seq_len = 300;
  md.prefill_schedule = sm90_schedule(qsl, lens, 1, width, nh, hd);
  ASSERT_GT(md.prefill_schedule.num_works, 0);
  CHECK(cudaMemset(md.prefill_schedule.rows.raw_data(), 0, (md.prefill_schedule.num_ctas + 1) * 4) == cudaSuccess);
  Tensor out = poisoned_device({301, nh, hd}, GetParam());
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  ops::paged_attention(out, to_device(q), to_device(kc), to_device(vc), md, scale, 0);
  const std::vector<double> got = to_doubles(to_host(out));
  for (int64_t i = 0; i < nh * hd; ++i) ASSERT_TRUE(std::isfinite(got[i])) << "decode row, element " << i;
  for (int64_t i = nh * hd; i < static_cast<int64_t>(got.size()); ++i) {
    ASSERT_TRUE(std::isnan(got[i])) << "prefill element " << i << " was written with no work scheduled";
  }
}

TEST_P(AttentionGpuTest, SlidingWindow) {
  std::mt19937 rng(14);
  uint32_t seed = 400;
  for (int window : {1, 8, 100, 1000}) {
    for (int hd : {32, 128}) {
      Case c{"window", GetParam(), 8, 2, hd, 16, {}};
      c.window = window;
      c.reqs = random_reqs(rng, 3, 2, 1500, 200);
      c.pad_tokens = 1;
      c.seed = seed++;
      run_case(c);
    }
  }
}

TEST_P(AttentionGpuTest, LongContextsSplitK) {
  std::mt19937 rng(15);
  uint32_t seed = 500;
  for (bool ws : {true, false}) {
    for (int hd : {64, 128}) {
      for (auto [nh, nkv] : {std::pair{16, 4}, std::pair{8, 1}}) {
        Case c{ws ? "splitk" : "splitk-no-workspace", GetParam(), nh, nkv, hd, 16, {}};
        c.workspace = ws;
        c.reqs = {{3000 + static_cast<int>(rng() % 4000), 1}, {static_cast<int>(rng() % 5000), 1}};
        if (rng() % 2) c.reqs.push_back({2000, 40});  // a prefill chunk beside the long decodes
        c.seed = seed++;
        run_case(c);
      }
    }
  }
  // Long contexts with a sliding window: the window, not the context, is split.
  Case c{"splitk-window", GetParam(), 16, 4, 128, 16, {}};
  c.window = 3000;
  c.reqs = {{7000, 1}, {100, 1}};
  run_case(c);
}

TEST_P(AttentionGpuTest, EachRequestSplitsByItsOwnLengthUnderALargeHint) {
  // Under CUDA graphs max_seq_len is the block table's reach, so the grid has the most splits; each request uses
  // only those its own keys fill (1 key: one split, written directly; 5000 keys: all of them), in one batch, on one
  // workspace across calls (the arrival counts differ per request).
  const Tensor ws = workspace_device(ops::paged_attention_workspace_elems(16, 32, 128, 16384));
  uint32_t seed = 700;
  for (int hd : {64, 128}) {
    for (auto [nh, nkv] : {std::pair{32, 4}, std::pair{16, 16}, std::pair{32, 8}}) {
      Case c{"large-hint", GetParam(), nh, nkv, hd, 16, {}};
      c.reqs = {{0, 1}, {19, 1}, {5000, 1}, {32, 1}, {63, 1}, {64, 1}, {189, 1}, {1000, 1}};
      c.max_seq_hint = 16384;
      c.shared_workspace = &ws;
      c.seed = seed++;
      run_case(c);
    }
  }
}

TEST_P(AttentionGpuTest, OneWorkspaceAcrossShapesAndSplitCounts) {
  // The runner keeps one workspace for every layer and step: calls with different grids and split counts (1 to
  // 32 splits, one to nine requests, GQA and MHA, both head_dims) reuse the same counters and partials.
  const Tensor ws = workspace_device(ops::paged_attention_workspace_elems(16, 32, 128, 16384));
  std::mt19937 rng(16);
  uint32_t seed = 800;
  for (int i = 0; i < 8; ++i) {
    const auto [nh, nkv] = kHeadLayouts[i % 7];
    Case c{"shared-workspace", GetParam(), nh, nkv, i % 2 ? 64 : 128, 16, {}};
    c.reqs = random_reqs(rng, 1 + rng() % 9, 0, i % 3 == 0 ? 6000 : 600, 2);
    c.shared_workspace = &ws;
    c.seed = seed++;
    run_case(c);
  }
}

TEST_P(AttentionGpuTest, LargeDecodeBatches) {
  // 160 decodes x 4-16 kv heads is over one wave of one-kv-head CTAs on an H100 (132 SMs x 4), so the kernel
  // pairs adjacent kv heads per CTA: GQA 4 and 3 (padded head group), MHA, both head_dims, a sliding window.
  std::mt19937 rng(17);
  uint32_t seed = 900;
  for (auto [nh, nkv, hd, window] : {std::tuple{32, 8, 64, 0}, std::tuple{32, 8, 128, 0}, std::tuple{12, 4, 128, 0},
                                     std::tuple{16, 16, 64, 0}, std::tuple{32, 8, 64, 50}}) {
    Case c{"large-batch", GetParam(), nh, nkv, hd, 16, {}};
    c.reqs = random_reqs(rng, 160, 0, 300, 2);
    c.window = window;
    c.pad_tokens = 2;
    c.seed = seed++;
    run_case(c);
  }
}

TEST_P(AttentionGpuTest, TensorCoreDecodeLayouts) {
  // Batches that fill the GPU without split-K run the tensor-core decode (groups of >= 4 heads; bf16 / f16): groups
  // of 4, 5 (padded to the MMA's 8 columns), 8 and 16 (two head chunks), both head_dims, block sizes 8 / 16 / 32,
  // contexts of 1 to 128 keys at tile and block edges, a sliding window, padding rows; 300 requests (the 2-stage
  // pipeline: >= 6 CTAs per SM on an H100 / H200) and 70 (3 stages). Under LLMSERVE_DECODE_MMA=0 (gpu-check runs
  // this suite that way too) the same batches check the CUDA-core kernel.
  std::mt19937 rng(18);
  uint32_t seed = 1000;
  for (auto [nh, nkv, hd, bs, window] :
       {std::tuple{32, 8, 128, 16, 0}, std::tuple{40, 8, 64, 8, 0}, std::tuple{32, 4, 64, 32, 0},
        std::tuple{64, 4, 128, 16, 0}, std::tuple{32, 8, 128, 32, 37}, std::tuple{16, 4, 64, 16, 0}}) {
    Case c{"mma-decode", GetParam(), nh, nkv, hd, bs, {}};
    c.reqs = random_reqs(rng, seed % 2 ? 70 : 300, 0, 600, 2);
    const int edges[] = {0, 1, 14, 15, 16, 31, 32, 47, 63, 64, 65, 127};  // cached keys: contexts of edge + 1
    for (size_t i = 0; i < std::size(edges); ++i) c.reqs[i * 7].cached = edges[i];
    c.window = window;
    c.pad_tokens = 3;
    c.seed = seed++;
    run_case(c);
  }
}

TEST_P(AttentionGpuTest, UnknownHintsAndEdgeLengths) {
  // max_query_len / max_seq_len = 0 (unknown), a one-token context, a chunk of one token among prefills
  // (num_decode_tokens counts only the leading decodes), a request whose query fills its whole context.
  Case c{"hints", GetParam(), 8, 2, 128, 16, {}};
  c.hints = false;
  c.reqs = {{0, 1}, {5, 1}, {0, 64}, {63, 1}, {0, 129}};
  c.pad_tokens = 2;
  run_case(c);
  Case d{"no-requests", GetParam(), 8, 2, 64, 16, {}};
  d.pad_tokens = 3;  // every token is padding
  run_case(d);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AttentionGpuTest, ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

class CacheGpuTest : public AttentionGpuTest {};

TEST_P(CacheGpuTest, ReshapeAndCacheMatchesCpu) {
  const DType dtype = GetParam();
  uint32_t seed = 600;
  // (num_kv_heads, head_dim): 16-byte rows and odd rows (element-wise copy path).
  for (auto [nkv, hd] : {std::pair{8, 128}, std::pair{2, 16}, std::pair{1, 12}, std::pair{3, 5}}) {
    const int num_blocks = 9, bs = 4, n = 17;
    std::mt19937 rng(seed);
    std::vector<int64_t> slots(num_blocks * bs);
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    slots.resize(n);
    for (int i = 0; i < n; i += 5) slots[i] = -1;  // padding tokens
    const Shape cs{num_blocks, bs, nkv, hd};
    // Random initial contents: untouched slots must keep them.
    Tensor kc = random_tensor(cs, seed + 1, dtype), vc = random_tensor(cs, seed + 2, dtype);
    Tensor k = random_tensor({n, nkv, hd}, seed + 3, dtype), v = random_tensor({n, nkv, hd}, seed + 4, dtype);
    Tensor slot_t = Tensor::from_i64(slots, {n});
    Tensor kr = kc.to(DType::kF32), vr = vc.to(DType::kF32);
    ops::reshape_and_cache(k.to(DType::kF32), v.to(DType::kF32), kr, vr, slot_t);
    Tensor kd = to_device(kc), vd = to_device(vc);
    ops::reshape_and_cache(to_device(k), to_device(v), kd, vd, to_device(slot_t));
    const std::string what =
        "reshape_and_cache " + std::string(dtype_name(dtype)) + " " + std::to_string(nkv) + "x" + std::to_string(hd);
    testing::expect_close(to_host(kd), to_doubles(kr), 0, 0, what + " key");  // a copy: exact
    testing::expect_close(to_host(vd), to_doubles(vr), 0, 0, what + " value");
    seed += 10;
  }
}

TEST_P(CacheGpuTest, WriteThenAttendChunkedPrefill) {
  // A request prefills 70 tokens in chunks of 30/30/10 through reshape_and_cache, then decodes 3 tokens; each
  // step's attention output matches the CPU doing the same steps.
  const DType dtype = GetParam();
  const int nh = 8, nkv = 2, hd = 64, bs = 16, num_blocks = 12;
  const Shape cs{num_blocks, bs, nkv, hd};
  Tensor kc_cpu = Tensor::zeros(cs, DType::kF32), vc_cpu = Tensor::zeros(cs, DType::kF32);
  Tensor kc_dev = poisoned_device(cs, dtype), vc_dev = poisoned_device(cs, dtype);  // never read before written
  const std::vector<int32_t> table = {7, 2, 9, 4, 11, 0};
  Tensor table_cpu = Tensor::from_i32(table, {1, 6}), table_dev = to_device(table_cpu);
  int done = 0;
  uint32_t seed = 700;
  for (int chunk : {30, 30, 10, 1, 1, 1}) {
    std::vector<int64_t> slots(chunk);
    for (int i = 0; i < chunk; ++i) slots[i] = table[(done + i) / bs] * bs + (done + i) % bs;
    Tensor k = random_tensor({chunk, nkv, hd}, seed++, dtype), v = random_tensor({chunk, nkv, hd}, seed++, dtype);
    Tensor q = random_tensor({chunk, nh, hd}, seed++, dtype, -2.f, 2.f);
    Tensor slot_t = Tensor::from_i64(slots, {chunk});
    ops::reshape_and_cache(k.to(DType::kF32), v.to(DType::kF32), kc_cpu, vc_cpu, slot_t);
    ops::reshape_and_cache(to_device(k), to_device(v), kc_dev, vc_dev, to_device(slot_t));
    done += chunk;
    ops::AttentionMetadata md;
    md.query_start_loc = Tensor::from_i32({0, chunk}, {2});
    md.seq_lens = Tensor::from_i32({done}, {1});
    md.block_table = table_cpu;
    md.num_reqs = 1;
    md.num_decode_tokens = chunk == 1 ? 1 : 0;
    md.max_query_len = chunk;
    md.max_seq_len = done;
    Tensor ref = Tensor::empty({chunk, nh, hd}, DType::kF32);
    ops::paged_attention(ref, q.to(DType::kF32), kc_cpu, vc_cpu, md, 0.125f, 0);
    ops::AttentionMetadata dmd = md;
    dmd.query_start_loc = to_device(md.query_start_loc);
    dmd.seq_lens = to_device(md.seq_lens);
    dmd.block_table = table_dev;
    Tensor out = poisoned_device({chunk, nh, hd}, dtype);
    ops::paged_attention(out, to_device(q), kc_dev, vc_dev, dmd, 0.125f, 0);
    expect_matches(to_host(out), ref, dtype, "chunk of " + std::to_string(chunk) + " at " + std::to_string(done));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CacheGpuTest, ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace

int run_bench();  // attention_gpu_bench.cc

}  // namespace llmserve

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--bench") == 0) return llmserve::run_bench();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

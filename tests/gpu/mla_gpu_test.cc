// The CUDA multi-head latent attention ops (batched_linear, mla_rotary_and_cache, mla_attention) vs their CPU kernels
// (the reference; f32, so inputs are drawn in the tested dtype and widened), on random shapes: the fixtures' dims
// (4 heads, L 64, R 16) and DeepSeek's (16 and 128 heads, L 512, R 64), decode, prefill and mixed batches with
// contexts 1..5000 over shuffled block tables with holes and a shared prefix, padding tokens, both tensor-core
// head groupings, split-K with and without a workspace (and one workspace over many calls: its counters must come
// back to zero), and a CUDA-graph capture replayed with changed lengths. Outputs are NaN-poisoned first.
// On an sm_90 device, the same batches through FlashInfer's Hopper kernel (mla_attention_sm90.cu) over work lists
// planned on the host (ops::plan_mla_schedule) and uploaded as the runner would; each call must take that path
// (cuda::mla_sm90_calls counts it), at the bf16 tolerance below.
// Tolerances (|gpu - cpu| <= atol + rtol |cpu| elementwise, and ||gpu - cpu|| / ||cpu|| <= rel):
//   f32  2e-5 + 1e-4 |cpu|, rel 1e-5  (f32 math; another summation order and exp);
//   f16  2e-3 + 4e-3 |cpu|, rel 3e-3  (output rounded to f16; the tensor-core path rounds P to f16 for PV);
//   bf16 1e-2 + 1.6e-2 |cpu|, rel 1e-2 (the same with bf16's 8-bit mantissa).
// batched_linear: cuBLASLt's f32 accumulation over k <= 512 terms, rtol as above with atol scaled by sqrt(k).
// `mla_gpu_test --bench` instead prints the decode kernel's bandwidth and FLOP rates (mla_gpu_bench.cc);
// `--bench-mla-sm90` only the decode table of the tensor-core kernel beside the SM90 one.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"

namespace llmserve {
namespace {

using gpu_testing::poisoned_device;
using gpu_testing::sync_device;
using gpu_testing::to_device;
using gpu_testing::to_host;
using testing::random_tensor;
using testing::to_doubles;

struct Tolerance {
  double atol, rtol, rel_norm;
};
Tolerance tolerance(DType d) {
  if (d == DType::kBF16) return {1e-2, 1.6e-2, 1e-2};
  if (d == DType::kF16) return {2e-3, 4e-3, 3e-3};
  return {2e-5, 1e-4, 1e-5};
}

// Elementwise bound plus the relative L2 error; NaN anywhere fails.
void expect_matches(const Tensor& gpu_host, const Tensor& cpu_ref, const Tolerance& tol, const std::string& what) {
  const std::vector<double> want = to_doubles(cpu_ref.contiguous());
  const std::vector<double> got = to_doubles(gpu_host.contiguous());
  ASSERT_EQ(got.size(), want.size()) << what;
  testing::expect_close(gpu_host.contiguous(), want, tol.atol, tol.rtol, what);
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  const double rel = std::sqrt(num / std::max(den, 1e-30));
  EXPECT_TRUE(rel <= tol.rel_norm) << what << ": relative L2 error " << rel;
}

// A split-K workspace as the runner makes it: counters zeroed; the partials poisoned (never read before written).
Tensor workspace_device(int64_t elems) {
  Tensor ws = poisoned_device({elems}, DType::kF32);
  CHECK(cudaMemset(ws.raw_data(), 0, ops::kPagedAttentionWorkspaceCounters * sizeof(float)) == cudaSuccess);
  return ws;
}

class MlaGpuTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!gpu_testing::have_cuda_device()) GTEST_SKIP() << "no CUDA device";
    cuda::set_mla_heads_per_cta(0);
  }
  void TearDown() override { cuda::set_mla_heads_per_cta(0); }
};

// ---- batched_linear ----

// x: the first k columns of each head of a [T, H, k + 8] activation viewed [H, T, k]; out: columns [8, 8 + n) of
// each head of a poisoned [T, H, n + 16] buffer viewed [H, T, n] (MLA's per-head products over [T, H, D] rows).
void check_batched_linear(DType dtype, int64_t heads, int64_t tokens, int64_t k, int64_t n, uint32_t seed) {
  const std::string what = std::string(dtype_name(dtype)) + " H " + std::to_string(heads) + " T " +
                           std::to_string(tokens) + " k " + std::to_string(k) + " n " + std::to_string(n);
  Tensor act = random_tensor({tokens, heads, k + 8}, seed, dtype);
  Tensor weight = random_tensor({heads, n, k}, seed + 1, dtype, -0.2f, 0.2f);
  Tensor ref = Tensor::empty({heads, tokens, n}, DType::kF32);
  ops::batched_linear(ref, act.to(DType::kF32).slice(2, 0, k).transpose(0, 1), weight.to(DType::kF32));

  Tensor act_d = to_device(act), weight_d = to_device(weight);
  Tensor wide = poisoned_device({tokens, heads, n + 16}, dtype);
  Tensor out = wide.slice(2, 8, 8 + n).transpose(0, 1);
  ops::batched_linear(out, act_d.slice(2, 0, k).transpose(0, 1), weight_d);
  Tensor wide_h = to_host(wide);
  Tolerance tol = tolerance(dtype);
  tol.atol *= std::sqrt(static_cast<double>(k)) / 4;  // sums of k products of values up to 0.2
  expect_matches(wide_h.slice(2, 8, 8 + n).transpose(0, 1), ref, tol, "batched_linear " + what);
  // The columns around each head's slice stay poisoned.
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t j : {int64_t{0}, int64_t{7}, 8 + n}) {
        const double v = testing::at(wide_h, (t * heads + h) * (n + 16) + j);
        ASSERT_TRUE(std::isnan(v)) << what << ": column " << j << " of token " << t << " head " << h << " written";
      }
    }
  }
}

TEST_P(MlaGpuTest, BatchedLinearMatchesCpuOnStridedHeadViews) {
  const DType dtype = GetParam();
  check_batched_linear(dtype, 4, 5, 32, 64, 1);      // fixture: W_UK_T [H, L, P] on q_nope
  check_batched_linear(dtype, 4, 7, 64, 32, 2);      // fixture: W_UV [H, V, L] on the latent output
  check_batched_linear(dtype, 16, 37, 128, 512, 3);  // DeepSeek under tp 8, a prefill chunk
  check_batched_linear(dtype, 128, 3, 512, 128, 4);  // DeepSeek, decode batch 3
  check_batched_linear(dtype, 128, 1, 128, 512, 5);  // one token: size-1 token dimension
  check_batched_linear(dtype, 1, 9, 48, 16, 6);      // one head
}

// ---- mla_rotary_and_cache ----

Tensor cos_sin_cache(int64_t max_position, int64_t rope, double theta) {
  std::vector<float> v(static_cast<size_t>(max_position * rope));
  for (int64_t p = 0; p < max_position; ++p) {
    for (int64_t i = 0; i < rope / 2; ++i) {
      const double angle = p * std::pow(theta, -2.0 * i / rope);
      v[p * rope + i] = static_cast<float>(std::cos(angle));
      v[p * rope + rope / 2 + i] = static_cast<float>(std::sin(angle));
    }
  }
  return Tensor::from_f32(v, {max_position, rope});
}

// q_pe: the rope part of a [n, H, P + R] projection (rows and heads strided); q_out: the rope part of a poisoned
// [n, H, L + R] buffer (or q_pe itself, in place); k_pe and kv_c: column slices of one [n, L + R + 8] row. Negative
// slots (padding) and a randomly pre-filled cache whose unaddressed rows must keep their bytes.
void check_rotary(DType dtype, int64_t n, int64_t heads, int64_t nope, int64_t latent, int64_t rope, bool interleaved,
                  bool in_place, uint32_t seed) {
  const std::string what = std::string(dtype_name(dtype)) + " n " + std::to_string(n) + " H " + std::to_string(heads) +
                           " L " + std::to_string(latent) + " R " + std::to_string(rope) +
                           (interleaved ? " interleaved" : " rotate-half") + (in_place ? " in place" : "");
  const int64_t block_size = 16, num_blocks = (n + block_size - 1) / block_size + 2, row = latent + rope;
  const int64_t max_position = 6000;
  std::mt19937 rng(seed);
  std::vector<int64_t> pos(n), slots(n);
  std::vector<int64_t> perm(num_blocks * block_size);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int64_t t = 0; t < n; ++t) {
    pos[t] = static_cast<int64_t>(rng() % max_position);
    slots[t] = t % 7 == 3 ? -1 : perm[t];  // padding tokens
  }
  Tensor positions = Tensor::from_i64(pos, {n}), slot_mapping = Tensor::from_i64(slots, {n});
  Tensor cs = cos_sin_cache(max_position, rope, 10000.0);
  Tensor q = random_tensor({n, heads, nope + rope}, seed + 1, dtype, -2.f, 2.f);
  Tensor kv = random_tensor({n, row + 8}, seed + 2, dtype, -2.f, 2.f);
  Tensor cache0 = random_tensor({num_blocks, block_size, row}, seed + 3, dtype);

  // CPU reference in f32.
  Tensor q_ref = q.to(DType::kF32), kv_ref = kv.to(DType::kF32), cache_ref = cache0.to(DType::kF32);
  Tensor qr_out = Tensor::empty({n, heads, rope}, DType::kF32);
  Tensor k_ref = kv_ref.slice(1, latent, row);
  ops::mla_rotary_and_cache(positions, q_ref.slice(2, nope, nope + rope), qr_out, k_ref, kv_ref.slice(1, 0, latent), cs,
                            interleaved ? 1 : 0, cache_ref, slot_mapping);

  Tensor q_d = to_device(q), kv_d = to_device(kv), cache_d = to_device(cache0);
  Tensor pos_d = to_device(positions), slots_d = to_device(slot_mapping), cs_d = to_device(cs);
  Tensor qout_wide = poisoned_device({n, heads, latent + rope}, dtype);
  Tensor q_pe = q_d.slice(2, nope, nope + rope);
  Tensor q_out = in_place ? q_pe : qout_wide.slice(2, latent, latent + rope);
  Tensor k_pe = kv_d.slice(1, latent, row);
  ops::mla_rotary_and_cache(pos_d, q_pe, q_out, k_pe, kv_d.slice(1, 0, latent), cs_d, interleaved ? 1 : 0, cache_d,
                            slots_d);
  const Tolerance tol = tolerance(dtype);
  Tensor q_got =
      in_place ? to_host(q_d).slice(2, nope, nope + rope) : to_host(qout_wide).slice(2, latent, latent + rope);
  expect_matches(q_got, qr_out, tol, "q_out " + what);
  Tensor kv_h = to_host(kv_d);
  expect_matches(kv_h.slice(1, latent, row), k_ref, tol, "k_pe " + what);
  expect_matches(kv_h.slice(1, 0, latent), kv.slice(1, 0, latent), {0, 0, 0}, "kv_c untouched " + what);
  // Rows never addressed keep their bytes: compare the whole cache (f32 reference of a 16-bit cache rounds
  // exactly back, the written rows within rounding).
  expect_matches(to_host(cache_d), cache_ref, tol, "cache " + what);
  if (!in_place) {
    Tensor wide_h = to_host(qout_wide);
    for (int64_t j : {int64_t{0}, latent - 1}) {
      ASSERT_TRUE(std::isnan(testing::at(wide_h, j))) << what << ": q_out's latent column " << j << " written";
    }
  }
}

TEST_P(MlaGpuTest, RotaryAndCacheMatchesCpu) {
  const DType dtype = GetParam();
  for (bool interleaved : {true, false}) {
    check_rotary(dtype, 37, 4, 32, 64, 16, interleaved, false, 10);      // fixture dims
    check_rotary(dtype, 21, 128, 128, 512, 64, interleaved, false, 11);  // DeepSeek
    check_rotary(dtype, 9, 16, 128, 512, 64, interleaved, true, 12);     // q_out aliases q_pe
    check_rotary(dtype, 1, 1, 0, 16, 2, interleaved, false, 13);         // smallest
  }
}

// ---- mla_attention ----

struct Req {
  int cached;  // context already in the cache before this step
  int qlen;    // new tokens this step (their rows are in the cache too)
};

struct Case {
  std::string name;
  DType dtype = DType::kBF16;
  int num_heads = 16, latent = 512, rope = 64, block_size = 16;
  std::vector<Req> reqs;  // decode requests (qlen 1) first
  int pad_tokens = 0;
  bool workspace = true;
  bool hints = true;      // pass max_query_len / max_seq_len (else 0 = unknown)
  int heads_per_cta = 0;  // the tensor-core path's grouping (0: its default)
  uint32_t seed = 1;
  const Tensor* shared_workspace = nullptr;  // use this (counters zero) instead of a fresh workspace
  bool sm90 = false;          // plan the SM90 kernel's work lists and require that path (bf16, L 512, R 64)
  bool expect_split = false;  // and require the plan to split some tile (the kernel's merge step runs)
};

std::string describe(const Case& c) {
  std::string s = c.name + " " + std::string(dtype_name(c.dtype)) + " H " + std::to_string(c.num_heads) + " L " +
                  std::to_string(c.latent) + " R " + std::to_string(c.rope) + " bs " + std::to_string(c.block_size) +
                  (c.sm90 ? " sm90" : " heads/cta " + std::to_string(c.heads_per_cta)) +
                  (c.workspace ? " ws" : " no-ws") + " pad " + std::to_string(c.pad_tokens) + " reqs";
  for (const Req& r : c.reqs) {
    s += ' ';
    s += std::to_string(r.cached);
    s += '+';
    s += std::to_string(r.qlen);
  }
  return s;
}

// The batch's metadata on the host: shuffled physical blocks with holes, request 1 sharing request 0's full blocks.
struct Batch {
  ops::AttentionMetadata md;
  int num_tokens = 0, num_blocks = 0, max_seq_len = 0;
};

Batch make_batch(const Case& c) {
  std::mt19937 rng(c.seed);
  const int nr = static_cast<int>(c.reqs.size());
  int num_decode = 0;
  while (num_decode < nr && c.reqs[num_decode].qlen == 1) ++num_decode;
  std::vector<int32_t> qsl(nr + 1, 0), seq_lens(std::max(nr, 1), 0);
  int max_q = 0, max_s = 0, max_blocks = 0, total_blocks = 0;
  for (int r = 0; r < nr; ++r) {
    qsl[r + 1] = qsl[r] + c.reqs[r].qlen;
    seq_lens[r] = c.reqs[r].cached + c.reqs[r].qlen;
    max_q = std::max(max_q, c.reqs[r].qlen);
    max_s = std::max(max_s, seq_lens[r]);
    const int need = (seq_lens[r] + c.block_size - 1) / c.block_size;
    max_blocks = std::max(max_blocks, need);
    total_blocks += need;
  }
  Batch b;
  b.num_tokens = qsl[nr] + c.pad_tokens;
  b.num_blocks = total_blocks + total_blocks / 4 + 3;
  b.max_seq_len = max_s;
  std::vector<int32_t> pool(b.num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  const int width = max_blocks + 2;
  std::vector<int32_t> table(static_cast<size_t>(std::max(nr, 1)) * width, 0);
  size_t next = 0;
  for (int r = 0; r < nr; ++r) {
    const int need = (seq_lens[r] + c.block_size - 1) / c.block_size;
    for (int k = 0; k < need; ++k) {
      next += rng() % 8 == 0;  // skip a block now and then: holes
      table[r * width + k] = pool[next++ % b.num_blocks];
    }
  }
  if (nr >= 2) {
    const int shared = std::min(seq_lens[0], seq_lens[1]) / c.block_size;  // full blocks only
    for (int k = 0; k < shared; ++k) table[1 * width + k] = table[0 * width + k];
  }
  b.md.query_start_loc = Tensor::from_i32(qsl, {nr + 1});
  b.md.seq_lens = Tensor::from_i32(seq_lens, {std::max(nr, 1)});
  b.md.block_table = Tensor::from_i32(table, {std::max(nr, 1), width});
  b.md.num_reqs = nr;
  b.md.num_decode_tokens = num_decode;
  b.md.max_query_len = c.hints ? max_q : 0;
  b.md.max_seq_len = c.hints ? max_s : 0;
  return b;
}

ops::AttentionMetadata device_metadata(const ops::AttentionMetadata& md) {
  ops::AttentionMetadata d = md;
  d.query_start_loc = to_device(md.query_start_loc);
  d.seq_lens = to_device(md.seq_lens);
  d.block_table = to_device(md.block_table);
  return d;
}

// DeepSeek's softmax scale (P + R = 192) for the 512 / 64 shapes, (32 + 16)^-0.5 for the fixture's.
float mla_scale(const Case& c) { return c.latent == 512 ? 1.f / std::sqrt(192.f) : 1.f / std::sqrt(48.f); }

// query [n, H, L + R] as a row-strided view (16 spare elements per row, poisoned) on the device.
Tensor strided_query(const Tensor& q_host) {
  const int64_t n = q_host.size(0), h = q_host.size(1), d = q_host.size(2);
  Tensor flat = gpu_testing::to_device_strided(q_host.contiguous().view({n, h * d}), 16);
  return flat.as_strided({n, h, d}, {flat.stride(0), d, 1});
}

// The SM90 kernel's work lists for the batch, as the runner makes them: planned on the host from the step's lengths
// for the device's SM count, the split-K partials bounded by what the workspace holds past its counters (none
// without a workspace), the rows uploaded to the device. `b` holds the host metadata, `workspace` the device one's.
ops::MlaSchedule planned_schedule(const Batch& b, const Tensor& workspace, int num_heads, int latent) {
  const int64_t ctas = ops::sm90_mla_ctas(Device::cuda());
  CHECK_GT(ctas, 0) << "planned_schedule: no SM90 device";
  const int64_t num_reqs = b.md.num_reqs;
  const int32_t* qsl = b.md.query_start_loc.data<int32_t>();
  const int32_t* seq_lens = b.md.seq_lens.data<int32_t>();
  const int64_t width =
      ops::mla_schedule_width(std::max(qsl[num_reqs], 1), std::max<int64_t>(num_reqs, 1), num_heads, ctas);
  int64_t max_partial_rows = 0;
  if (workspace.defined()) {
    const int64_t scratch = (workspace.numel() - ops::kPagedAttentionWorkspaceCounters) * int64_t{sizeof(float)};
    max_partial_rows = ops::mla_partial_capacity(scratch, latent, 2);
  }
  std::vector<int32_t> rows(static_cast<size_t>(ops::kMlaScheduleRows * width));
  ops::MlaSchedule s = ops::plan_mla_schedule(rows.data(), width, qsl, seq_lens, num_reqs, b.md.block_table.stride(0),
                                              num_heads, ctas, max_partial_rows);
  s.rows = to_device(Tensor::from_i32(rows, {ops::kMlaScheduleRows, width}));
  return s;
}

std::string describe_schedule(const ops::MlaSchedule& s) {
  return " (plan: " + std::to_string(s.num_works) + " works over " + std::to_string(s.num_groups) + " x " +
         std::to_string(s.ctas_per_tile) + " CTAs, " + std::to_string(s.partial_rows) + " partial rows)";
}

// Builds the batch, runs CPU and CUDA, compares; twice on the same workspace (the split-K arrival counters must be
// back at zero after every call, else the second call's last CTA never recognises itself).
void run_case(const Case& c) {
  const Batch b = make_batch(c);
  const int row = c.latent + c.rope;
  Tensor cache = random_tensor({b.num_blocks, c.block_size, row}, c.seed * 7 + 1, c.dtype);
  Tensor q = random_tensor({b.num_tokens, c.num_heads, row}, c.seed * 7 + 2, c.dtype, -2.f, 2.f);
  const float scale = mla_scale(c);
  Tensor ref = Tensor::empty({b.num_tokens, c.num_heads, c.latent}, DType::kF32);
  ops::mla_attention(ref, q.to(DType::kF32), cache.to(DType::kF32), b.md, scale);

  ops::AttentionMetadata dmd = device_metadata(b.md);
  if (c.shared_workspace != nullptr) {
    dmd.workspace = *c.shared_workspace;
  } else if (c.workspace) {
    const int64_t elems = ops::paged_attention_workspace_elems(b.num_tokens, c.num_heads, c.latent, 16384);
    if (elems > 0) dmd.workspace = workspace_device(elems);
  }
  std::string what = describe(c);
  if (c.sm90) {
    dmd.mla_schedule = planned_schedule(b, dmd.workspace, c.num_heads, c.latent);
    what += describe_schedule(dmd.mla_schedule);
    ASSERT_GT(dmd.mla_schedule.num_works, 0) << what;
    if (c.expect_split) {
      EXPECT_GT(dmd.mla_schedule.partial_rows, 0) << what << ": no tile split";
    }
  }
  cuda::set_mla_heads_per_cta(c.heads_per_cta);
  Tensor cache_d = to_device(cache), q_d = strided_query(q);
  for (int call = 0; call < 2; ++call) {
    Tensor out = poisoned_device({b.num_tokens, c.num_heads, c.latent}, c.dtype);
    const int64_t sm90_before = cuda::mla_sm90_calls();
    ops::mla_attention(out, q_d, cache_d, dmd, scale);
    if (c.sm90) {
      EXPECT_EQ(cuda::mla_sm90_calls(), sm90_before + 1) << what << ": the SM90 kernel did not run";
    }
    expect_matches(to_host(out), ref, tolerance(c.dtype), what + " call " + std::to_string(call));
  }
  cuda::set_mla_heads_per_cta(0);
}

// Random requests: num_decode decodes with contexts up to max_ctx, then num_prefill chunks of up to max_q tokens on
// top of up to max_ctx / 4 cached tokens.
std::vector<Req> random_reqs(std::mt19937& rng, int num_decode, int num_prefill, int max_ctx, int max_q) {
  std::vector<Req> reqs;
  for (int i = 0; i < num_decode; ++i) reqs.push_back({static_cast<int>(rng() % max_ctx), 1});
  for (int i = 0; i < num_prefill; ++i) {
    reqs.push_back({static_cast<int>(rng() % (max_ctx / 4 + 1)), 2 + static_cast<int>(rng() % (max_q - 1))});
  }
  return reqs;
}

// The fixtures' dims (4 heads, L 64, R 16): the simple kernel, every dtype.
TEST_P(MlaGpuTest, FixtureDimsDecodePrefillMixed) {
  std::mt19937 rng(21);
  for (int trial = 0; trial < 4; ++trial) {
    Case c;
    c.name = "fixture trial " + std::to_string(trial);
    c.dtype = GetParam();
    c.num_heads = 4;
    c.latent = 64;
    c.rope = 16;
    c.block_size = trial % 2 == 0 ? 16 : 5;
    c.reqs = random_reqs(rng, 1 + trial, trial, 300, 40);
    c.pad_tokens = trial % 2;
    c.seed = 100 + trial;
    run_case(c);
  }
}

// DeepSeek's rows (L 512, R 64) at 16 heads (tensor parallel 8) and 128: decode, prefill, mixed; both tensor-core
// head groupings on the 16-bit types (f32 takes the simple kernel).
TEST_P(MlaGpuTest, DeepSeekDimsDecodePrefillMixed) {
  std::mt19937 rng(31);
  for (int heads : {16, 128}) {
    for (int grouping : {16, 64}) {
      Case c;
      c.dtype = GetParam();
      c.num_heads = heads;
      c.heads_per_cta = grouping;
      c.seed = 200 + heads + grouping;
      c.name = "decode";
      c.reqs = random_reqs(rng, 5, 0, 2000, 2);
      run_case(c);
      c.name = "prefill";
      c.reqs = {{0, 37}, {70, 19}};
      c.pad_tokens = 3;
      run_case(c);
      c.name = "mixed";
      c.reqs = random_reqs(rng, 3, 2, 600, 24);
      c.pad_tokens = 1;
      run_case(c);
    }
  }
}

// Short contexts on every head grouping (1 to 3 tiles, split-K over them, a prefill chunk): small enough for
// compute-sanitizer's racecheck (scripts/gpu-check --sanitize).
TEST_P(MlaGpuTest, ShortContextsEveryGrouping) {
  for (int heads : {16, 128}) {
    for (int grouping : {16, 64}) {
      Case c;
      c.name = "short";
      c.dtype = GetParam();
      c.num_heads = heads;
      c.heads_per_cta = grouping;
      c.seed = 500 + heads + grouping;
      c.reqs = {{0, 1}, {40, 1}, {95, 1}, {3, 5}};
      c.pad_tokens = 1;
      run_case(c);
    }
  }
}

// Contexts from 1 to 5000 (single-row contexts, block boundaries, tile boundaries, long splits) with and without the
// workspace, without hints (max_seq_len 0: split-K sized by the SM count alone), block sizes 16 and 64.
TEST_P(MlaGpuTest, ContextLengthsSplitKAndWorkspace) {
  const DType dtype = GetParam();
  for (bool workspace : {true, false}) {
    for (bool hints : {true, false}) {
      Case c;
      c.name = "contexts";
      c.dtype = dtype;
      c.num_heads = 16;
      c.workspace = workspace;
      c.hints = hints;
      c.block_size = hints ? 16 : 64;
      c.seed = 300 + workspace * 2 + hints;
      c.reqs = {{0, 1}, {4999, 1}, {31, 1}, {32, 1}, {63, 1}, {1023, 1}, {2047, 1}};
      run_case(c);
    }
  }
  // 128 heads at the bench's context, split-K on one token.
  Case c;
  c.name = "long 128 heads";
  c.dtype = dtype;
  c.num_heads = 128;
  c.reqs = {{4095, 1}, {3000, 1}};
  c.seed = 310;
  run_case(c);
}

// One workspace serves a run of differently shaped calls (split counts change; the counters stay consistent).
TEST_P(MlaGpuTest, OneWorkspaceManyCalls) {
  const Tensor ws = workspace_device(ops::paged_attention_workspace_elems(64, 128, 512, 16384));
  std::mt19937 rng(41);
  for (int i = 0; i < 6; ++i) {
    Case c;
    c.name = "shared workspace call " + std::to_string(i);
    c.dtype = GetParam();
    c.num_heads = i % 2 == 0 ? 16 : 128;
    c.reqs = random_reqs(rng, 1 + i, i % 3, 3000, 8);
    c.seed = 400 + i;
    c.shared_workspace = &ws;
    run_case(c);
  }
}

// A CUDA graph captured around one decode step's rotary + latent-cache write and attention replays with new lengths,
// positions, slots, block tables and contents in the same (persistent) buffers, as the runner's FULL graphs do, and
// matches the CPU ops run on the same inputs each time.
TEST_P(MlaGpuTest, GraphCaptureReplaysWithChangedLengths) {
  const DType dtype = GetParam();
  const int heads = 16, latent = 512, rope = 64, row = latent + rope, bs = 16, num_reqs = 4, width = 320;
  const int num_blocks = num_reqs * width, max_position = width * bs;
  const float scale = 1.f / std::sqrt(192.f);
  // Persistent device buffers (the graph bakes their addresses in).
  Tensor qsl_d = to_device(Tensor::from_i32(std::vector<int32_t>(num_reqs + 1, 0), {num_reqs + 1}));
  Tensor seq_d = to_device(Tensor::from_i32(std::vector<int32_t>(num_reqs, 0), {num_reqs}));
  Tensor table_d = to_device(Tensor::from_i32(std::vector<int32_t>(num_reqs * width, 0), {num_reqs, width}));
  Tensor pos_d = to_device(Tensor::from_i64(std::vector<int64_t>(num_reqs, 0), {num_reqs}));
  Tensor slots_d = to_device(Tensor::from_i64(std::vector<int64_t>(num_reqs, -1), {num_reqs}));
  Tensor cs_d = to_device(cos_sin_cache(max_position, rope, 10000.0));
  Tensor q_full_d = poisoned_device({num_reqs, heads, row}, dtype);  // [W_UK^T q_nope, rotated q_pe]
  Tensor q_pe_d = poisoned_device({num_reqs, heads, rope}, dtype);
  Tensor kv_d = poisoned_device({num_reqs, row}, dtype);  // [kv_c, k_pe]
  Tensor out_d = poisoned_device({num_reqs, heads, latent}, dtype);
  Tensor cache_d = poisoned_device({num_blocks, bs, row}, dtype);
  ops::AttentionMetadata md;
  md.query_start_loc = qsl_d;
  md.seq_lens = seq_d;
  md.block_table = table_d;
  md.slot_mapping = slots_d;
  md.num_reqs = num_reqs;
  md.num_decode_tokens = num_reqs;
  md.max_query_len = 1;
  md.max_seq_len = max_position;  // max_model_len, as under graphs
  md.workspace = workspace_device(ops::paged_attention_workspace_elems(num_reqs, heads, latent, max_position));

  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cuda::StreamGuard guard(stream);
  auto step = [&] {
    Tensor q_rot = q_full_d.slice(2, latent, row), k_pe = kv_d.slice(1, latent, row);
    ops::mla_rotary_and_cache(pos_d, q_pe_d, q_rot, k_pe, kv_d.slice(1, 0, latent), cs_d, 1, cache_d, slots_d);
    ops::mla_attention(out_d, q_full_d, cache_d, md, scale);
  };
  step();  // warm-up outside the capture (shared-memory attributes); every slot is -1, every token padding
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  step();
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  const Tensor cs_h = cos_sin_cache(max_position, rope, 10000.0);
  std::mt19937 rng(51);
  for (int replay = 0; replay < 4; ++replay) {
    // New lengths, a new shuffled block table, the decode tokens' positions and slots, and new contents.
    std::vector<int32_t> qsl(num_reqs + 1), seq(num_reqs), table(num_reqs * width);
    std::vector<int64_t> pos(num_reqs), slots(num_reqs);
    std::iota(qsl.begin(), qsl.end(), 0);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    for (int r = 0; r < num_reqs; ++r) {
      seq[r] = 1 + static_cast<int>(rng() % (max_position - 1));
      pos[r] = seq[r] - 1;
      slots[r] = static_cast<int64_t>(table[r * width + pos[r] / bs]) * bs + pos[r] % bs;
    }
    Tensor qsl_h = Tensor::from_i32(qsl, {num_reqs + 1}), seq_h = Tensor::from_i32(seq, {num_reqs});
    Tensor table_h = Tensor::from_i32(table, {num_reqs, width});
    Tensor pos_h = Tensor::from_i64(pos, {num_reqs}), slots_h = Tensor::from_i64(slots, {num_reqs});
    Tensor cache_h = random_tensor({num_blocks, bs, row}, 60 + replay, dtype);
    Tensor q_full_h = random_tensor({num_reqs, heads, row}, 70 + replay, dtype, -2.f, 2.f);
    Tensor q_pe_h = random_tensor({num_reqs, heads, rope}, 80 + replay, dtype, -2.f, 2.f);
    Tensor kv_h = random_tensor({num_reqs, row}, 90 + replay, dtype, -2.f, 2.f);
    for (auto [dst, src] : {std::pair<Tensor*, Tensor*>{&qsl_d, &qsl_h},
                            {&seq_d, &seq_h},
                            {&table_d, &table_h},
                            {&pos_d, &pos_h},
                            {&slots_d, &slots_h},
                            {&cache_d, &cache_h},
                            {&q_full_d, &q_full_h},
                            {&q_pe_d, &q_pe_h},
                            {&kv_d, &kv_h}}) {
      ASSERT_EQ(cudaMemcpy(dst->raw_data(), src->raw_data(), src->nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
    }
    ASSERT_EQ(cudaMemset(out_d.raw_data(), 0xff, out_d.nbytes()), cudaSuccess);
    sync_device();  // pageable copies may still be in flight on return; the graph's stream does not wait for them
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);

    // The same step on the CPU in f32.
    Tensor q_full_f = q_full_h.to(DType::kF32), kv_f = kv_h.to(DType::kF32), cache_f = cache_h.to(DType::kF32);
    Tensor q_rot_f = q_full_f.slice(2, latent, row), k_pe_f = kv_f.slice(1, latent, row);
    ops::mla_rotary_and_cache(pos_h, q_pe_h.to(DType::kF32), q_rot_f, k_pe_f, kv_f.slice(1, 0, latent), cs_h, 1,
                              cache_f, slots_h);
    ops::AttentionMetadata ref_md = md;
    ref_md.query_start_loc = qsl_h;
    ref_md.seq_lens = seq_h;
    ref_md.block_table = table_h;
    ref_md.slot_mapping = slots_h;
    ref_md.workspace = Tensor();
    Tensor ref = Tensor::empty({num_reqs, heads, latent}, DType::kF32);
    ops::mla_attention(ref, q_full_f, cache_f, ref_md, scale);
    std::string what = "graph replay " + std::to_string(replay) + " lengths";
    for (int s : seq) what += ' ' + std::to_string(s);
    expect_matches(to_host(out_d), ref, tolerance(dtype), what);
    expect_matches(to_host(cache_d), cache_f, tolerance(dtype), what + " (cache)");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// ---- FlashInfer's SM90 kernel over planned work lists (bf16, L 512, R 64) ----

class MlaSm90GpuTest : public gpu_testing::GpuTest {
 protected:
  void SetUp() override {
    gpu_testing::GpuTest::SetUp();
    if (IsSkipped()) return;
    if (ops::sm90_mla_ctas(Device::cuda()) == 0) GTEST_SKIP() << "not an sm_90 device (or LLMSERVE_SM90_MLA=0)";
  }
};

Case sm90_case(const std::string& name, int heads, std::vector<Req> reqs, uint32_t seed) {
  Case c;
  c.name = name;
  c.dtype = DType::kBF16;
  c.num_heads = heads;
  c.sm90 = true;
  c.reqs = std::move(reqs);
  c.seed = seed;
  return c;
}

// Decode (one query token per request) at 128 heads (two CTAs per 128-row tile) and 16 (one CTA per 64-row tile):
// one request, one of context 1, and a batch of 8 over contexts 1..4096 (block boundaries 16 / 17, key-tile
// boundaries 64, lengths not a multiple of the block), split-K with a workspace and whole tiles without one.
TEST_F(MlaSm90GpuTest, PlannedDecodeMatchesCpu) {
  const std::vector<Req> batch8 = {{0, 1}, {4095, 1}, {16, 1}, {33, 1}, {1500, 1}, {63, 1}, {2047, 1}, {700, 1}};
  for (int heads : {128, 16}) {
    Case c = sm90_case("decode b1", heads, {{3000, 1}}, 600 + heads);
    c.expect_split = true;
    run_case(c);
    run_case(sm90_case("decode b1 context 1", heads, {{0, 1}}, 610 + heads));
    c = sm90_case("decode b8", heads, batch8, 620 + heads);
    c.expect_split = true;
    run_case(c);
    c = sm90_case("decode b8", heads, batch8, 630 + heads);
    c.workspace = false;  // no split-K: each tile one work over all its keys
    run_case(c);
  }
}

// Mixed batches (decodes first, then prefill chunks on cached contexts) with padding tokens: causal tiles of several
// tokens (16 heads: 4 tokens a tile; 128: one), more works than groups (each CTA runs several in turn), and a
// chunk on a long context beside a long decode (split).
TEST_F(MlaSm90GpuTest, PlannedMixedMatchesCpu) {
  for (int heads : {128, 16}) {
    Case c = sm90_case("mixed", heads, {{100, 1}, {3000, 1}, {0, 1}, {0, 37}, {70, 19}, {5, 100}}, 640 + heads);
    c.pad_tokens = 2;
    run_case(c);
    c = sm90_case("chunked prefill", heads, {{4000, 1}, {1200, 48}, {0, 7}}, 650 + heads);
    c.pad_tokens = 1;
    c.expect_split = true;
    run_case(c);
  }
  // 16 heads: 140 tiles over 132 groups (the 128-head mixed batch above already runs ~3 works per group).
  run_case(sm90_case("prefill", 16, {{10, 300}, {50, 260}}, 660));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MlaGpuTest, ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return gpu_testing::dtype_str(info.param);
                         });

}  // namespace

int run_bench();       // mla_gpu_bench.cc
int run_bench_sm90();  // mla_gpu_bench.cc

}  // namespace llmserve

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--bench") == 0) return llmserve::run_bench();
    if (std::strcmp(argv[i], "--bench-mla-sm90") == 0) return llmserve::run_bench_sm90();
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

// The mixture-of-experts CUDA kernels vs the CPU ops (kernels/cpu/moe.cc, themselves tested against plain loops in
// tests/kernels/moe_test.cc): router ids and weights (logits on a 1/8 grid: many exact ties, no near ties, so ids
// must be equal), the stable grouping with and without tile padding, every grouped-GEMM kernel (weight streaming and
// row-wise: block 1; WMMA tiles: blocks of 16 and 64 rows; the CUTLASS grouped GEMM: blocks of 64, also replayed in
// a CUDA graph) over 1 to 3000 tokens, the down projection with the activation fused (moe_gemm_silu), the combine
// (alone and folded into the next residual norm), routing and grouping in one kernel (moe_route_and_align), and the
// whole chain. Outputs are NaN-poisoned before each
// run.
// `--bench` prints the grouped-GEMM paths' times beside their floors (Qwen3-30B-A3B shapes), and routing + grouping,
// and the combine + residual norm, each as two launches and as one.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>

#include "core/cuda_stream.h"
#include "gpu_test_util.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cutlass_moe_gemm.h"
#include "kernels/ops.h"

namespace llmserve {
namespace {

using gpu_testing::poisoned_device;
using gpu_testing::to_device;
using gpu_testing::to_host;
using testing::expect_close;
using testing::random_tensor;
using testing::to_doubles;

class MoeGpuTest : public gpu_testing::GpuTest {};

// Logits on a 1/8 grid in [-2, 2): exact ties are common, distinct values are far apart.
Tensor grid_logits(int64_t T, int64_t E, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-16, 15);
  std::vector<float> v(static_cast<size_t>(T * E));
  for (float& f : v) f = static_cast<float>(d(rng)) / 8.f;
  return Tensor::from_f32(v, {T, E});
}

TEST_F(MoeGpuTest, RouteMatchesCpuIncludingTies) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (auto [E, k] : {std::pair<int64_t, int64_t>{4, 2}, {60, 4}, {128, 8}, {256, 8}}) {
      for (int64_t T : {1, 7, 64, 3000}) {
        for (int64_t scoring : {ops::kMoeScoringSoftmax, ops::kMoeScoringSigmoid}) {
          for (int64_t renorm : {0, 1}) {
            Tensor logits = grid_logits(T, E, static_cast<uint32_t>(T + E));
            Tensor w = Tensor::empty({T, k}, DType::kF32), ids = Tensor::empty({T, k}, DType::kI32);
            ops::moe_route(w, ids, logits, scoring, renorm);
            Tensor dw = poisoned_device({T, k}, DType::kF32), dids = poisoned_device({T, k}, DType::kI32);
            Tensor dlogits = to_device(logits.to(dtype));  // grid values are exact in bf16
            ops::moe_route(dw, dids, dlogits, scoring, renorm);
            const std::string what = "E " + std::to_string(E) + " k " + std::to_string(k) + " T " + std::to_string(T) +
                                     " scoring " + std::to_string(scoring) + " renorm " + std::to_string(renorm);
            Tensor hids = to_host(dids);
            ASSERT_EQ(std::memcmp(hids.raw_data(), ids.raw_data(), ids.nbytes()), 0) << what;
            expect_close(to_host(dw), to_doubles(w), 1e-6, 1e-5, what);
          }
        }
      }
    }
  }
}

TEST_F(MoeGpuTest, RouteGivesTheSameBitsForATokenWhateverTheBatch) {
  // Small batches route one block per token, large ones one warp per token: a token's weights and ids must not
  // depend on which (random logits, so the sums' rounding shows any difference in reduction order).
  for (auto [E, k] : {std::pair<int64_t, int64_t>{128, 8}, {60, 4}, {256, 8}}) {
    for (int64_t scoring : {ops::kMoeScoringSoftmax, ops::kMoeScoringSigmoid}) {
      for (int64_t renorm : {0, 1}) {
        constexpr int64_t T = 600;
        Tensor logits = to_device(random_tensor({T, E}, static_cast<uint32_t>(E + 10 * scoring + renorm)));
        Tensor w = poisoned_device({T, k}, DType::kF32), ids = poisoned_device({T, k}, DType::kI32);
        ops::moe_route(w, ids, logits, scoring, renorm);
        Tensor whole_w = to_host(w), whole_ids = to_host(ids);
        for (int64_t t0 : {int64_t{0}, int64_t{1}, int64_t{599}}) {
          const int64_t n = t0 == 1 ? 255 : 1;  // one token, and a batch just under the block-per-token limit
          Tensor part = logits.slice(0, t0, t0 + n);
          Tensor pw = poisoned_device({n, k}, DType::kF32), pids = poisoned_device({n, k}, DType::kI32);
          ops::moe_route(pw, pids, part, scoring, renorm);
          Tensor hw = to_host(pw), hids = to_host(pids);
          const std::string what = "E " + std::to_string(E) + " scoring " + std::to_string(scoring) + " renorm " +
                                   std::to_string(renorm) + " rows " + std::to_string(t0) + "+" + std::to_string(n);
          EXPECT_EQ(std::memcmp(hw.raw_data(), whole_w.data<float>() + t0 * k, hw.nbytes()), 0) << what;
          EXPECT_EQ(std::memcmp(hids.raw_data(), whole_ids.data<int32_t>() + t0 * k, hids.nbytes()), 0) << what;
        }
      }
    }
  }
}

// Values drawn from `set` (seeded): exact ties are common, and the set is chosen so distinct sums stay far apart.
Tensor drawn_from(const std::vector<float>& set, Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> d(0, set.size() - 1);
  int64_t n = 1;
  for (int64_t v : shape) n *= v;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = set[d(rng)];
  return Tensor::from_f32(v, std::move(shape));
}

// DeepSeek-V3's grouped router. Logits in {-2, -0.5, 0.75, 2.5} and biases in {0, 1}: the choice values
// (sigmoid + bias) differ by >= 0.19 unless equal, the group scores (sums of two) by >= 0.013 (measured in numpy),
// so an ulp of expf between host and device cannot reorder them, while exact ties stay everywhere.
TEST_F(MoeGpuTest, GroupedRouteMatchesCpuIncludingTies) {
  struct Case {
    int64_t E, k, groups, topk_groups;
  };
  for (const Case& c : {Case{256, 8, 8, 4}, Case{64, 6, 8, 3}, Case{16, 4, 4, 2}, Case{1024, 8, 32, 4}}) {
    for (int64_t T : {1, 7, 3000}) {
      for (int64_t renorm : {0, 1}) {
        Tensor logits = drawn_from({-2.f, -0.5f, 0.75f, 2.5f}, {T, c.E}, static_cast<uint32_t>(T * 3 + c.E));
        Tensor bias = drawn_from({0.f, 1.f}, {c.E}, 5);
        Tensor w = Tensor::empty({T, c.k}, DType::kF32), ids = Tensor::empty({T, c.k}, DType::kI32);
        ops::moe_route_grouped(w, ids, logits, bias, c.groups, c.topk_groups, renorm, 2.5f);
        Tensor dw = poisoned_device({T, c.k}, DType::kF32), dids = poisoned_device({T, c.k}, DType::kI32);
        ops::moe_route_grouped(dw, dids, to_device(logits), to_device(bias), c.groups, c.topk_groups, renorm, 2.5f);
        const std::string what = "E " + std::to_string(c.E) + " T " + std::to_string(T);
        Tensor hids = to_host(dids);
        ASSERT_EQ(std::memcmp(hids.raw_data(), ids.raw_data(), ids.nbytes()), 0) << what;
        expect_close(to_host(dw), to_doubles(w), 1e-6, 1e-5, what);
      }
    }
  }
}

Tensor random_ids(int64_t T, int64_t k, int64_t E, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids;
  std::vector<int32_t> all(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    ids.insert(ids.end(), all.begin(), all.begin() + k);
  }
  return Tensor::from_i32(ids, {T, k});
}

struct Aligned {
  Tensor sorted_pairs, pair_rows, expert_offsets;
  Tensor experts_touched;  // [1] i64, started at kTouchedStart
};

constexpr int64_t kTouchedStart = 77;  // moe_align adds to the count

Aligned align_on(const Tensor& ids, int64_t E, int64_t block, Device device) {
  const int64_t capacity = ops::moe_align_capacity(ids.numel(), E, block);
  Aligned a;
  const Tensor touched = Tensor::from_i64({kTouchedStart}, {1});
  if (device.is_cpu()) {
    a = {Tensor::empty({capacity}, DType::kI32), Tensor::empty({ids.numel()}, DType::kI32),
         Tensor::empty({E + 1}, DType::kI32), touched};
  } else {
    a = {Tensor::empty({capacity}, DType::kI32, device), poisoned_device({ids.numel()}, DType::kI32),
         poisoned_device({E + 1}, DType::kI32), to_device(touched)};
    CHECK(cudaMemset(a.sorted_pairs.raw_data(), 0x7f, a.sorted_pairs.nbytes()) == cudaSuccess);
  }
  ops::moe_align(a.sorted_pairs, a.pair_rows, a.expert_offsets, a.experts_touched,
                 device.is_cpu() ? ids : to_device(ids), block);
  return a;
}

TEST_F(MoeGpuTest, AlignMatchesCpuAndLeavesTheTailAlone) {
  for (auto [E, k] : {std::pair<int64_t, int64_t>{4, 2}, {128, 8}, {1024, 8}}) {
    for (int64_t T : {1, 3, 64, 3000}) {
      for (int64_t block : {int64_t{1}, ops::kMoeGemmSmallTileRows, ops::kMoeGemmTileRows}) {
        Tensor ids = random_ids(T, k, E, static_cast<uint32_t>(T * 7 + E));
        const Aligned c = align_on(ids, E, block, Device::cpu());
        const Aligned g = align_on(ids, E, block, Device::cuda());
        const std::string what =
            "E " + std::to_string(E) + " T " + std::to_string(T) + " block " + std::to_string(block);
        Tensor off = to_host(g.expert_offsets), rows = to_host(g.pair_rows), sorted = to_host(g.sorted_pairs);
        ASSERT_EQ(std::memcmp(off.raw_data(), c.expert_offsets.raw_data(), off.nbytes()), 0) << what;
        ASSERT_EQ(std::memcmp(rows.raw_data(), c.pair_rows.raw_data(), rows.nbytes()), 0) << what;
        const int32_t used = off.data<int32_t>()[E];
        ASSERT_EQ(std::memcmp(sorted.raw_data(), c.sorted_pairs.raw_data(), used * sizeof(int32_t)), 0) << what;
        for (int64_t r = used; r < sorted.numel(); ++r) ASSERT_EQ(sorted.data<int32_t>()[r], 0x7f7f7f7f) << what;
        ASSERT_EQ(to_host(g.experts_touched).data<int64_t>()[0], c.experts_touched.data<int64_t>()[0]) << what;
        ASSERT_GT(c.experts_touched.data<int64_t>()[0], kTouchedStart) << what;
      }
    }
  }
}

// moe_route_and_align (one kernel up to kMoeRouteAlignMaxTokens tokens, the two kernels past it) against moe_route
// then moe_align on CUDA: every output bit-equal, the rows past the used ones untouched, and the running count of
// touched experts added to, not set. Grid logits (ties), 8 to 1024 experts, both scorings, blocks 1 and 16.
TEST_F(MoeGpuTest, RouteAndAlignMatchesTheTwoOps) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (auto [E, k] : {std::pair<int64_t, int64_t>{8, 2}, {128, 8}, {1024, 32}}) {
      for (int64_t T = 1; T <= ops::kMoeRouteAlignMaxTokens + 2; ++T) {
        for (int64_t scoring : {ops::kMoeScoringSoftmax, ops::kMoeScoringSigmoid}) {
          for (int64_t block : {int64_t{1}, ops::kMoeGemmSmallTileRows}) {
            const std::string what = std::string(dtype_name(dtype)) + " E " + std::to_string(E) + " k " +
                                     std::to_string(k) + " T " + std::to_string(T) + " scoring " +
                                     std::to_string(scoring) + " block " + std::to_string(block);
            Tensor logits = to_device(grid_logits(T, E, static_cast<uint32_t>(T * 5 + E)).to(dtype));
            const int64_t capacity = ops::moe_align_capacity(T * k, E, block);
            auto run = [&](bool fused) {
              Aligned a = {Tensor::empty({capacity}, DType::kI32, Device::cuda()),
                           poisoned_device({T * k}, DType::kI32), poisoned_device({E + 1}, DType::kI32),
                           to_device(Tensor::from_i64({kTouchedStart}, {1}))};
              CHECK(cudaMemset(a.sorted_pairs.raw_data(), 0x7f, a.sorted_pairs.nbytes()) == cudaSuccess);
              Tensor w = poisoned_device({T, k}, DType::kF32), ids = poisoned_device({T, k}, DType::kI32);
              if (fused) {
                ops::moe_route_and_align(w, ids, logits, scoring, 1, a.sorted_pairs, a.pair_rows, a.expert_offsets,
                                         a.experts_touched, block);
              } else {
                ops::moe_route(w, ids, logits, scoring, 1);
                ops::moe_align(a.sorted_pairs, a.pair_rows, a.expert_offsets, a.experts_touched, ids, block);
              }
              return std::vector<Tensor>{to_host(w),
                                         to_host(ids),
                                         to_host(a.sorted_pairs),
                                         to_host(a.pair_rows),
                                         to_host(a.expert_offsets),
                                         to_host(a.experts_touched)};
            };
            const std::vector<Tensor> got = run(true), want = run(false);
            for (size_t i = 0; i < got.size(); ++i) {
              ASSERT_EQ(std::memcmp(got[i].raw_data(), want[i].raw_data(), got[i].nbytes()), 0)
                  << what << ", output " << i;
            }
            ASSERT_GT(got[5].data<int64_t>()[0], kTouchedStart) << what;
          }
        }
      }
    }
  }
}

// Skewed routing: every token's first choice is expert 0 (one expert owns T rows: several staging passes of the
// streaming kernel), the others distinct and random.
Tensor skewed_ids(int64_t T, int64_t k, int64_t E, uint32_t seed) {
  Tensor ids = random_ids(T, k, E, seed);
  int32_t* v = ids.data<int32_t>();
  for (int64_t t = 0; t < T; ++t) {
    int32_t* row = v + t * k;
    for (int64_t j = 0; j < k; ++j) {
      if (row[j] == 0) std::swap(row[j], row[0]);
    }
    if (row[0] != 0) row[0] = 0;  // expert 0 was not drawn: it replaces the first choice, the rest stay distinct
  }
  return ids;
}

// CUDA moe_gemm against the CPU op on the same (dtype-rounded) values, rows < offsets[E] compared, pad rows zero.
void check_gemm(DType dtype, const Tensor& ids, int64_t E, int64_t N, int64_t K, int64_t block, bool gather,
                uint32_t seed) {
  const int64_t T = ids.size(0), k = ids.size(1);
  const Aligned c = align_on(ids, E, block, Device::cpu());
  const Aligned g = align_on(ids, E, block, Device::cuda());
  const int64_t capacity = c.sorted_pairs.numel(), rows = c.expert_offsets.data<int32_t>()[E];
  Tensor x = random_tensor({gather ? T : capacity, K}, seed + 1).to(dtype).to(DType::kF32);
  Tensor w = random_tensor({E, N, K}, seed + 2, DType::kF32, -0.2f, 0.2f).to(dtype).to(DType::kF32);
  Tensor ref = Tensor::empty({capacity, N}, DType::kF32);
  ops::moe_gemm(ref, x, w, c.sorted_pairs, c.expert_offsets, gather ? k : 0, block);
  Tensor out = poisoned_device({capacity, N}, dtype);
  ops::moe_gemm(out, to_device(x.to(dtype)), to_device(w.to(dtype)), g.sorted_pairs, g.expert_offsets, gather ? k : 0,
                block);
  const std::string what = std::string(dtype_name(dtype)) + " T " + std::to_string(T) + " k " + std::to_string(k) +
                           " E " + std::to_string(E) + " N " + std::to_string(N) + " K " + std::to_string(K) +
                           " block " + std::to_string(block) + (gather ? " gather" : " grouped");
  Tensor got = to_host(out).slice(0, 0, rows).contiguous();
  expect_close(got, to_doubles(ref.slice(0, 0, rows).contiguous()), gpu_testing::rounding_atol(dtype) * 4,
               gpu_testing::rounding_rtol(dtype), what);
  for (int64_t r = 0; r < rows; ++r) {
    if (c.sorted_pairs.data<int32_t>()[r] >= 0) continue;
    for (int64_t n = 0; n < N; ++n) ASSERT_EQ(testing::at(got, r * N + n), 0.0) << what << " pad row " << r;
  }
}

// Block 1 (and blocks that are no tile multiple): the weight-streaming kernel for f16 / bf16 -- 1, 2, 4 and 8 rows
// staged per pass (by the average rows per expert), experts with no rows, several passes for an overloaded expert,
// column groups past n, padding rows, the per-device shared-memory opt-in above 48 KB -- and the row-wise kernel for
// f32, K not a multiple of 8, or a row too long to stage.
TEST_F(MoeGpuTest, GroupedGemmStreamingMatchesCpu) {
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (int64_t T : {1, 2, 7, 64, 512}) {
      for (int64_t k : {1, 2, 8}) {
        const uint32_t seed = static_cast<uint32_t>(T * 10 + k);
        check_gemm(dtype, random_ids(T, k, 64, seed), 64, 96, 128, 1, true, seed);      // mostly empty experts at T 1
        check_gemm(dtype, random_ids(T, k, 16, seed), 16, 33, 48, 1, false, seed + 1);  // odd n, grouped x
        check_gemm(dtype, skewed_ids(T, k, 16, seed), 16, 20, 64, 1, true, seed + 2);   // one expert owns T rows
      }
      check_gemm(dtype, random_ids(T, 2, 8, 3), 8, 33, 21, 1, true, 3);    // K % 8 != 0: the row-wise kernel
      check_gemm(dtype, random_ids(T, 4, 16, 4), 16, 40, 64, 3, true, 4);  // padding rows (block 3)
    }
    if (dtype == DType::kF32) continue;  // long f32 sums: summation order alone passes f32's tolerance
    check_gemm(dtype, random_ids(64, 2, 4, 5), 4, 24, 4096, 1, true, 5);  // 8 rows x 8 KB staged: 64 KB of smem
    check_gemm(dtype, random_ids(7, 2, 4, 6), 4, 16, 8192, 1, false, 6);  // rows shrunk to fit the stage
    check_gemm(dtype, random_ids(2, 2, 3, 7), 3, 8, 40000, 1, true, 7);   // one row past the stage: row-wise
  }
}

// Sends moe_align blocks that are multiples of `block` to the CUTLASS grouped GEMM for a scope (0: every tile block
// to the WMMA kernel), then restores the default.
class CutlassPath {
 public:
  explicit CutlassPath(int64_t block) { cuda::set_moe_gemm_cutlass_block(block); }
  ~CutlassPath() { cuda::set_moe_gemm_cutlass_block(ops::kMoeGemmTileRows); }
  CutlassPath(const CutlassPath&) = delete;
  CutlassPath& operator=(const CutlassPath&) = delete;
};

// Forces the CUTLASS path's tile rows (64: ping-pong, 128: cooperative; 0: by rows per expert) for a scope.
class CutlassTileRows {
 public:
  explicit CutlassTileRows(int64_t rows) { cuda::set_moe_gemm_cutlass_tile_rows(rows); }
  ~CutlassTileRows() { cuda::set_moe_gemm_cutlass_tile_rows(0); }
  CutlassTileRows(const CutlassTileRows&) = delete;
  CutlassTileRows& operator=(const CutlassTileRows&) = delete;
};

// The WMMA tile kernel (blocks of 16 and 64 with the CUTLASS path off).
TEST_F(MoeGpuTest, GroupedGemmTilesMatchCpu) {
  const CutlassPath wmma(0);
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kF32}) {  // f32 falls back to the row-wise kernel
    for (int64_t block : {ops::kMoeGemmSmallTileRows, ops::kMoeGemmTileRows}) {
      for (int64_t T : {1, 17, 200, 700, 3000}) {
        check_gemm(dtype, random_ids(T, 8, 128, 4), 128, 192, 256, block, true, 4);
        check_gemm(dtype, random_ids(T, 8, 128, 5), 128, 256, 96, block, false, 5);
        check_gemm(dtype, random_ids(T, 2, 4, 6), 4, 100, 72, block, true, 6);  // partial column and k tiles
      }
    }
  }
}

// Blocks of kMoeGemmTileRows on the CUTLASS grouped GEMM (cutlass_moe_gemm.cu; H100 / H200), with its tile rows
// chosen by rows per expert, then forced to each of its two configurations: token counts from one
// (nearly every expert without rows) past the layer's switch to 64-row padding, one expert owning every token (many
// 64-row tiles in one group), odd N and K (partial 256-column and 64-deep tiles), gathered and grouped x; each group
// is the expert's pairs only, its padding rows must come back as zeros (out is NaN-poisoned). N = 100 does not meet
// TMA's 16-byte rows: the WMMA tiles take it, checked here with the CUTLASS path on.
TEST_F(MoeGpuTest, GroupedGemmCutlassMatchesCpu) {
  {
    Tensor out = Tensor::empty({64, 192}, DType::kBF16, Device::cuda());
    Tensor x = Tensor::empty({8, 256}, DType::kBF16, Device::cuda());
    Tensor w = Tensor::empty({4, 192, 256}, DType::kBF16, Device::cuda());
    ASSERT_TRUE(cuda::moe_gemm_cutlass_applies(out, x, w)) << "the CUTLASS path needs an sm_90 GPU";
    Tensor w100 = Tensor::empty({4, 100, 256}, DType::kBF16, Device::cuda());
    ASSERT_FALSE(cuda::moe_gemm_cutlass_applies(out, x, w100));
  }
  const CutlassPath cutlass(ops::kMoeGemmTileRows);
  const int64_t block = ops::kMoeGemmTileRows;
  for (int64_t tile_rows : {0, 64, 128}) {
    const CutlassTileRows tiles(tile_rows);
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      for (int64_t T : {1, 3, 17, 200, 257, 700, 2048, 3001}) {
        if (tile_rows != 0 && dtype == DType::kF16 && T % 2 == 0) continue;  // f16 forced: odd counts suffice
        const uint32_t seed = static_cast<uint32_t>(T * 7 + tile_rows);
        check_gemm(dtype, random_ids(T, 8, 128, seed), 128, 192, 256, block, true, seed);          // gate/up-like
        check_gemm(dtype, random_ids(T, 8, 128, seed + 1), 128, 256, 96, block, false, seed + 1);  // down-like
        check_gemm(dtype, random_ids(T, 2, 4, seed + 2), 4, 200, 72, block, true, seed + 2);       // partial tiles
        check_gemm(dtype, skewed_ids(T, 4, 16, seed + 3), 16, 64, 128, block, true, seed + 3);     // one big group
        check_gemm(dtype, random_ids(T, 2, 4, seed + 4), 4, 100, 72, block, true, seed + 4);       // WMMA fallback
      }
    }
  }
  // Blocks of 16 on CUTLASS too (what set_moe_gemm_cutlass_block(kMoeGemmSmallTileRows) selects): other padding.
  const CutlassPath small(ops::kMoeGemmSmallTileRows);
  for (int64_t T : {5, 100, 300}) {
    const uint32_t seed = static_cast<uint32_t>(T * 11);
    check_gemm(DType::kBF16, random_ids(T, 8, 128, seed), 128, 192, 256, ops::kMoeGemmSmallTileRows, true, seed);
    check_gemm(DType::kBF16, random_ids(T, 8, 128, seed + 1), 128, 256, 96, ops::kMoeGemmSmallTileRows, false,
               seed + 1);
  }
}

// The CUTLASS path inside a CUDA graph: moe_align + moe_gemm captured once (after an eager warm-up sized the
// scratch), then replayed for new routings written into the captured ids: every group size is read on the device.
TEST_F(MoeGpuTest, GroupedGemmCutlassReplaysInAGraph) {
  const CutlassPath cutlass(ops::kMoeGemmTileRows);
  const int64_t T = 300, k = 8, E = 128, N = 192, K = 256, block = ops::kMoeGemmTileRows;
  const DType dtype = DType::kBF16;
  const int64_t capacity = ops::moe_align_capacity(T * k, E, block);
  Tensor x = random_tensor({T, K}, 41).to(dtype).to(DType::kF32);
  Tensor w = random_tensor({E, N, K}, 42, DType::kF32, -0.2f, 0.2f).to(dtype).to(DType::kF32);
  Tensor dx = to_device(x.to(dtype)), dw = to_device(w.to(dtype));
  Tensor ids = to_device(random_ids(T, k, E, 43));
  Tensor sorted = Tensor::empty({capacity}, DType::kI32, Device::cuda());
  Tensor rows = Tensor::empty({T * k}, DType::kI32, Device::cuda());
  Tensor off = Tensor::empty({E + 1}, DType::kI32, Device::cuda());
  Tensor touched = Tensor::zeros({1}, DType::kI64, Device::cuda());
  Tensor out = poisoned_device({capacity, N}, dtype);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the inputs' copies, before another stream reads them
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph;
  {
    cuda::StreamGuard guard(stream);
    ops::moe_align(sorted, rows, off, touched, ids, block);  // eager: sizes the scratch
    ops::moe_gemm(out, dx, dw, sorted, off, k, block);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    ops::moe_align(sorted, rows, off, touched, ids, block);
    ops::moe_gemm(out, dx, dw, sorted, off, k, block);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  }
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (uint32_t seed : {44u, 45u, 46u}) {
    // A skewed routing on one replay: group sizes far from the captured call's.
    Tensor host_ids = seed == 45u ? skewed_ids(T, k, E, seed) : random_ids(T, k, E, seed);
    Tensor staged = to_device(host_ids);
    ids.copy_from(staged);
    ASSERT_EQ(cudaMemsetAsync(out.raw_data(), 0xff, out.nbytes(), stream), cudaSuccess);  // NaN poison
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const Aligned c = align_on(host_ids, E, block, Device::cpu());
    const int64_t used = c.expert_offsets.data<int32_t>()[E];
    Tensor ref = Tensor::empty({capacity, N}, DType::kF32);
    ops::moe_gemm(ref, x, w, c.sorted_pairs, c.expert_offsets, k, block);
    Tensor got = to_host(out).slice(0, 0, used).contiguous();
    const std::string what = "graph replay seed " + std::to_string(seed);
    expect_close(got, to_doubles(ref.slice(0, 0, used).contiguous()), gpu_testing::rounding_atol(dtype) * 4,
                 gpu_testing::rounding_rtol(dtype), what);
    for (int64_t r = 0; r < used; ++r) {
      if (c.sorted_pairs.data<int32_t>()[r] >= 0) continue;
      for (int64_t n = 0; n < N; ++n) ASSERT_EQ(testing::at(got, r * N + n), 0.0) << what << " pad row " << r;
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// moe_gemm_silu (the down projection reading silu(g) * u from the gate/up output) against the CPU op: fused in the
// streaming kernel (block 1 or 3, f16 / bf16), through silu_and_mul + moe_gemm elsewhere (tiles, f32, K % 8 != 0).
TEST_F(MoeGpuTest, GroupedGemmSiluMatchesCpu) {
  struct Case {
    int64_t T, k, E, N, K, block;
    bool skewed;
  };
  const Case cases[] = {{1, 8, 128, 64, 96, 1, false},    {2, 1, 16, 33, 48, 1, false},    {7, 2, 16, 40, 64, 1, false},
                        {64, 8, 128, 64, 96, 1, false},   {512, 8, 128, 32, 64, 1, false}, {64, 2, 16, 24, 64, 1, true},
                        {64, 2, 4, 24, 4096, 1, false},   {9, 4, 16, 40, 64, 3, false},    {5, 2, 8, 33, 21, 1, false},
                        {200, 8, 128, 64, 96, 16, false}, {700, 8, 128, 64, 96, 64, false}};
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (const Case& c : cases) {
      if (dtype == DType::kF32 && c.K > 1024) continue;  // as in GroupedGemmStreamingMatchesCpu
      const uint32_t seed = static_cast<uint32_t>(c.T * 3 + c.K);
      Tensor ids = c.skewed ? skewed_ids(c.T, c.k, c.E, seed) : random_ids(c.T, c.k, c.E, seed);
      const Aligned h = align_on(ids, c.E, c.block, Device::cpu());
      const Aligned g = align_on(ids, c.E, c.block, Device::cuda());
      const int64_t capacity = h.sorted_pairs.numel(), rows = h.expert_offsets.data<int32_t>()[c.E];
      Tensor gate_up = random_tensor({capacity, 2 * c.K}, seed + 1, DType::kF32, -3.f, 3.f).to(dtype).to(DType::kF32);
      Tensor w = random_tensor({c.E, c.N, c.K}, seed + 2, DType::kF32, -0.2f, 0.2f).to(dtype).to(DType::kF32);
      // The op's contract: silu(g) * u rounded to the dtype (as silu_and_mul stores it), then the grouped GEMM in f32.
      Tensor act = Tensor::empty({capacity, c.K}, DType::kF32), ref = Tensor::empty({capacity, c.N}, DType::kF32);
      ops::silu_and_mul(act, gate_up);
      act = act.to(dtype).to(DType::kF32);
      ops::moe_gemm(ref, act, w, h.sorted_pairs, h.expert_offsets, 0, c.block);
      Tensor out = poisoned_device({capacity, c.N}, dtype), dact = poisoned_device({capacity, c.K}, dtype);
      ops::moe_gemm_silu(out, dact, to_device(gate_up.to(dtype)), to_device(w.to(dtype)), g.sorted_pairs,
                         g.expert_offsets, c.block);
      const std::string what = std::string(dtype_name(dtype)) + " T " + std::to_string(c.T) + " k " +
                               std::to_string(c.k) + " E " + std::to_string(c.E) + " N " + std::to_string(c.N) + " K " +
                               std::to_string(c.K) + " block " + std::to_string(c.block) + (c.skewed ? " skewed" : "");
      Tensor got = to_host(out).slice(0, 0, rows).contiguous();
      // atol: one activation rounded the other way (the two expf differ in the last f32 bit) moves an output by up
      // to a bf16 ulp of |act| <= 9 times |w| <= 0.2, ~6e-3.
      expect_close(got, to_doubles(ref.slice(0, 0, rows).contiguous()), gpu_testing::rounding_atol(dtype) * 8,
                   gpu_testing::rounding_rtol(dtype) * 2, what);
      for (int64_t r = 0; r < rows; ++r) {
        if (h.sorted_pairs.data<int32_t>()[r] >= 0) continue;
        for (int64_t n = 0; n < c.N; ++n) ASSERT_EQ(testing::at(got, r * c.N + n), 0.0) << what << " pad row " << r;
      }
    }
  }
}

TEST_F(MoeGpuTest, CombineMatchesCpu) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    // H 320 and 2304: the 16-byte kernel (one and two column blocks of 8 x 256); 100: the scalar one.
    for (auto [T, H] : {std::pair<int64_t, int64_t>{1, 320}, {9, 100}, {1000, 320}, {37, 2304}}) {
      const int64_t k = 4, E = 16;
      Tensor ids = random_ids(T, k, E, 9);
      const Aligned c = align_on(ids, E, 1, Device::cpu());
      Tensor expert_out = random_tensor({T * k, H}, 10).to(dtype).to(DType::kF32);
      Tensor weights = random_tensor({T, k}, 11, DType::kF32, 0.f, 1.f);
      Tensor shared = random_tensor({T, H}, 12).to(dtype).to(DType::kF32);
      Tensor gate = random_tensor({T, 1}, 13, DType::kF32, -3.f, 3.f).to(dtype).to(DType::kF32);
      for (int variant = 0; variant < 3; ++variant) {
        Tensor ref = Tensor::empty({T, H}, DType::kF32);
        ops::moe_combine(ref, expert_out, weights, c.pair_rows, variant >= 1 ? &shared : nullptr,
                         variant == 2 ? &gate : nullptr);
        Tensor out = poisoned_device({T, H}, dtype), dshared = to_device(shared.to(dtype));
        Tensor dgate = to_device(gate.to(dtype));
        ops::moe_combine(out, to_device(expert_out.to(dtype)), to_device(weights), to_device(c.pair_rows),
                         variant >= 1 ? &dshared : nullptr, variant == 2 ? &dgate : nullptr);
        expect_close(to_host(out), to_doubles(ref), gpu_testing::rounding_atol(dtype),
                     gpu_testing::rounding_rtol(dtype), "combine T " + std::to_string(T) + " H " + std::to_string(H));
      }
    }
  }
}

// The fused op, or the two it stands for (eps 1e-6).
void combine_add_rms_norm(bool fused, Tensor& x, Tensor& residual, const Tensor& expert_out, const Tensor& weights,
                          const Tensor& pair_rows, const Tensor* shared, const Tensor* gate, const Tensor& norm) {
  if (fused) {
    ops::moe_combine_add_rms_norm(x, residual, expert_out, weights, pair_rows, shared, gate, norm, 1e-6f);
  } else {
    ops::moe_combine(x, expert_out, weights, pair_rows, shared, gate);
    ops::fused_add_rms_norm(x, residual, norm, 1e-6f);
  }
}

// The combine folded into the next residual add + RMSNorm: on CUDA the same bits as moe_combine then
// fused_add_rms_norm (x and residual), for the one-kernel form (hidden 264 .. 8192 in 16-byte rows) and the two-op
// fallback (hidden 100, 256; a misaligned residual view), with routed-only and gated-shared combines, f32 and bf16
// weights; and the CPU op within rounding.
TEST_F(MoeGpuTest, CombineAddRmsNormMatchesTheTwoOps) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (DType wdtype : {DType::kF32, DType::kBF16}) {
      for (auto [T, H] :
           {std::pair<int64_t, int64_t>{1, 2048}, {3, 264}, {64, 2048}, {5, 7168}, {9, 100}, {2, 256}, {200, 4096}}) {
        for (int variant = 0; variant < 3; ++variant) {  // routed only; + shared; + gated shared
          const int64_t k = 8, E = 32;
          const std::string what = std::string(dtype_name(dtype)) + " weight " + std::string(dtype_name(wdtype)) +
                                   " T " + std::to_string(T) + " H " + std::to_string(H) + " variant " +
                                   std::to_string(variant);
          Tensor ids = random_ids(T, k, E, static_cast<uint32_t>(T + H));
          const Aligned c = align_on(ids, E, 1, Device::cpu());
          Tensor expert_out = random_tensor({T * k, H}, 40).to(dtype).to(DType::kF32);
          Tensor weights = random_tensor({T, k}, 41, DType::kF32, 0.f, 0.3f);
          Tensor shared = random_tensor({T, H}, 42).to(dtype).to(DType::kF32);
          Tensor gate = random_tensor({T, 1}, 43, DType::kF32, -3.f, 3.f).to(dtype).to(DType::kF32);
          Tensor residual0 = random_tensor({T, H}, 44, DType::kF32, -2.f, 2.f).to(dtype).to(DType::kF32);
          Tensor norm_weight = random_tensor({H}, 45, DType::kF32, 0.5f, 1.5f).to(wdtype);
          Tensor dexpert = to_device(expert_out.to(dtype)), dweights = to_device(weights);
          Tensor drows = to_device(c.pair_rows), dshared = to_device(shared.to(dtype)),
                 dgate = to_device(gate.to(dtype));
          Tensor dnorm = to_device(norm_weight);
          const Tensor* gpu_shared = variant >= 1 ? &dshared : nullptr;
          const Tensor* gpu_gate = variant == 2 ? &dgate : nullptr;
          auto run = [&](bool fused) {
            Tensor x = poisoned_device({T, H}, dtype), residual = to_device(residual0.to(dtype));
            combine_add_rms_norm(fused, x, residual, dexpert, dweights, drows, gpu_shared, gpu_gate, dnorm);
            return std::pair<Tensor, Tensor>{to_host(x), to_host(residual)};
          };
          const auto [x, residual] = run(true);
          const auto [want_x, want_residual] = run(false);
          ASSERT_EQ(std::memcmp(x.raw_data(), want_x.raw_data(), x.nbytes()), 0) << what << ": x";
          ASSERT_EQ(std::memcmp(residual.raw_data(), want_residual.raw_data(), residual.nbytes()), 0)
              << what << ": residual";
          // The CPU op in the same activation dtype, so it rounds where the GPU does (the combine's output, the
          // stored residual). Only its column sums' order may differ: one rounding of the combine, whose absolute size
          // is that of the operands (|residual| <= 2, not the sum's: residual and combine may nearly cancel).
          Tensor ref_x = Tensor::empty({T, H}, dtype), ref_residual = residual0.to(dtype);
          Tensor ref_shared = shared.to(dtype), ref_gate = gate.to(dtype);
          ops::moe_combine_add_rms_norm(ref_x, ref_residual, expert_out.to(dtype), weights, c.pair_rows,
                                        variant >= 1 ? &ref_shared : nullptr, variant == 2 ? &ref_gate : nullptr,
                                        norm_weight.to(DType::kF32), 1e-6f);
          const double operand_atol = 2 * gpu_testing::rounding_rtol(dtype);
          expect_close(residual, to_doubles(ref_residual.to(DType::kF32)), operand_atol,
                       gpu_testing::rounding_rtol(dtype), what + ": residual vs cpu");
          expect_close(x, to_doubles(ref_x.to(DType::kF32)), 2 * operand_atol, 2 * gpu_testing::rounding_rtol(dtype),
                       what + ": x vs cpu");
        }
      }
    }
  }
  // A residual view whose rows start 8 bytes off 16: the fallback (two ops), still the same bits.
  const int64_t T = 4, H = 512, k = 2, E = 4;
  Tensor ids = random_ids(T, k, E, 50);
  const Aligned c = align_on(ids, E, 1, Device::cpu());
  Tensor dexpert = to_device(random_tensor({T * k, H}, 51).to(DType::kBF16)), drows = to_device(c.pair_rows);
  Tensor dweights = to_device(random_tensor({T, k}, 52, DType::kF32, 0.f, 1.f));
  Tensor dnorm = to_device(random_tensor({H}, 53, DType::kF32, 0.5f, 1.5f));
  Tensor wide = to_device(random_tensor({T, H + 4}, 54).to(DType::kBF16));
  auto run = [&](bool fused) {
    Tensor x = poisoned_device({T, H}, DType::kBF16), base = wide.clone();
    Tensor residual = base.slice(1, 4, H + 4);
    combine_add_rms_norm(fused, x, residual, dexpert, dweights, drows, nullptr, nullptr, dnorm);
    return std::pair<Tensor, Tensor>{to_host(x), to_host(base)};
  };
  const auto [x, base] = run(true);
  const auto [want_x, want_base] = run(false);
  EXPECT_EQ(std::memcmp(x.raw_data(), want_x.raw_data(), x.nbytes()), 0) << "offset residual rows: x";
  EXPECT_EQ(std::memcmp(base.raw_data(), want_base.raw_data(), base.nbytes()), 0) << "offset residual rows: residual";
}

// The FusedMoE chain (route -> align -> gate/up -> silu_and_mul + down -> combine) on CUDA in bf16 vs the CPU in f32
// on the same rounded values; the block each side uses is the one the layer picks (moe_align_block): streaming up
// to kMoeStreamMaxRowsPerExpert rows per expert on average (T <= 4 here), tiles of 16 then 64 rows above.
TEST_F(MoeGpuTest, ChainMatchesCpu) {
  const int64_t E = 16, k = 4, H = 256, I = 128;
  const DType dtype = DType::kBF16;
  Tensor w13 = random_tensor({E, 2 * I, H}, 31, DType::kF32, -0.1f, 0.1f).to(dtype).to(DType::kF32);
  Tensor w2 = random_tensor({E, H, I}, 32, DType::kF32, -0.1f, 0.1f).to(dtype).to(DType::kF32);
  Tensor dw13 = to_device(w13.to(dtype)), dw2 = to_device(w2.to(dtype));
  for (int64_t T : {1, 4, 5, 16, 17, 32, 33, 256, 2048}) {
    Tensor x = random_tensor({T, H}, 33).to(dtype).to(DType::kF32);
    Tensor logits = grid_logits(T, E, 34);
    auto run = [&](Device device, const Tensor& xin, const Tensor& lin, const Tensor& a13, const Tensor& a2,
                   DType act) {
      const int64_t P = T * k, block = ops::moe_align_block(device, P, E);
      const int64_t cap = ops::moe_align_capacity(P, E, block);
      Tensor w = Tensor::empty({T, k}, DType::kF32, device), ids = Tensor::empty({T, k}, DType::kI32, device);
      Tensor sorted = Tensor::empty({cap}, DType::kI32, device), rows = Tensor::empty({P}, DType::kI32, device);
      Tensor off = Tensor::empty({E + 1}, DType::kI32, device), touched = Tensor::zeros({1}, DType::kI64, device);
      Tensor gu = Tensor::empty({cap, 2 * I}, act, device), h = Tensor::empty({cap, I}, act, device);
      Tensor d = Tensor::empty({cap, H}, act, device), out = Tensor::empty({T, H}, act, device);
      ops::moe_route(w, ids, lin, ops::kMoeScoringSoftmax, 1);
      ops::moe_align(sorted, rows, off, touched, ids, block);
      ops::moe_gemm(gu, xin, a13, sorted, off, k, block);
      ops::moe_gemm_silu(d, h, gu, a2, sorted, off, block);
      ops::moe_combine(out, d, w, rows, nullptr, nullptr);
      return out;
    };
    Tensor ref = run(Device::cpu(), x, logits, w13, w2, DType::kF32);
    Tensor got = to_host(run(Device::cuda(), to_device(x.to(dtype)), to_device(logits.to(dtype)), dw13, dw2, dtype));
    expect_close(got, to_doubles(ref), 5e-3, 3e-2, "chain T " + std::to_string(T));
  }
}

// --bench: the expert GEMMs of one Qwen3-30B-A3B layer (128 experts, top-8, hidden 2048, moe_intermediate 768) per
// token count: moe_align + gate/up moe_gemm + moe_gemm_silu (down), on the weight-streaming path (block 1; silu
// fused), the WMMA tiles (block 16 / 64; silu_and_mul + tiles) and the CUTLASS grouped GEMM on the same block with
// 64- and 128-row tiles (silu_and_mul + CUTLASS; the layer's path), "<-" marking the one the layer takes,
// beside two floors: the experts' bytes touched at the measured copy bandwidth (decode) and the FLOPs at the given
// matmul rate (prefill). "align" is moe_align alone, "gate/up" and "down" the two GEMM calls alone (all inside "us").
int run_bench() {
  const int64_t E = 128, k = 8, H = 2048, I = 768;
  const DType dtype = DType::kBF16;
  const double peak_flops = 790e12, bandwidth = 4.23e12;  // DESIGN.md's measured H200 ceilings
  std::printf(
      "Qwen3-30B-A3B expert GEMMs, bf16; floors: %.0f TFLOP/s dense bf16 matmul (the \"of peak\" column), "
      "%.2f TB/s\n",
      peak_flops / 1e12, bandwidth / 1e12);
  Tensor w13 = to_device(random_tensor({E, 2 * I, H}, 1, DType::kF32, -0.05f, 0.05f).to(dtype));
  Tensor w2 = to_device(random_tensor({E, H, I}, 2, DType::kF32, -0.05f, 0.05f).to(dtype));
  std::printf("%7s %7s %5s %10s %8s %9s %9s %12s %11s %9s %9s %8s\n", "tokens", "path", "block", "us", "align",
              "gate/up", "down", "bytes floor", "us (bytes)", "of floor", "TFLOP/s", "of peak");
  for (int64_t T : {1, 4, 16, 32, 64, 128, 256, 512, 2048, 8192}) {
    const int64_t P = T * k, chosen = ops::moe_align_block(Device::cuda(), P, E);
    const int64_t tile_block = P < 16 * E ? ops::kMoeGemmSmallTileRows : ops::kMoeGemmTileRows;
    const int64_t max_cap = ops::moe_align_capacity(P, E, tile_block);
    Tensor ids = to_device(random_ids(T, k, E, static_cast<uint32_t>(T)));
    Tensor sorted = Tensor::empty({max_cap}, DType::kI32, Device::cuda()),
           rows = Tensor::empty({P}, DType::kI32, Device::cuda());
    Tensor off = Tensor::empty({E + 1}, DType::kI32, Device::cuda());
    Tensor align_count = Tensor::zeros({1}, DType::kI64, Device::cuda());
    Tensor x = to_device(random_tensor({T, H}, 3).to(dtype));
    Tensor gu_all = Tensor::empty({max_cap, 2 * I}, dtype, Device::cuda());
    Tensor h_all = Tensor::empty({max_cap, I}, dtype, Device::cuda());
    Tensor d_all = Tensor::empty({max_cap, H}, dtype, Device::cuda());
    // Experts touched: the distinct ids (random distinct per token, uniform over experts).
    Tensor hid = to_host(ids);
    std::vector<bool> touched(E, false);
    for (int64_t i = 0; i < P; ++i) touched[hid.data<int32_t>()[i]] = true;
    const double experts = static_cast<double>(std::count(touched.begin(), touched.end(), true));
    const double bytes = experts * 3.0 * H * I * dtype_size(dtype);
    const double floor_us = bytes / bandwidth * 1e6, flops = 2.0 * P * 3.0 * H * I;
    struct Path {
      const char* name;
      int64_t block;
      bool cutlass;
      int64_t tile_rows;
    };
    const Path paths[] = {{"stream", 1, false, 0},
                          {"tiles", tile_block, false, 0},
                          {"cutl64", tile_block, true, 64},
                          {"cutl128", tile_block, true, 128}};
    for (const Path& path : paths) {
      const int64_t block = path.block;
      if (block == 1 && P > 32 * std::min(P, E)) continue;  // > 32 rows per expert: the streaming path re-reads
      const CutlassPath use(path.cutlass ? block : 0);
      const CutlassTileRows rows_forced(path.tile_rows);
      const int64_t cap = ops::moe_align_capacity(P, E, block);
      Tensor s = sorted.slice(0, 0, cap), gu = gu_all.slice(0, 0, cap), h = h_all.slice(0, 0, cap);
      Tensor d = d_all.slice(0, 0, cap);
      const double align_us =
          gpu_testing::mean_call_us([&](int) { ops::moe_align(s, rows, off, align_count, ids, block); }, 20);
      const double gu_us = gpu_testing::mean_call_us([&](int) { ops::moe_gemm(gu, x, w13, s, off, k, block); }, 20);
      const double down_us =
          gpu_testing::mean_call_us([&](int) { ops::moe_gemm_silu(d, h, gu, w2, s, off, block); }, 20);
      const double us = gpu_testing::mean_call_us(
          [&](int) {
            ops::moe_align(s, rows, off, align_count, ids, block);
            ops::moe_gemm(gu, x, w13, s, off, k, block);
            ops::moe_gemm_silu(d, h, gu, w2, s, off, block);
          },
          20);
      // The layer's default: CUTLASS for every tile block (multiples of kMoeGemmSmallTileRows; 128-row tiles from 256
      // rows per expert, as cutlass_moe_gemm.cu picks).
      const int64_t auto_rows = cap >= 256 * E ? 128 : 64;
      const bool taken =
          block == chosen && (block == 1 || path.cutlass) && (!path.cutlass || path.tile_rows == auto_rows);
      std::printf("%7lld %7s %5lld %10.1f %8.1f %9.1f %9.1f %9.1f MB %11.1f %8.0f%% %9.1f %7.0f%% %s\n",
                  static_cast<long long>(T), path.name, static_cast<long long>(block), us, align_us, gu_us, down_us,
                  bytes / 1e6, floor_us, 100.0 * floor_us / us, flops / us / 1e6,
                  100.0 * flops / (us * 1e-6) / peak_flops, taken ? "<-" : "");
    }
  }
  // Routing and grouping at decode sizes: moe_route then moe_align (two launches) against moe_route_and_align (one
  // block up to kMoeRouteAlignMaxTokens tokens, the same two launches past it), block 1 as the streaming path takes.
  std::printf("\nrouting + grouping, %lld experts, top-%lld (us per call, mean of repeated calls)\n%7s %12s %12s\n",
              static_cast<long long>(E), static_cast<long long>(k), "tokens", "two ops", "one op");
  for (int64_t T : {1, 2, 4, 8}) {
    const int64_t P = T * k;
    Tensor logits = to_device(random_tensor({T, E}, 4).to(dtype));
    Tensor w = Tensor::empty({T, k}, DType::kF32, Device::cuda()),
           ids = Tensor::empty({T, k}, DType::kI32, Device::cuda());
    Tensor sorted = Tensor::empty({P}, DType::kI32, Device::cuda()),
           rows = Tensor::empty({P}, DType::kI32, Device::cuda());
    Tensor off = Tensor::empty({E + 1}, DType::kI32, Device::cuda());
    Tensor touched = Tensor::zeros({1}, DType::kI64, Device::cuda());
    const double two = gpu_testing::mean_call_us(
        [&](int) {
          ops::moe_route(w, ids, logits, ops::kMoeScoringSoftmax, 1);
          ops::moe_align(sorted, rows, off, touched, ids, 1);
        },
        50);
    const double one = gpu_testing::mean_call_us(
        [&](int) {
          ops::moe_route_and_align(w, ids, logits, ops::kMoeScoringSoftmax, 1, sorted, rows, off, touched, 1);
        },
        50);
    std::printf("%7lld %12.2f %12.2f\n", static_cast<long long>(T), two, one);
  }
  // The combine and the next residual add + RMSNorm: moe_combine then fused_add_rms_norm (two launches) against
  // moe_combine_add_rms_norm (one), hidden 2048, f32 norm weight.
  std::printf("\ncombine + residual norm, hidden %lld, top-%lld (us per call)\n%7s %12s %12s\n",
              static_cast<long long>(H), static_cast<long long>(k), "tokens", "two ops", "one op");
  for (int64_t T : {1, 4, 8, 64, 2048}) {
    const int64_t P = T * k;
    Tensor down = to_device(random_tensor({P, H}, 5).to(dtype));
    Tensor w = to_device(random_tensor({T, k}, 6, DType::kF32, 0.f, 0.3f));
    Tensor rows = to_device(random_ids(T, k, P, 7).view({P}));  // k distinct rows of down per token
    Tensor x = Tensor::empty({T, H}, dtype, Device::cuda());
    Tensor residual = to_device(random_tensor({T, H}, 8).to(dtype)), norm_w = to_device(random_tensor({H}, 9));
    const double two = gpu_testing::mean_call_us(
        [&](int) { combine_add_rms_norm(false, x, residual, down, w, rows, nullptr, nullptr, norm_w); }, 50);
    const double one = gpu_testing::mean_call_us(
        [&](int) { combine_add_rms_norm(true, x, residual, down, w, rows, nullptr, nullptr, norm_w); }, 50);
    std::printf("%7lld %12.2f %12.2f\n", static_cast<long long>(T), two, one);
  }
  return 0;
}

}  // namespace
}  // namespace llmserve

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--bench") == 0) {
      if (!llmserve::gpu_testing::have_cuda_device()) {
        std::fprintf(stderr, "moe_gpu_test --bench: no CUDA device\n");
        return 1;
      }
      return llmserve::run_bench();
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

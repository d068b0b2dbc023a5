// CpuCommunicatorGroup against plain references: all-reduce (f32 and bf16, sums in rank order, every rank gets the
// same bits), all-gather (rank order) and broadcast from any root, with 2..8 rank threads over random inputs and many
// rounds (a barrier bug shows as a wrong or torn value, not a hang: each round checks every rank's result).
#include "runtime/cpu_communicator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <thread>
#include <vector>

namespace llmserve {
namespace {

// Runs fn(rank) on `world` threads at once.
void on_ranks(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(fn, r);
  for (std::thread& t : threads) t.join();
}

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(CpuCommunicator, AllReduceSumsInRankOrderOnEveryRank) {
  for (int world : {1, 2, 3, 4, 8}) {
    for (int64_t n : {1, 7, 1000, 4099}) {
      CpuCommunicatorGroup group(world);
      std::vector<std::vector<float>> inputs;
      for (int r = 0; r < world; ++r) inputs.push_back(random_values(static_cast<size_t>(n), 100 * world + r));
      std::vector<float> want(static_cast<size_t>(n), 0.0f);
      for (int r = 0; r < world; ++r) {
        for (int64_t i = 0; i < n; ++i) want[i] += inputs[r][i];  // the documented order: 0 + t0 + t1 + ...
      }
      std::vector<Tensor> results(static_cast<size_t>(world));
      on_ranks(world, [&](int r) {
        Tensor t = Tensor::from_f32(inputs[r], {n});
        group.rank(r).all_reduce(t);
        results[r] = t;
      });
      for (int r = 0; r < world; ++r) {
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(results[r].data<float>()[i], want[i]) << "world " << world << " n " << n << " rank " << r;
        }
      }
    }
  }
}

TEST(CpuCommunicator, AllReduceBf16AccumulatesInF32) {
  const int world = 4;
  const int64_t n = 333;
  CpuCommunicatorGroup group(world);
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < world; ++r) inputs.push_back(random_values(static_cast<size_t>(n), 7 + r));
  std::vector<Tensor> results(world);
  on_ranks(world, [&](int r) {
    Tensor t = Tensor::from_f32(inputs[r], {n}, DType::kBF16);
    group.rank(r).all_reduce(t);
    results[r] = t.to(DType::kF32);
  });
  for (int64_t i = 0; i < n; ++i) {
    float sum = 0;
    for (int r = 0; r < world; ++r) sum += bf16_to_f32(f32_to_bf16(inputs[r][i]));
    const float want = bf16_to_f32(f32_to_bf16(sum));
    for (int r = 0; r < world; ++r) ASSERT_EQ(results[r].data<float>()[i], want) << "element " << i << " rank " << r;
  }
}

TEST(CpuCommunicator, AllGatherConcatenatesInRankOrder) {
  for (int world : {2, 3, 4, 8}) {
    CpuCommunicatorGroup group(world);
    const int64_t rows = 3, cols = 5;
    std::vector<Tensor> outs(world);
    on_ranks(world, [&](int r) {
      Tensor in = Tensor::from_f32(random_values(rows * cols, 50 + r), {rows, cols});
      Tensor out = Tensor::from_f32(std::vector<float>(world * rows * cols, std::nanf("")), {world * rows, cols});
      group.rank(r).all_gather(out, in);
      outs[r] = out;
    });
    for (int r = 0; r < world; ++r) {
      for (int k = 0; k < world; ++k) {
        const std::vector<float> want = random_values(rows * cols, 50 + k);
        for (int64_t i = 0; i < rows * cols; ++i) {
          ASSERT_EQ(outs[r].data<float>()[k * rows * cols + i], want[i]) << "world " << world << " rank " << r;
        }
      }
    }
  }
}

TEST(CpuCommunicator, BroadcastFromEveryRoot) {
  const int world = 4;
  CpuCommunicatorGroup group(world);
  for (int root = 0; root < world; ++root) {
    std::vector<Tensor> results(world);
    on_ranks(world, [&](int r) {
      std::vector<int32_t> mine(17);
      for (int i = 0; i < 17; ++i) mine[i] = 1000 * r + i;
      Tensor t = Tensor::from_i32(mine, {17});
      group.rank(r).broadcast(t, root);
      results[r] = t;
    });
    for (int r = 0; r < world; ++r) {
      for (int i = 0; i < 17; ++i) ASSERT_EQ(results[r].data<int32_t>()[i], 1000 * root + i) << "root " << root;
    }
  }
}

// Many back-to-back collectives of changing sizes: each rank checks every round's result, so a rank running ahead
// into the next collective (a missing barrier) corrupts a value the test sees.
TEST(CpuCommunicator, ManyRoundsStayInStep) {
  const int world = 8, rounds = 300;
  CpuCommunicatorGroup group(world);
  std::vector<int> failures(world, 0);
  on_ranks(world, [&](int r) {
    for (int round = 0; round < rounds; ++round) {
      const int64_t n = 1 + (round * 37) % 300;
      std::vector<float> mine(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) mine[i] = static_cast<float>(r + 1) * static_cast<float>(i + round);
      Tensor t = Tensor::from_f32(mine, {n});
      group.rank(r).all_reduce(t);
      for (int64_t i = 0; i < n; ++i) {
        if (t.data<float>()[i] != 36.0f * static_cast<float>(i + round)) ++failures[r];  // (1 + ... + 8) x
      }
      Tensor one = Tensor::from_f32({static_cast<float>(r * rounds + round)}, {1});
      Tensor all = Tensor::empty({world}, DType::kF32);
      group.rank(r).all_gather(all, one);
      for (int k = 0; k < world; ++k) {
        if (all.data<float>()[k] != static_cast<float>(k * rounds + round)) ++failures[r];
      }
    }
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(failures[r], 0) << "rank " << r;
}

TEST(CpuCommunicatorDeathTest, MismatchedShapesAreNamed) {
  EXPECT_DEATH(
      {
        CpuCommunicatorGroup group(2);
        on_ranks(2, [&](int r) {
          Tensor t = Tensor::zeros({r == 0 ? 4 : 5}, DType::kF32);
          group.rank(r).all_reduce(t);
        });
      },
      "ranks must call collectives with the same shapes");
}

}  // namespace
}  // namespace llmserve

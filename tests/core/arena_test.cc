// ArenaPlanner / Arena: 256-byte aligned regions in one allocation, prefix views that share memory, and a CHECK that
// names the limit when a step asks for more rows than planned.
#include "core/arena.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace llmserve {
namespace {

uintptr_t address(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()); }

TEST(Arena, RegionsAreAlignedAndDisjoint) {
  ArenaPlanner planner;
  const ArenaRegion a = planner.reserve("a", {7, 3}, DType::kF32, "max_num_batched_tokens");  // 84 bytes
  const ArenaRegion b = planner.reserve("b", {5}, DType::kI64, "max_num_logits");             // 40 bytes
  const ArenaRegion c = planner.reserve("c", {2, 300}, DType::kBF16, "max_num_batched_tokens");
  EXPECT_EQ(planner.total_bytes(), 256u + 256u + 1280u);
  const Arena arena = planner.allocate(Device::cpu());
  EXPECT_EQ(arena.total_bytes(), planner.total_bytes());
  const Tensor va = arena.view(a, 7), vb = arena.view(b, 5), vc = arena.view(c, 2);
  for (const Tensor* t : {&va, &vb, &vc}) EXPECT_EQ(address(*t) % ArenaPlanner::kAlignment, 0u) << t->to_string();
  EXPECT_GE(address(vb), address(va) + va.nbytes());
  EXPECT_GE(address(vc), address(vb) + vb.nbytes());
  EXPECT_EQ(vc.dtype(), DType::kBF16);
  EXPECT_EQ(vc.shape(), (Shape{2, 300}));
  EXPECT_EQ(arena.max_rows(a), 7);
}

TEST(Arena, ViewsArePrefixesOfTheirRegion) {
  ArenaPlanner planner;
  const ArenaRegion r = planner.reserve("hidden", {8, 4, 2}, DType::kF32, "max_num_batched_tokens");
  const Arena arena = planner.allocate(Device::cpu());
  Tensor full = arena.view(r, 8);
  for (int64_t i = 0; i < full.numel(); ++i) full.data<float>()[i] = static_cast<float>(i);
  const Tensor three = arena.view(r, 3);
  EXPECT_EQ(three.shape(), (Shape{3, 4, 2}));
  EXPECT_TRUE(three.is_contiguous());
  EXPECT_EQ(three.raw_data(), full.raw_data());
  EXPECT_EQ(three.data<float>()[23], 23.0f);
  const Tensor flat = arena.view(r, Shape{5, 8});  // same trailing size, fewer rows
  EXPECT_EQ(flat.data<float>()[39], 39.0f);
  EXPECT_EQ(arena.view(r, 0).numel(), 0);
}

TEST(Arena, ViewsKeepTheMemoryAlive) {
  Tensor view;
  {
    ArenaPlanner planner;
    const ArenaRegion r = planner.reserve("x", {4}, DType::kI32, "max_num_batched_tokens");
    view = planner.allocate(Device::cpu()).view(r, 4);
  }
  for (int32_t i = 0; i < 4; ++i) view.data<int32_t>()[i] = i;  // the arena is gone; its storage is not
  EXPECT_EQ(view.data<int32_t>()[3], 3);
}

TEST(ArenaDeathTest, MoreRowsThanPlannedNamesTheLimit) {
  ArenaPlanner planner;
  const ArenaRegion r = planner.reserve("mlp.gate_up", {16, 8}, DType::kF32, "max_num_batched_tokens");
  const Arena arena = planner.allocate(Device::cpu());
  EXPECT_DEATH(arena.view(r, 17), "mlp.gate_up.*16 rows \\(max_num_batched_tokens\\).*17");
  EXPECT_DEATH(arena.view(r, Shape{16, 9}), "does not match");
  EXPECT_DEATH(Arena().view(r, 1), "before it was allocated");
}

}  // namespace
}  // namespace llmserve

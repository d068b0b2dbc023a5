// GpuBusyMeter's arithmetic: the union of kernel intervals clipped to the window, over the window (overlapping and
// nested kernels count once, kernels outside the window not at all); without CUPTI the meter says why it is off.
#include "cli/gpu_busy_meter.h"

#include <gtest/gtest.h>

#include <tuple>

namespace llmserve::cli {
namespace {

TEST(GpuBusyMeter, UnionOfIntervalsInsideTheWindow) {
  // Window [100, 200): [90, 110) contributes 10, [120, 150) and the nested [130, 140) 30, [145, 160) 10 more,
  // [190, 230) 10, [300, 400) nothing.
  EXPECT_DOUBLE_EQ(
      GpuBusyMeter::busy_fraction({{145, 160}, {120, 150}, {90, 110}, {130, 140}, {190, 230}, {300, 400}}, 100, 200),
      0.6);
  EXPECT_DOUBLE_EQ(GpuBusyMeter::busy_fraction({}, 100, 200), 0.0);
  EXPECT_DOUBLE_EQ(GpuBusyMeter::busy_fraction({{0, 1000}}, 100, 200), 1.0);
  EXPECT_DOUBLE_EQ(GpuBusyMeter::busy_fraction({{0, 1000}}, 200, 200), 0.0);
}

TEST(GpuBusyMeter, IdleStretchesBetweenMergedIntervals) {
  // Window [100, 200): idle [110, 120) and [160, 190) (the nested and overlapping kernels close no gap); none at the
  // end since [190, 230) runs past it.
  auto [gaps, idle_us] =
      GpuBusyMeter::idle_stretches({{145, 160}, {120, 150}, {90, 110}, {130, 140}, {190, 230}, {300, 400}}, 100, 200);
  EXPECT_EQ(gaps, 2);
  EXPECT_DOUBLE_EQ(idle_us, 40 / 1e3);
  std::tie(gaps, idle_us) = GpuBusyMeter::idle_stretches({{100, 150}}, 100, 200);  // the tail is idle too
  EXPECT_EQ(gaps, 1);
  EXPECT_DOUBLE_EQ(idle_us, 50 / 1e3);
}

TEST(GpuBusyMeter, IdleBeforeTheFirstAndAfterTheLastKernel) {
  // Window [100, 200): the first kernel inside starts at 130 (the one ending at 90 is outside), the last ends at 170.
  auto [leading, trailing] = GpuBusyMeter::edge_idle({{150, 170}, {130, 140}, {40, 90}, {250, 260}}, 100, 200);
  EXPECT_DOUBLE_EQ(leading, 30 / 1e3);
  EXPECT_DOUBLE_EQ(trailing, 30 / 1e3);
  std::tie(leading, trailing) = GpuBusyMeter::edge_idle({{80, 120}, {190, 230}}, 100, 200);  // kernels at both edges
  EXPECT_DOUBLE_EQ(leading, 0.0);
  EXPECT_DOUBLE_EQ(trailing, 0.0);
  std::tie(leading, trailing) = GpuBusyMeter::edge_idle({}, 100, 200);  // no kernel: all idle, counted once
  EXPECT_DOUBLE_EQ(leading + trailing, 100 / 1e3);
}

TEST(GpuBusyMeter, IdleGapsGroupedByTheKernelThatStartedAfterThem) {
  // Window [100, 400): the first kernel's lead (100..110) is host time, not a gap; gemm waits 20 + 30, norm 5; the
  // overlapping attention (starts inside gemm's interval) and the kernel past the window close no gap.
  const std::vector<GpuBusyMeter::KernelTime> t = GpuBusyMeter::idle_before_kernels({{"norm", 110, 150},
                                                                                     {"gemm", 170, 250},
                                                                                     {"attention", 240, 260},
                                                                                     {"norm", 265, 300},
                                                                                     {"gemm", 330, 380},
                                                                                     {"late", 420, 430}},
                                                                                    100, 400);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].name, "gemm");
  EXPECT_EQ(t[0].count, 2);
  EXPECT_DOUBLE_EQ(t[0].total_us, 50 / 1e3);
  EXPECT_EQ(t[1].name, "norm");
  EXPECT_EQ(t[1].count, 1);
  EXPECT_DOUBLE_EQ(t[1].total_us, 5 / 1e3);
}

TEST(GpuBusyMeter, KernelTimesGroupedByNameMostWallTimeFirst) {
  const std::vector<GpuBusyMeter::KernelTime> t = GpuBusyMeter::group_by_name(
      {{"gemv", 0, 3000}, {"norm", 3000, 4000}, {"gemv", 4000, 8000}, {"norm", 8000, 9500}});
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].name, "gemv");
  EXPECT_EQ(t[0].count, 2);
  EXPECT_DOUBLE_EQ(t[0].total_us, 7.0);
  EXPECT_EQ(t[1].name, "norm");
  EXPECT_DOUBLE_EQ(t[1].total_us, 2.5);
}

TEST(GpuBusyMeter, WallShareLeavesOutTheWaitOfAnEarlyLaunchedKernel) {
  // gemv runs [0, 3000); attention launched early (PDL) starts at 1000 and ends at 4000: its wall share is the
  // 1000 ns after gemv ended; norm starts after a 500 ns gap and runs 1500. Records arrive out of order. The shares
  // sum to the busy time (3000 + 1000 + 1500 ns).
  const std::vector<GpuBusyMeter::KernelTime> t =
      GpuBusyMeter::group_by_name({{"norm", 4500, 6000}, {"attention", 1000, 4000}, {"gemv", 0, 3000}});
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].name, "gemv");
  EXPECT_DOUBLE_EQ(t[0].wall_us, 3.0);
  EXPECT_EQ(t[1].name, "norm");
  EXPECT_DOUBLE_EQ(t[1].wall_us, 1.5);
  EXPECT_EQ(t[2].name, "attention");
  EXPECT_DOUBLE_EQ(t[2].total_us, 3.0);
  EXPECT_DOUBLE_EQ(t[2].wall_us, 1.0);
}

TEST(GpuBusyMeter, SlowHostCallsInsideTheWindowOnly) {
  // Window [1'000'000, 5'000'000) ns; the threshold is 200 us: the 150 us launch is not slow, the call that started
  // before the window is not in it, and the two slow mallocs group.
  constexpr uint64_t us = 1000;
  const std::vector<GpuBusyMeter::KernelTime> t = GpuBusyMeter::slow_calls(
      {{"cudaMalloc", 1000 * us, 1300 * us}, {"cudaLaunchKernel", 1400 * us, 1550 * us},
       {"cudaMalloc", 2000 * us, 2400 * us}, {"cudaStreamSynchronize", 500 * us, 1500 * us},
       {"cudaMemcpy", 4900 * us, 5900 * us}, {"cudaFree", 5000 * us, 6000 * us}},
      1000 * us, 5000 * us);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].name, "cudaMemcpy");
  EXPECT_DOUBLE_EQ(t[0].total_us, 1000.0);
  EXPECT_EQ(t[1].name, "cudaMalloc");
  EXPECT_EQ(t[1].count, 2);
  EXPECT_DOUBLE_EQ(t[1].total_us, 700.0);
}

TEST(GpuBusyMeter, WithoutCuptiItSaysWhy) {
#ifndef LLMSERVE_WITH_CUPTI
  GpuBusyMeter meter;
  std::string why;
  EXPECT_FALSE(meter.start(&why));
  EXPECT_NE(why.find("CUPTI"), std::string::npos);
  EXPECT_FALSE(meter.stop().has_value());
#else
  GTEST_SKIP() << "built with CUPTI: the GPU run measures it";
#endif
}

}  // namespace
}  // namespace llmserve::cli

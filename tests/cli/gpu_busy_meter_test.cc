// GpuBusyMeter's arithmetic: the union of kernel intervals clipped to the window, over the window (overlapping and
// nested kernels count once, kernels outside the window not at all); without CUPTI the meter says why it is off.
#include "cli/gpu_busy_meter.h"

#include <gtest/gtest.h>

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

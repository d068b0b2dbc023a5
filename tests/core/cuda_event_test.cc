// Event on the CPU: every call is a no-op that reports the work done, so callers need no #ifdef; a moved-from
// Event is a no-op too. (The CUDA side is exercised by the runner on the GPU machine.)
#include "core/cuda_event.h"

#include <gtest/gtest.h>

#include <utility>

namespace llmserve {
namespace {

TEST(Event, OnTheCpuEveryCallIsANoOp) {
  Event events[2] = {Event(), Event(Device::cpu())};
  for (Event& event : events) {
    EXPECT_FALSE(event.is_device());
    EXPECT_TRUE(event.query());  // nothing recorded yet
    event.record();
    event.record(nullptr);
    event.synchronize();
    EXPECT_TRUE(event.query());
  }
  synchronize_current_stream(Device::cpu());
}

TEST(Event, MovesLeaveANoOpBehind) {
  Event a(Device::cpu());
  Event b(std::move(a));
  Event c;
  c = std::move(b);
  EXPECT_FALSE(a.is_device());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_FALSE(c.is_device());
  c.record();
  c.synchronize();
  EXPECT_TRUE(c.query());
}

}  // namespace
}  // namespace llmserve

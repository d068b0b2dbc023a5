// CHECK's two endings: abort with file:line (the default), or a FatalError carrying the message while a
// ScopedThrowOnFatal lives on the thread (what the torch ops use to raise instead of killing Python).
#include "core/logging.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>

namespace llmserve {
namespace {

std::string thrown_message(int value) {
  try {
    ScopedThrowOnFatal guard;
    CHECK_EQ(value, 3) << "value is " << value;
  } catch (const FatalError& e) {
    return e.what();
  }
  return "";
}

TEST(LoggingTest, FailedCheckThrowsItsMessageUnderTheGuard) {
  EXPECT_EQ(thrown_message(3), "");
  EXPECT_EQ(thrown_message(5), "Check failed: (value)==(3) (5 vs 3) value is 5");
}

TEST(LoggingTest, GuardNestsAndEndsWithItsScope) {
  {
    ScopedThrowOnFatal outer;
    {
      ScopedThrowOnFatal inner;
    }
    EXPECT_THROW(CHECK(false), FatalError);  // the outer guard still holds
  }
  EXPECT_DEATH(CHECK(false) << "after the guards", "after the guards");
}

TEST(LoggingTest, GuardIsPerThread) {
  ScopedThrowOnFatal guard;
  // Another thread has no guard: its failed check aborts (the death test forks, so only the child dies).
  EXPECT_DEATH(std::thread([] { CHECK(false) << "other thread"; }).join(), "other thread");
}

}  // namespace
}  // namespace llmserve

// Status / StatusOr: propagation macros and messages.
#include "core/status.h"

#include <gtest/gtest.h>

namespace llmserve {
namespace {

StatusOr<int> parse_positive(int x) {
  if (x <= 0) return invalid_argument("x must be positive, got " + std::to_string(x));
  return x;
}

StatusOr<int> twice(int x) {
  ASSIGN_OR_RETURN(int v, parse_positive(x));
  return 2 * v;
}

Status check_both(int a, int b) {
  RETURN_IF_ERROR(parse_positive(a).status());
  RETURN_IF_ERROR(parse_positive(b).status().with_context("second"));
  return ok_status();
}

TEST(Status, PropagatesValuesAndErrors) {
  EXPECT_EQ(*twice(4), 8);
  StatusOr<int> bad = twice(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().to_string(), "INVALID_ARGUMENT: x must be positive, got -1");
  EXPECT_TRUE(check_both(1, 2).ok());
  EXPECT_EQ(check_both(1, 0).message(), "second: x must be positive, got 0");
}

TEST(StatusDeathTest, ValueOfErrorAborts) {
  StatusOr<int> bad = parse_positive(0);
  EXPECT_DEATH((void)bad.value(), "StatusOr::value\\(\\) on error");
}

}  // namespace
}  // namespace llmserve

// int_from_env, its _or_die form and switch_from_env: unset, in range, and every kind of bad value, each refused
// with the variable and its value named.
#include "core/env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/logging.h"

namespace llmserve {
namespace {

constexpr const char* kName = "LLMSERVE_ENV_TEST_INT";

TEST(IntFromEnv, UnsetIsNulloptAndValuesInRangeParse) {
  unsetenv(kName);
  StatusOr<std::optional<int64_t>> v = int_from_env(kName, 1, 4096);
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->has_value());
  setenv(kName, "4096", 1);
  v = int_from_env(kName, 1, 4096);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(**v, 4096);
  setenv(kName, "1", 1);
  EXPECT_EQ(**int_from_env(kName, 1), 1);
  unsetenv(kName);
}

TEST(IntFromEnv, BadValuesNameTheVariableAndTheRange) {
  for (const char* bad : {"", "0", "4097", "12x", " 5", "2.5", "-3", "99999999999999999999999"}) {
    setenv(kName, bad, 1);
    StatusOr<std::optional<int64_t>> v = int_from_env(kName, 1, 4096);
    ASSERT_FALSE(v.ok()) << "'" << bad << "'";
    EXPECT_EQ(v.status().message(), std::string(kName) + "='" + bad + "' is not an integer in 1..4096");
  }
  setenv(kName, "0", 1);
  StatusOr<std::optional<int64_t>> v = int_from_env(kName, 1);  // no upper bound
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().message(), std::string(kName) + "='0' is not a positive integer");
  unsetenv(kName);
}

TEST(IntFromEnvOrDie, TheValueOrTheDefault) {
  unsetenv(kName);
  EXPECT_EQ(int_from_env_or_die(kName, 1, 4096, 32), 32);
  setenv(kName, "4096", 1);
  EXPECT_EQ(int_from_env_or_die(kName, 1, 4096, 32), 4096);
  setenv(kName, "4097", 1);
  {
    ScopedThrowOnFatal guard;  // the stop, as an exception carrying its message
    try {
      int_from_env_or_die(kName, 1, 4096, 32);
      ADD_FAILURE() << "4097 was accepted";
    } catch (const FatalError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(kName) + "='4097' is not an integer in 1..4096"),
                std::string::npos)
          << e.what();
    }
  }
  unsetenv(kName);
}

TEST(SwitchFromEnv, ZeroOneOrTheDefault) {
  unsetenv(kName);
  EXPECT_TRUE(*switch_from_env(kName, true));
  EXPECT_FALSE(*switch_from_env(kName, false));
  setenv(kName, "0", 1);
  EXPECT_FALSE(*switch_from_env(kName, true));
  EXPECT_FALSE(switch_from_env_or_die(kName, true));
  setenv(kName, "1", 1);
  EXPECT_TRUE(*switch_from_env(kName, false));
  for (const char* bad : {"", "2", "-1", "yes", "on", "1 ", "01x"}) {
    setenv(kName, bad, 1);
    StatusOr<bool> v = switch_from_env(kName, true);
    ASSERT_FALSE(v.ok()) << "'" << bad << "'";
    EXPECT_EQ(v.status().message(), std::string(kName) + "='" + bad + "' is not an integer in 0..1");
  }
  unsetenv(kName);
}

}  // namespace
}  // namespace llmserve

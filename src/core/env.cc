// int_from_env: strtoll over the whole value, then the range; the _or_die and switch forms: the same parser.
#include "core/env.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "core/logging.h"

namespace llmserve {

StatusOr<std::optional<int64_t>> int_from_env(const char* name, int64_t lo, int64_t hi) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::optional<int64_t>();
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(v, &end, 10);
  const bool digits_only = (v[0] >= '0' && v[0] <= '9') || v[0] == '-';  // strtoll would skip spaces, take '+'
  if (!digits_only || end == v || *end != '\0' || errno == ERANGE || value < lo || value > hi) {
    const std::string expected = lo == 1 && hi == std::numeric_limits<int64_t>::max()
                                     ? "a positive integer"
                                     : "an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
    return invalid_argument(std::string(name) + "='" + v + "' is not " + expected);
  }
  return std::optional<int64_t>(value);
}

StatusOr<bool> switch_from_env(const char* name, bool unset) {
  StatusOr<std::optional<int64_t>> v = int_from_env(name, 0, 1);
  if (!v.ok()) return v.status();
  return v->has_value() ? **v == 1 : unset;
}

int64_t int_from_env_or_die(const char* name, int64_t lo, int64_t hi, int64_t unset) {
  StatusOr<std::optional<int64_t>> v = int_from_env(name, lo, hi);
  CHECK(v.ok()) << v.status().message();
  return v->value_or(unset);
}

bool switch_from_env_or_die(const char* name, bool unset) { return int_from_env_or_die(name, 0, 1, unset) == 1; }

}  // namespace llmserve

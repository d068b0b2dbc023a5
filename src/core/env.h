// Integer settings and on / off switches read from the environment (the A/B switches of kernels and linear methods):
// one parser, one message naming the variable and its value.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>

#include "core/status.h"

namespace llmserve {

// The value of $name when set, nullopt when unset; an error naming the variable when it is not a decimal integer in
// [lo, hi] ("NAME='v' is not a positive integer" for lo 1 without an upper bound, else "... is not an integer in
// lo..hi").
StatusOr<std::optional<int64_t>> int_from_env(const char* name, int64_t lo,
                                              int64_t hi = std::numeric_limits<int64_t>::max());

// int_from_env with `unset` for an unset variable, stopping the process with its message on a bad value: for the
// kernels' measurement switches, which have no caller to return an error to.
int64_t int_from_env_or_die(const char* name, int64_t lo, int64_t hi, int64_t unset);

// An on / off switch: $name as 0 or 1 (int_from_env's parser and message), `unset` when it is not set.
StatusOr<bool> switch_from_env(const char* name, bool unset);
// switch_from_env, stopping the process with its message on a bad value (int_from_env_or_die over 0..1).
bool switch_from_env_or_die(const char* name, bool unset);

}  // namespace llmserve

// Integer settings read from the environment (the A/B switches of kernels and linear methods): one parser, one
// message naming the variable and its value.
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

}  // namespace llmserve

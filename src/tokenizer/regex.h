// A compiled PCRE2 regex (UTF + Unicode properties, JIT) used by Split/Replace and the ByteLevel pattern.
// Patterns written for Oniguruma (what HF `tokenizers` uses) are translated so \s \w \d mean the same sets.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace llmserve {

class Regex {
 public:
  // Compiles `pattern`; InvalidArgument with PCRE2's message and offset on a bad pattern.
  static StatusOr<std::unique_ptr<Regex>> compile(std::string_view pattern);
  // Regex matching `literal` exactly (all metacharacters escaped).
  static StatusOr<std::unique_ptr<Regex>> literal(std::string_view literal);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping matches [begin, end) left to right, as Rust/Oniguruma iterate them: an empty match right
  // after the previous match is skipped. `text` must be valid UTF-8. Thread-safe.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  Regex() = default;
  void* code_ = nullptr;  // pcre2_code_8*
};

// Rewrites Oniguruma shorthand classes (\s \S \w \W \d \D) into explicit PCRE2 classes with Oniguruma's
// Unicode meaning. Exposed for tests.
std::string translate_oniguruma_pattern(std::string_view pattern);

}  // namespace llmserve

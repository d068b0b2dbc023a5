// Normalizers of HF `tokenizers` (NFC/NFD/NFKC/NFKD, Lowercase, Strip, Prepend, Replace, StripAccents,
// BertNormalizer, Precompiled, Sequence), each a pure function of its input string; built from tokenizer.json.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "tokenizer/json_util.h"

namespace llmserve {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites `text` (valid UTF-8 in, valid UTF-8 out).
  virtual void normalize(std::string& text) const = 0;
};

// Builds the normalizer described by `j` (its "type" field); `path` names it in errors.
StatusOr<std::unique_ptr<Normalizer>> make_normalizer(const json_util::Json& j, const std::string& path);

}  // namespace llmserve

namespace llmserve {
class Regex;
// Parses a {"String": s} / {"Regex": r} pattern object (Replace, Split): returns the compiled regex, or null
// with *literal set for a String pattern.
StatusOr<std::unique_ptr<Regex>> make_pattern(const json_util::Json& j, const std::string& path, std::string* literal);

// HF's Replace, the normalizer's and the decoder's alike: every non-overlapping match of the component's "pattern"
// ({"String": s} or {"Regex": r}) becomes its "content"; an empty String pattern replaces nothing.
class Replacement {
 public:
  static StatusOr<Replacement> parse(const json_util::Json& j, const std::string& path);
  void apply(std::string& text) const;

 private:
  std::shared_ptr<const Regex> re_;  // null: the literal pattern
  std::string literal_, content_;
};
}  // namespace llmserve

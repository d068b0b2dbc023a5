// Pre-tokenizers of HF `tokenizers`: split normalized text into the pieces the model tokenizes one by one.
// Pieces are never empty; `at_start` says a piece begins at offset 0 of the original input (Metaspace "first").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/json_util.h"

namespace llmserve {

struct PreToken {
  std::string text;
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their sub-pieces, in order.
  virtual void pre_tokenize(std::vector<PreToken>& pieces) const = 0;
};

StatusOr<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const json_util::Json& j, const std::string& path);

// The GPT-2 byte-to-unicode table: byte b -> UTF-8 of its printable stand-in character.
const std::string& byte_level_char(unsigned char b);
// Inverse of byte_level_char for one code point; -1 if `cp` is not a stand-in.
int byte_level_byte(char32_t cp);

}  // namespace llmserve

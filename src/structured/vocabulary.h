// Vocabulary view for constrained decoding: the exact bytes each token adds to the output, or nothing for tokens a
// grammar may never produce (special and added tokens, unused ids). Built from a Tokenizer or a tiktoken file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace llmserve {
class Tokenizer;
}

namespace llmserve::structured {

struct Vocabulary {
  // [num_tokens]: the bytes token id adds to decoded text in the middle of a sequence; nullopt = never allowed
  // inside a grammar (special/added tokens, ids with no token, tokens that decode to nothing).
  std::vector<std::optional<std::string>> token_bytes;

  // Byte-level BPE (GPT-2 byte alphabet), SentencePiece (▁ = space, <0xNN> byte-fallback tokens) or plain-text
  // tokens, told apart by what the tokenizer's decoder does with probe tokens. Unimplemented for decoders whose
  // token text is not a fixed byte string (WordPiece's "##" continuation).
  static StatusOr<Vocabulary> from_tokenizer(const Tokenizer& tok);
  // A tiktoken BPE file ("<base64 bytes> <rank>" per line, e.g. Llama 3's tokenizer.model); ids = ranks.
  // num_special_tokens ids after the last rank are added as never-allowed (Llama 3: 256).
  static StatusOr<Vocabulary> from_tiktoken_file(const std::string& path, int32_t num_special_tokens);
};

}  // namespace llmserve::structured

// Decoders of HF `tokenizers` (ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, WordPiece, BPEDecoder,
// Sequence). Like HF they transform a list of token strings; the decoded text is the concatenation.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/json_util.h"

namespace llmserve {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  // True if this decoder (or a part of it) is ByteFallback: "<0xXX>" tokens combine with their neighbours.
  virtual bool has_byte_fallback() const { return false; }
};

StatusOr<std::unique_ptr<Decoder>> make_decoder(const json_util::Json& j, const std::string& path);

}  // namespace llmserve

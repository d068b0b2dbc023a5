// Streaming detokenization: push one generated id at a time, get the new text. The concatenation of every
// push() result and the final flush() equals Tokenizer::decode() of all ids, and no result ever ends inside
// a UTF-8 sequence or an unfinished run of byte-fallback tokens (that text is held back until it resolves).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace llmserve {

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object. Options are those of Tokenizer::decode().
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false,
                                  bool spaces_between_special_tokens = true);

  // Appends `id` and returns the newly decodable text (often empty while a character is incomplete).
  std::string push(int32_t id);
  // Ends the stream: returns whatever was held back (an incomplete character decodes as U+FFFD, as in decode()).
  std::string flush();

  // All text returned so far; stop strings are matched against this.
  const std::string& text() const { return text_; }
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  // decode(ids_[window_start_, end)).
  std::string decode_window(size_t end) const;
  std::string emit_from(const std::string& window_text);

  const Tokenizer& tokenizer_;
  bool skip_special_;
  bool spaces_between_special_;
  std::vector<int32_t> ids_;
  std::string text_;
  // ids_[window_start_, read_end_) decode to window_prefix_, text already emitted; the window starts at one
  // token of context (the last contributing token before read_end_) so decoders with first-token rules
  // (Strip, Metaspace) treat the new tokens as they would in a full decode.
  size_t window_start_ = 0;
  size_t read_end_ = 0;
  std::string window_prefix_;
};

}  // namespace llmserve

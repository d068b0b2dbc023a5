// Incremental detokenizer: decodes a short window (one token of context plus the unread tokens) per step and
// emits the part past the window's already-emitted prefix, holding back text that later tokens could change.
#include "tokenizer/incremental_detokenizer.h"

namespace llmserve {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && std::string_view(s).substr(s.size() - 3) == kReplacement;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens,
                                               bool spaces_between_special_tokens)
    : tokenizer_(tokenizer),
      skip_special_(skip_special_tokens),
      spaces_between_special_(spaces_between_special_tokens) {}

std::string IncrementalDetokenizer::decode_window(size_t end) const {
  return tokenizer_.decode(std::span<const int32_t>(ids_.data() + window_start_, end - window_start_), skip_special_,
                           spaces_between_special_);
}

std::string IncrementalDetokenizer::emit_from(const std::string& window_text) {
  if (window_text.size() < window_prefix_.size() ||
      window_text.compare(0, window_prefix_.size(), window_prefix_) != 0) {
    return "";  // the window does not extend what was emitted yet; wait for more tokens
  }
  std::string fresh = window_text.substr(window_prefix_.size());
  read_end_ = ids_.size();
  // Next window: start at the last contributing token, so the new window shares that context token.
  size_t last = read_end_;
  while (last > window_start_ && !tokenizer_.contributes(ids_[last - 1], skip_special_)) --last;
  if (last > window_start_) {
    window_start_ = last - 1;
    window_prefix_ = decode_window(read_end_);
  } else {
    window_prefix_ = window_text;
  }
  text_ += fresh;
  return fresh;
}

std::string IncrementalDetokenizer::push(int32_t id) {
  ids_.push_back(id);
  if (!tokenizer_.contributes(id, skip_special_)) return "";
  // A byte-fallback run may still turn out invalid (then every byte of it becomes U+FFFD): wait for its end.
  if (tokenizer_.is_byte_fallback_token(id)) return "";
  std::string window_text = decode_window(ids_.size());
  if (window_text.size() <= window_prefix_.size() || ends_with_replacement(window_text)) return "";
  return emit_from(window_text);
}

std::string IncrementalDetokenizer::flush() {
  if (read_end_ == ids_.size()) return "";
  std::string window_text = decode_window(ids_.size());
  std::string fresh;
  if (window_text.size() >= window_prefix_.size() &&
      window_text.compare(0, window_prefix_.size(), window_prefix_) == 0) {
    fresh = window_text.substr(window_prefix_.size());
  } else {
    // Cannot happen for the decoders we support; fall back to the exact difference from a full decode.
    std::string full = tokenizer_.decode(ids_, skip_special_, spaces_between_special_);
    fresh = full.size() >= text_.size() ? full.substr(text_.size()) : std::string();
  }
  read_end_ = ids_.size();
  text_ += fresh;
  return fresh;
}

}  // namespace llmserve

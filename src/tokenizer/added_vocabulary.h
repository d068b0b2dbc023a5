// Added tokens (tokenizer.json "added_tokens"): finds them in input text before the normalizer/pre-tokenizer
// run, with HF's lstrip/rstrip/single_word/normalized rules and leftmost-longest, non-overlapping matching.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/normalizer.h"

namespace llmserve {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;       // swallow whitespace on the left
  bool rstrip = false;       // swallow whitespace on the right
  bool single_word = false;  // only match when not inside a word
  bool normalized = false;   // match against normalized text (content normalized too)
};

// A piece of the input after added-token extraction: an added token (id >= 0) or normalized text (id == -1).
struct Segment {
  std::string text;
  int32_t id = -1;
  bool at_start = false;  // text segment starting at offset 0 of the input
};

class AddedVocabulary {
 public:
  // `normalizer` may be null; it is used to normalize the contents of `normalized` tokens.
  void build(std::vector<AddedToken> tokens, const Normalizer* normalizer);
  // Splits `text` into segments (text segments normalized, never empty).
  void split(std::string_view text, const Normalizer* normalizer, std::vector<Segment>& out) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Byte trie over token patterns; node 0 is the root.
  struct Trie {
    std::unordered_map<uint64_t, int32_t> edges;  // (node << 8 | byte) -> child
    std::vector<int32_t> terminal;                // node -> token index, -1 if none
    std::array<bool, 256> first_byte{};
    void add(std::string_view pattern, int32_t token_index);
    bool empty() const { return terminal.size() <= 1; }
  };
  struct Match {
    size_t begin, end;
    int32_t token_index;
  };
  // Leftmost-longest non-overlapping matches of `trie` in `text`, filtered and widened by the token rules.
  void split_with(const Trie& trie, const std::string& text, bool at_start, std::vector<Segment>& out) const;

  std::vector<AddedToken> tokens_;
  Trie raw_trie_;         // tokens with normalized == false
  Trie normalized_trie_;  // tokens with normalized == true, by normalized content
};

}  // namespace llmserve

// The vocabulary as the mask computation walks it: each allowed token's bytes, the tokens sorted by bytes with the
// length of the prefix each shares with the one before (a trie flattened into an array), and the EOS ids.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "structured/vocabulary.h"

namespace llmserve::structured {

struct TokenIndex {
  int32_t vocab_size = 0;                // mask width in tokens (the model's logits width)
  int32_t num_words = 0;                 // ceil(vocab_size / 32)
  std::vector<std::string> token_bytes;  // [vocab_size]; empty = never allowed (special, added, past the tokenizer)
  std::vector<int32_t> sorted_ids;       // allowed tokens ordered by bytes
  std::vector<int32_t> shared_prefix;    // [i]: common prefix length of sorted_ids[i-1] and [i]; [0] = 0
  std::vector<int32_t> eos_ids;
  std::vector<char> is_eos;  // [vocab_size]
  int32_t max_token_length = 0;

  TokenIndex(const Vocabulary& vocab, int32_t vocab_size, std::vector<int32_t> eos_ids);
};

}  // namespace llmserve::structured

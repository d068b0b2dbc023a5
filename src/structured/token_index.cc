// Builds the sorted token array the mask DFS walks: sorting by bytes puts tokens with a common prefix side by side,
// so a dead prefix skips every token that starts with it.
#include "structured/token_index.h"

#include <algorithm>

namespace llmserve::structured {

TokenIndex::TokenIndex(const Vocabulary& vocab, int32_t size, std::vector<int32_t> eos)
    : vocab_size(size), num_words((size + 31) / 32), token_bytes(size), eos_ids(std::move(eos)), is_eos(size, 0) {
  for (int32_t id : eos_ids) is_eos[id] = 1;
  int32_t n = std::min<int32_t>(size, static_cast<int32_t>(vocab.token_bytes.size()));
  for (int32_t id = 0; id < n; ++id) {
    if (vocab.token_bytes[id] && !is_eos[id] && !vocab.token_bytes[id]->empty()) {
      token_bytes[id] = *vocab.token_bytes[id];
      sorted_ids.push_back(id);
      max_token_length = std::max<int32_t>(max_token_length, static_cast<int32_t>(token_bytes[id].size()));
    }
  }
  std::sort(sorted_ids.begin(), sorted_ids.end(), [&](int32_t a, int32_t b) {
    return token_bytes[a] != token_bytes[b] ? token_bytes[a] < token_bytes[b] : a < b;
  });
  shared_prefix.assign(sorted_ids.size(), 0);
  for (size_t i = 1; i < sorted_ids.size(); ++i) {
    const std::string& a = token_bytes[sorted_ids[i - 1]];
    const std::string& b = token_bytes[sorted_ids[i]];
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    shared_prefix[i] = static_cast<int32_t>(k);
  }
}

}  // namespace llmserve::structured

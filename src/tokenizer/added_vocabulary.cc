// Added-token extraction: pass 1 matches non-normalized tokens in the raw text; pass 2 normalizes the text
// between them and matches normalized tokens there (HF's AddedVocabulary::extract_and_normalize).
#include "tokenizer/added_vocabulary.h"

#include "tokenizer/unicode.h"

namespace llmserve {
namespace {

// HF tests single_word boundaries with the Rust regexes \w$ and ^\w.
bool last_char_is_word(std::string_view s) {
  if (s.empty()) return false;
  size_t start = s.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  size_t pos = start;
  return unicode::is_word_char(unicode::next_code_point(s, &pos));
}

bool first_char_is_word(std::string_view s) {
  if (s.empty()) return false;
  size_t pos = 0;
  return unicode::is_word_char(unicode::next_code_point(s, &pos));
}

}  // namespace

void AddedVocabulary::Trie::add(std::string_view pattern, int32_t token_index) {
  if (terminal.empty()) terminal.push_back(-1);
  if (pattern.empty()) return;
  int32_t node = 0;
  for (unsigned char b : pattern) {
    uint64_t key = (static_cast<uint64_t>(node) << 8) | b;
    auto it = edges.find(key);
    if (it == edges.end()) {
      int32_t child = static_cast<int32_t>(terminal.size());
      terminal.push_back(-1);
      edges.emplace(key, child);
      node = child;
    } else {
      node = it->second;
    }
  }
  first_byte[static_cast<unsigned char>(pattern[0])] = true;
  // The first token with a given pattern wins, as HF builds its matcher in insertion order.
  if (terminal[node] < 0) terminal[node] = token_index;
}

void AddedVocabulary::build(std::vector<AddedToken> tokens, const Normalizer* normalizer) {
  tokens_ = std::move(tokens);
  raw_trie_ = Trie();
  normalized_trie_ = Trie();
  raw_trie_.terminal.push_back(-1);
  normalized_trie_.terminal.push_back(-1);
  // HF orders special tokens before the other added tokens when building its matchers.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < tokens_.size(); ++i) {
      const AddedToken& t = tokens_[i];
      if (t.special != (pass == 0)) continue;
      if (t.normalized) {
        std::string content = t.content;
        if (normalizer != nullptr) normalizer->normalize(content);
        normalized_trie_.add(content, static_cast<int32_t>(i));
      } else {
        raw_trie_.add(t.content, static_cast<int32_t>(i));
      }
    }
  }
}

void AddedVocabulary::split_with(const Trie& trie, const std::string& text, bool at_start,
                                 std::vector<Segment>& out) const {
  auto push_text = [&](size_t b, size_t e) {
    if (e > b) out.push_back({text.substr(b, e - b), -1, at_start && b == 0});
  };
  if (trie.empty()) {
    push_text(0, text.size());
    return;
  }
  size_t start_offset = 0;
  size_t i = 0;
  while (i < text.size()) {
    if (!trie.first_byte[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    // Longest pattern starting at i.
    int32_t node = 0, best = -1;
    size_t best_end = 0;
    for (size_t k = i; k < text.size(); ++k) {
      auto it = trie.edges.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[k]));
      if (it == trie.edges.end()) break;
      node = it->second;
      if (trie.terminal[node] >= 0) {
        best = trie.terminal[node];
        best_end = k + 1;
      }
    }
    if (best < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = tokens_[best];
    size_t begin = i, end = best_end;
    i = best_end;  // matching resumes after this match even if the rules below reject it
    if (tok.single_word) {
      bool start_ok = begin == 0 || !last_char_is_word(std::string_view(text).substr(0, begin));
      bool stop_ok = end == text.size() || !first_char_is_word(std::string_view(text).substr(end));
      if (!start_ok || !stop_ok) continue;
    }
    if (tok.lstrip) {
      size_t b = begin;
      while (b > 0) {
        size_t s = b - 1;
        while (s > 0 && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
        size_t pos = s;
        if (!unicode::is_whitespace(unicode::next_code_point(text, &pos))) break;
        b = s;
      }
      begin = std::max(b, start_offset);
    }
    if (tok.rstrip) {
      size_t pos = end;
      while (pos < text.size()) {
        size_t next = pos;
        if (!unicode::is_whitespace(unicode::next_code_point(text, &next))) break;
        pos = next;
      }
      end = pos;
      i = std::max(i, end);
    }
    push_text(start_offset, begin);
    out.push_back({text.substr(begin, end - begin), tok.id, false});
    start_offset = end;
  }
  push_text(start_offset, text.size());
}

void AddedVocabulary::split(std::string_view text, const Normalizer* normalizer, std::vector<Segment>& out) const {
  std::vector<Segment> raw;
  split_with(raw_trie_, std::string(text), true, raw);
  for (auto& seg : raw) {
    if (seg.id >= 0) {
      out.push_back(std::move(seg));
      continue;
    }
    if (normalizer != nullptr) normalizer->normalize(seg.text);
    if (seg.text.empty()) continue;
    split_with(normalized_trie_, seg.text, seg.at_start, out);
  }
}

}  // namespace llmserve

// Pre-tokenizer implementations. All splitting goes through split_by_matches(), which applies HF's
// SplitDelimiterBehavior rules (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous).
#include "tokenizer/pre_tokenizer.h"

#include <array>
#include <functional>
#include <utility>

#include "tokenizer/normalizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace llmserve {
namespace {

using json_util::Json;
using Span = std::pair<size_t, size_t>;

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

StatusOr<Behavior> parse_behavior(const Json& j, const std::string& path, Behavior fallback) {
  ASSIGN_OR_RETURN(std::string b, json_util::get_string_or(j, "behavior", path, ""));
  if (b.empty()) return fallback;
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  return json_util::field_error(path + ".behavior", "unknown behavior '" + b + "'");
}

// Splits `piece` given the sorted, non-overlapping `matches` of a pattern, appending non-empty results to out.
void split_by_matches(const PreToken& piece, const std::vector<Span>& matches, Behavior behavior, bool invert,
                      std::vector<PreToken>& out) {
  const std::string& s = piece.text;
  // (span, is_match) covering all of s.
  std::vector<std::pair<Span, bool>> parts;
  parts.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (prev != b) parts.push_back({{prev, b}, invert});
    parts.push_back({{b, e}, !invert});
    prev = e;
  }
  if (prev != s.size()) parts.push_back({{prev, s.size()}, invert});

  std::vector<std::pair<Span, bool>> splits;  // (span, remove)
  splits.reserve(parts.size());
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kIsolated:
      for (auto& p : parts) splits.push_back({p.first, false});
      break;
    case Behavior::kRemoved:
      splits = parts;
      break;
    case Behavior::kContiguous:
      for (auto& [span, is_match] : parts) {
        if (is_match == previous_match && !splits.empty()) {
          splits.back().first.second = span.second;
        } else {
          splits.push_back({span, false});
        }
        previous_match = is_match;
      }
      break;
    case Behavior::kMergedWithPrevious:
      for (auto& [span, is_match] : parts) {
        if (is_match && !previous_match && !splits.empty()) {
          splits.back().first.second = span.second;
        } else {
          splits.push_back({span, false});
        }
        previous_match = is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (size_t k = parts.size(); k-- > 0;) {
        auto& [span, is_match] = parts[k];
        if (is_match && !previous_match && !splits.empty()) {
          splits.back().first.first = span.first;
        } else {
          splits.push_back({span, false});
        }
        previous_match = is_match;
      }
      std::reverse(splits.begin(), splits.end());
      break;
  }
  for (auto& [span, remove] : splits) {
    if (remove || span.first == span.second) continue;
    out.push_back({s.substr(span.first, span.second - span.first), piece.at_start && span.first == 0});
  }
}

// One match per code point satisfying `pred`.
std::vector<Span> char_matches(const std::string& s, const std::function<bool(char32_t)>& pred) {
  std::vector<Span> m;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t start = pos;
    char32_t c = unicode::next_code_point(s, &pos);
    if (pred(c)) m.push_back({start, pos});
  }
  return m;
}

class CharSplit : public PreTokenizer {
 public:
  CharSplit(std::function<bool(char32_t)> pred, Behavior behavior) : pred_(std::move(pred)), behavior_(behavior) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> out;
    for (const auto& p : pieces) split_by_matches(p, char_matches(p.text, pred_), behavior_, false, out);
    pieces = std::move(out);
  }

 private:
  std::function<bool(char32_t)> pred_;
  Behavior behavior_;
};

class RegexSplit : public PreTokenizer {
 public:
  RegexSplit(std::unique_ptr<Regex> re, Behavior behavior, bool invert)
      : re_(std::move(re)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> out;
    out.reserve(pieces.size() * 4);
    for (const auto& p : pieces) split_by_matches(p, re_->find_all(p.text), behavior_, invert_, out);
    pieces = std::move(out);
  }

 private:
  std::unique_ptr<Regex> re_;
  Behavior behavior_;
  bool invert_;
};

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct ByteLevelTables {
  std::array<std::string, 256> to_char;
  std::array<int, 0x200> from_cp;  // stand-ins are all below U+0200
  ByteLevelTables() {
    from_cp.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      unicode::append_utf8(cp, &to_char[b]);
      from_cp[cp] = b;
    }
  }
};

const ByteLevelTables& byte_level_tables() {
  static const ByteLevelTables tables;
  return tables;
}

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> re)
      : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> split;
    split.reserve(pieces.size() * 4);
    for (auto& p : pieces) {
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, " ");
      if (re_ != nullptr) {
        split_by_matches(p, re_->find_all(p.text), Behavior::kIsolated, false, split);
      } else {
        split.push_back(std::move(p));
      }
    }
    const auto& table = byte_level_tables().to_char;
    for (auto& p : split) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (unsigned char b : p.text) mapped.append(table[b]);
      p.text = std::move(mapped);
    }
    pieces = std::move(split);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> re_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> out;
    for (auto& p : pieces) {
      std::string t;
      t.reserve(p.text.size() + 8);
      for (char c : p.text) {
        if (c == ' ') {
          t.append(replacement_);
        } else {
          t.push_back(c);
        }
      }
      bool starts = t.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_start))) {
        t.insert(0, replacement_);
      }
      PreToken piece{std::move(t), p.at_start};
      if (!split_) {
        if (!piece.text.empty()) out.push_back(std::move(piece));
        continue;
      }
      std::vector<Span> m;
      for (size_t pos = piece.text.find(replacement_); pos != std::string::npos;
           pos = piece.text.find(replacement_, pos + replacement_.size())) {
        m.push_back({pos, pos + replacement_.size()});
      }
      split_by_matches(piece, m, Behavior::kMergedWithNext, false, out);
    }
    pieces = std::move(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

class BertPreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> ws;
    for (const auto& p : pieces)
      split_by_matches(p, char_matches(p.text, unicode::is_whitespace), Behavior::kRemoved, false, ws);
    std::vector<PreToken> out;
    for (const auto& p : ws)
      split_by_matches(p, char_matches(p.text, unicode::is_punctuation), Behavior::kIsolated, false, out);
    pieces = std::move(out);
  }
};

StatusOr<std::unique_ptr<PreTokenizer>> make_split(const Json& j, const std::string& path) {
  const Json* pattern = json_util::find(j, "pattern");
  if (pattern == nullptr) return json_util::field_error(path + ".pattern", "missing");
  std::string literal;
  ASSIGN_OR_RETURN(auto re, make_pattern(*pattern, path + ".pattern", &literal));
  if (re == nullptr) {
    if (literal.empty()) return json_util::field_error(path + ".pattern", "empty String pattern");
    ASSIGN_OR_RETURN(re, Regex::literal(literal));
  }
  const Json* behavior_field = json_util::find(j, "behavior");
  if (behavior_field == nullptr) return json_util::field_error(path + ".behavior", "missing");
  ASSIGN_OR_RETURN(Behavior behavior, parse_behavior(j, path, Behavior::kIsolated));
  ASSIGN_OR_RETURN(bool invert, json_util::get_bool_or(j, "invert", path, false));
  return std::unique_ptr<PreTokenizer>(new RegexSplit(std::move(re), behavior, invert));
}

StatusOr<std::unique_ptr<PreTokenizer>> make_metaspace(const Json& j, const std::string& path) {
  ASSIGN_OR_RETURN(std::string replacement, json_util::get_string_or(j, "replacement", path, "\u2581"));
  if (replacement.empty() || unicode::utf8_length(static_cast<unsigned char>(replacement[0])) != replacement.size()) {
    return json_util::field_error(path + ".replacement", "expected exactly one character");
  }
  PrependScheme scheme = PrependScheme::kAlways;
  if (json_util::find(j, "prepend_scheme") != nullptr) {
    ASSIGN_OR_RETURN(std::string s, json_util::get_string(j, "prepend_scheme", path));
    if (s == "always") {
      scheme = PrependScheme::kAlways;
    } else if (s == "first") {
      scheme = PrependScheme::kFirst;
    } else if (s == "never") {
      scheme = PrependScheme::kNever;
    } else {
      return json_util::field_error(path + ".prepend_scheme", "unknown scheme '" + s + "'");
    }
  } else {
    // Files written before prepend_scheme existed carry add_prefix_space.
    ASSIGN_OR_RETURN(bool add, json_util::get_bool_or(j, "add_prefix_space", path, true));
    scheme = add ? PrependScheme::kAlways : PrependScheme::kNever;
  }
  ASSIGN_OR_RETURN(bool split, json_util::get_bool_or(j, "split", path, true));
  return std::unique_ptr<PreTokenizer>(new MetaspacePreTokenizer(std::move(replacement), scheme, split));
}

}  // namespace

const std::string& byte_level_char(unsigned char b) { return byte_level_tables().to_char[b]; }

int byte_level_byte(char32_t cp) { return cp < 0x200 ? byte_level_tables().from_cp[cp] : -1; }

StatusOr<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const Json& j, const std::string& path) {
  ASSIGN_OR_RETURN(std::string type, json_util::get_string(j, "type", path));
  if (type == "ByteLevel") {
    ASSIGN_OR_RETURN(bool prefix, json_util::get_bool_or(j, "add_prefix_space", path, true));
    ASSIGN_OR_RETURN(bool use_regex, json_util::get_bool_or(j, "use_regex", path, true));
    std::unique_ptr<Regex> re;
    if (use_regex) {
      ASSIGN_OR_RETURN(re, Regex::compile(kGpt2Pattern));
    }
    return std::unique_ptr<PreTokenizer>(new ByteLevelPreTokenizer(prefix, std::move(re)));
  }
  if (type == "Split") return make_split(j, path);
  if (type == "Metaspace") return make_metaspace(j, path);
  if (type == "Whitespace") {
    ASSIGN_OR_RETURN(auto re, Regex::compile(R"(\w+|[^\w\s]+)"));
    return std::unique_ptr<PreTokenizer>(new RegexSplit(std::move(re), Behavior::kRemoved, true));
  }
  if (type == "WhitespaceSplit") {
    return std::unique_ptr<PreTokenizer>(new CharSplit(unicode::is_whitespace, Behavior::kRemoved));
  }
  if (type == "Punctuation") {
    ASSIGN_OR_RETURN(Behavior behavior, parse_behavior(j, path, Behavior::kIsolated));
    return std::unique_ptr<PreTokenizer>(new CharSplit(unicode::is_punctuation, behavior));
  }
  if (type == "Digits") {
    ASSIGN_OR_RETURN(bool individual, json_util::get_bool_or(j, "individual_digits", path, false));
    return std::unique_ptr<PreTokenizer>(
        new CharSplit(unicode::is_numeric, individual ? Behavior::kIsolated : Behavior::kContiguous));
  }
  if (type == "BertPreTokenizer") return std::unique_ptr<PreTokenizer>(new BertPreTokenizer());
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(auto parts, json_util::make_each<PreTokenizer>(j, "pretokenizers", path, make_pre_tokenizer));
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(parts)));
  }
  return unimplemented(path + ".type: pre-tokenizer '" + type + "' is not supported");
}

}  // namespace llmserve

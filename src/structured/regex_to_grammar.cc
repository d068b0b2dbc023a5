// Recursive-descent regex parser building Grammar IR directly; error offsets count bytes of the pattern.
#include "structured/regex_to_grammar.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace llmserve::structured {

namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

// Python's str.isspace() set: exactly what `\s` matches on str patterns.
const Ranges kSpace = {{0x09, 0x0D},     {0x1C, 0x20},     {0x85, 0x85},     {0xA0, 0xA0},     {0x1680, 0x1680},
                       {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}};
const Ranges kDigit = {{'0', '9'}};                                     // ASCII subset of Python's \d
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};  // ASCII subset of Python's \w
const Ranges kNotDigitAscii = {{0, '0' - 1}, {'9' + 1, 0x7F}};          // subset of Python's \D
const Ranges kNotWordAscii = {{0, '0' - 1}, {'9' + 1, 'A' - 1}, {'Z' + 1, '_' - 1}, {'`', '`'}, {'z' + 1, 0x7F}};

Ranges complement(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  uint32_t next = 0;
  for (auto [lo, hi] : r) {
    if (lo > next) out.push_back({next, lo - 1});
    next = std::max(next, hi + 1);
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

class RegexParser {
 public:
  RegexParser(Grammar& g, std::string_view p) : g_(g), p_(p) {}

  StatusOr<ExprId> run() {
    end_ = p_.size();
    if (!p_.empty() && p_[0] == '^') pos_ = 1;
    if (p_.substr(0, 2) == "\\A") pos_ = 2;
    if (end_ > pos_ && p_[end_ - 1] == '$' && !escaped(end_ - 1)) {
      --end_;
    } else if (end_ >= pos_ + 2 && p_.substr(end_ - 2) == "\\Z" && !escaped(end_ - 2)) {
      end_ -= 2;
    }
    auto e = parse_alternation();
    if (!e.ok()) return e.status();
    if (pos_ < end_) return error(pos_, p_[pos_] == ')' ? "unbalanced ')'" : "unexpected character");
    return *e;
  }

 private:
  bool escaped(size_t at) const {
    size_t n = 0;
    while (at > n && p_[at - n - 1] == '\\') ++n;
    return n % 2 == 1;
  }

  Status error(size_t at, const std::string& what) const {
    return invalid_argument("regex error at offset " + std::to_string(at) + ": " + what);
  }

  StatusOr<ExprId> parse_alternation() {
    std::vector<ExprId> alts;
    while (true) {
      auto seq = parse_concat();
      if (!seq.ok()) return seq.status();
      alts.push_back(*seq);
      if (pos_ < end_ && p_[pos_] == '|') {
        ++pos_;
        continue;
      }
      return g_.choice(std::move(alts));
    }
  }

  StatusOr<ExprId> parse_concat() {
    std::vector<ExprId> items;
    while (pos_ < end_ && p_[pos_] != '|' && p_[pos_] != ')') {
      auto atom = parse_atom();
      if (!atom.ok()) return atom.status();
      auto q = parse_quantifiers(*atom);
      if (!q.ok()) return q.status();
      items.push_back(*q);
    }
    if (items.empty()) return g_.bytes("");
    return g_.sequence(std::move(items));
  }

  // {m}, {m,}, {,n}, {m,n}: sets lo/hi and returns true; false if the brace is a literal (as Python treats it).
  bool parse_braces(int64_t& lo, int64_t& hi) {
    size_t i = pos_ + 1;
    auto number = [&](int64_t& v) {
      size_t s = i;
      v = 0;
      while (i < end_ && std::isdigit(static_cast<unsigned char>(p_[i])))
        v = std::min<int64_t>(v * 10 + (p_[i++] - '0'), 1 << 30);
      return i > s;
    };
    bool has_lo = number(lo);
    if (!has_lo) lo = 0;
    if (i < end_ && p_[i] == '}') {
      if (!has_lo) return false;
      hi = lo;
    } else if (i < end_ && p_[i] == ',') {
      ++i;
      if (!number(hi)) hi = kUnbounded;
      if (i >= end_ || p_[i] != '}') return false;
    } else {
      return false;
    }
    pos_ = i + 1;
    return true;
  }

  StatusOr<ExprId> parse_quantifiers(ExprId e) {
    while (pos_ < end_) {
      size_t start = pos_;
      char c = p_[pos_];
      int64_t lo, hi;
      if (c == '*') {
        lo = 0, hi = kUnbounded, ++pos_;
      } else if (c == '+') {
        lo = 1, hi = kUnbounded, ++pos_;
      } else if (c == '?') {
        lo = 0, hi = 1, ++pos_;
      } else if (c == '{') {
        if (!parse_braces(lo, hi)) return e;
        if (hi < lo) return error(start, "quantifier {m,n} with n < m");
        if (lo > 100000 || (hi != kUnbounded && hi > 100000)) return error(start, "repetition count above 100000");
      } else {
        return e;
      }
      if (pos_ < end_ && p_[pos_] == '?') {
        ++pos_;  // lazy: the same language, generation picks its own length
      } else if (pos_ < end_ && p_[pos_] == '+') {
        return error(pos_, "possessive quantifiers are not supported");
      }
      if (pos_ < end_ && (p_[pos_] == '*' || p_[pos_] == '+' || p_[pos_] == '?')) {
        return error(pos_, "multiple repeat");
      }
      e = g_.repeat(e, static_cast<int32_t>(lo), static_cast<int32_t>(hi));
    }
    return e;
  }

  StatusOr<uint32_t> parse_literal_cp() {
    unsigned char c = static_cast<unsigned char>(p_[pos_]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || pos_ + len > end_) return error(pos_, "invalid UTF-8");
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<unsigned char>(p_[pos_ + i]) & 0x3F);
    pos_ += len;
    return cp;
  }

  // An escape after '\'. Sets `cls` for class escapes (\d \s ...) or returns a code point.
  StatusOr<uint32_t> parse_escape(Ranges& cls, bool& is_class, bool in_negated_class, bool& ascii_only) {
    size_t start = pos_;
    ++pos_;
    if (pos_ >= end_) return error(start, "bad escape (end of pattern)");
    char e = p_[pos_++];
    is_class = true;
    switch (e) {
      case 'd':
        cls = kDigit;
        ascii_only |= in_negated_class;
        return 0u;
      case 'D':
        cls = kNotDigitAscii;
        ascii_only |= in_negated_class;
        return 0u;
      case 'w':
        cls = kWord;
        ascii_only |= in_negated_class;
        return 0u;
      case 'W':
        cls = kNotWordAscii;
        ascii_only |= in_negated_class;
        return 0u;
      case 's':
        cls = kSpace;
        return 0u;
      case 'S':
        cls = complement(kSpace);
        return 0u;
      default:
        break;
    }
    is_class = false;
    if (const int32_t control = control_escape(e, /*bell=*/true); control >= 0) return static_cast<uint32_t>(control);
    switch (e) {
      case 'x':
      case 'u':
      case 'U': {
        const int64_t v = read_hex_digits(p_.substr(0, end_), &pos_, e == 'x' ? 2 : e == 'u' ? 4 : 8);
        if (v < 0) return error(start, std::string("incomplete escape \\") + e);
        if (v > 0x10FFFF) return error(start, "escape beyond U+10FFFF");
        if (v >= 0xD800 && v <= 0xDFFF) return error(start, "surrogate code points are not supported");
        return static_cast<uint32_t>(v);
      }
      case 'b':
      case 'B':
        return error(start, std::string("word-boundary assertion \\") + e + " is not supported");
      case 'A':
      case 'Z':
        return error(start, std::string("anchor \\") + e + " is only supported at the pattern's ends");
      default:
        if (std::isdigit(static_cast<unsigned char>(e))) return error(start, "backreferences are not supported");
        if (std::isalpha(static_cast<unsigned char>(e))) return error(start, std::string("bad escape \\") + e);
        return static_cast<uint32_t>(static_cast<unsigned char>(e));
    }
  }

  StatusOr<ExprId> parse_class() {
    size_t start = pos_;
    ++pos_;
    bool negated = false;
    if (pos_ < end_ && p_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    Ranges ranges;
    bool ascii_only = false;
    bool first = true;
    while (true) {
      if (pos_ >= end_) return error(start, "unterminated character set");
      if (p_[pos_] == ']' && !first) break;
      first = false;
      uint32_t lo;
      if (p_[pos_] == '\\') {
        Ranges cls;
        bool is_class = false;
        auto cp = parse_escape(cls, is_class, negated, ascii_only);
        if (!cp.ok()) return cp.status();
        if (is_class) {
          ranges.insert(ranges.end(), cls.begin(), cls.end());
          continue;
        }
        lo = *cp;
      } else {
        if (p_.substr(pos_, 2) == "[:" || p_.substr(pos_, 2) == "[=")
          return error(pos_, "POSIX classes are not supported");
        auto cp = parse_literal_cp();
        if (!cp.ok()) return cp.status();
        lo = *cp;
      }
      uint32_t hi = lo;
      if (pos_ + 1 < end_ && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        size_t range_at = pos_;
        ++pos_;
        if (p_[pos_] == '\\') {
          Ranges cls;
          bool is_class = false;
          auto cp = parse_escape(cls, is_class, negated, ascii_only);
          if (!cp.ok()) return cp.status();
          if (is_class) return error(range_at, "bad character range");
          hi = *cp;
        } else {
          auto cp = parse_literal_cp();
          if (!cp.ok()) return cp.status();
          hi = *cp;
        }
        if (hi < lo) return error(range_at, "bad character range");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    if (negated) {
      ranges = complement(ranges);
      if (ascii_only) {
        // Python's \d / \w are Unicode-wide; our ASCII reading is only safe if the complement stays ASCII.
        Ranges clipped;
        for (auto [lo, hi] : ranges) {
          if (lo <= 0x7F) clipped.push_back({lo, std::min<uint32_t>(hi, 0x7F)});
        }
        ranges = std::move(clipped);
      }
    }
    if (ranges.empty()) return error(start, "character set matches nothing");
    return g_.char_class(std::move(ranges));
  }

  StatusOr<ExprId> parse_atom() {
    size_t start = pos_;
    char c = p_[pos_];
    switch (c) {
      case '(': {
        ++pos_;
        if (pos_ < end_ && p_[pos_] == '?') {
          std::string_view rest = p_.substr(pos_, 4);
          if (rest.substr(0, 2) == "?:") {
            pos_ += 2;
          } else if (rest.substr(0, 3) == "?P<" ||
                     (rest.substr(0, 2) == "?<" && rest.substr(0, 3) != "?<=" && rest.substr(0, 3) != "?<!")) {
            size_t close = p_.find('>', pos_);
            if (close == std::string_view::npos || close >= end_) return error(start, "unterminated group name");
            pos_ = close + 1;
          } else if (rest.substr(0, 2) == "?=" || rest.substr(0, 2) == "?!" || rest.substr(0, 3) == "?<=" ||
                     rest.substr(0, 3) == "?<!") {
            return error(start, "lookaround assertions are not supported");
          } else if (rest.substr(0, 3) == "?P=") {
            return error(start, "backreferences are not supported");
          } else if (rest.substr(0, 2) == "?#") {
            size_t close = p_.find(')', pos_);
            if (close == std::string_view::npos) return error(start, "missing ), unterminated comment");
            pos_ = close + 1;
            return g_.bytes("");
          } else if (rest.substr(0, 2) == "?(") {
            return error(start, "conditional groups are not supported");
          } else if (rest.substr(0, 2) == "?>") {
            return error(start, "atomic groups are not supported");
          } else {
            return error(start, "inline flags like (?i) are not supported");
          }
        }
        auto inner = parse_alternation();
        if (!inner.ok()) return inner.status();
        if (pos_ >= end_ || p_[pos_] != ')') return error(start, "missing ), unterminated subpattern");
        ++pos_;
        return *inner;
      }
      case '[':
        return parse_class();
      case '.':
        ++pos_;
        return g_.char_class({{'\n', '\n'}}, true);
      case '^':
        return error(start, "anchor ^ is only supported at the start of the pattern");
      case '$':
        return error(start, "anchor $ is only supported at the end of the pattern");
      case '*':
      case '+':
      case '?':
        return error(start, "nothing to repeat");
      case '{': {
        int64_t lo, hi;
        size_t save = pos_;
        if (parse_braces(lo, hi)) return error(save, "nothing to repeat");
        pos_ = save + 1;
        return g_.bytes("{");
      }
      case '\\': {
        Ranges cls;
        bool is_class = false, ascii_only = false;
        auto cp = parse_escape(cls, is_class, false, ascii_only);
        if (!cp.ok()) return cp.status();
        if (is_class) return g_.char_class(std::move(cls));
        std::string b;
        append_utf8(*cp, b);
        return g_.bytes(std::move(b));
      }
      default: {
        auto cp = parse_literal_cp();
        if (!cp.ok()) return cp.status();
        std::string b;
        append_utf8(*cp, b);
        return g_.bytes(std::move(b));
      }
    }
  }

  Grammar& g_;
  std::string_view p_;
  size_t pos_ = 0;
  size_t end_ = 0;
};

}  // namespace

StatusOr<ExprId> add_regex(Grammar& g, std::string_view pattern) { return RegexParser(g, pattern).run(); }

StatusOr<Grammar> regex_to_grammar(std::string_view pattern) {
  Grammar g;
  auto e = add_regex(g, pattern);
  if (!e.ok()) return e.status();
  RuleId root = g.add_rule("root");
  g.set_body(root, *e);
  g.set_root(root);
  Status st = g.validate();
  if (!st.ok()) return st;
  return g;
}

}  // namespace llmserve::structured

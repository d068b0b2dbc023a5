// Recursive-descent parser for GBNF-style grammars. Newlines carry no meaning: a rule ends where the next
// `name ::=` begins, so rules may span lines freely.
#include "structured/ebnf_parser.h"

#include <cctype>
#include <map>
#include <string>

#include "structured/program.h"

namespace llmserve::structured {

namespace {

class EbnfParser {
 public:
  explicit EbnfParser(std::string_view text) : s_(text) {}

  StatusOr<Grammar> run() {
    skip_space();
    while (pos_ < s_.size()) {
      size_t start = pos_;
      std::string name = parse_name();
      if (name.empty()) return error(start, "expected a rule name");
      skip_space();
      if (s_.substr(pos_, 3) != "::=") return error(pos_, "expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      RuleId r = rule_for(name, start);
      if (g_.rule(r).body >= 0) return error(start, "rule '" + name + "' is defined twice");
      defined_[name] = true;
      auto body = parse_alternatives();
      if (!body.ok()) return body.status();
      g_.set_body(r, *body);
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == ')') return error(pos_, "unbalanced ')'");
    }
    for (auto& [name, where] : first_use_) {
      if (!defined_.count(name)) return error(where, "rule '" + name + "' is used but not defined");
    }
    RuleId root = g_.find_rule("root");
    if (root < 0) return invalid_argument("grammar has no rule named 'root' (the start rule)");
    g_.set_root(root);
    Status st = g_.validate();
    if (!st.ok()) return st;
    return std::move(g_);
  }

 private:
  Status error(size_t at, const std::string& what) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return invalid_argument("grammar syntax error at " + std::to_string(line) + ":" + std::to_string(col) + ": " +
                            what);
  }

  void skip_space() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  static bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; }

  std::string parse_name() {
    size_t start = pos_;
    if (pos_ < s_.size() && (std::isalpha(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) {
      while (pos_ < s_.size() && name_char(s_[pos_])) ++pos_;
    }
    return std::string(s_.substr(start, pos_ - start));
  }

  // True if a `name ::=` starts at pos_ (the next rule), which ends the current one.
  bool at_rule_start() {
    size_t save = pos_;
    std::string name = parse_name();
    bool yes = false;
    if (!name.empty()) {
      skip_space();
      yes = s_.substr(pos_, 3) == "::=";
    }
    pos_ = save;
    return yes;
  }

  RuleId rule_for(const std::string& name, size_t where) {
    RuleId r = g_.find_rule(name);
    if (r < 0) {
      r = g_.add_rule(name);
      first_use_.emplace(name, where);
    }
    return r;
  }

  StatusOr<ExprId> parse_alternatives() {
    std::vector<ExprId> alts;
    while (true) {
      auto seq = parse_sequence();
      if (!seq.ok()) return seq.status();
      alts.push_back(*seq);
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == '|') {
        ++pos_;
        continue;
      }
      break;
    }
    return g_.choice(std::move(alts));
  }

  StatusOr<ExprId> parse_sequence() {
    std::vector<ExprId> items;
    while (true) {
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] == '|' || s_[pos_] == ')' || at_rule_start()) break;
      auto item = parse_item();
      if (!item.ok()) return item.status();
      items.push_back(*item);
    }
    if (items.empty()) return g_.bytes("");
    return g_.sequence(std::move(items));
  }

  StatusOr<ExprId> parse_item() {
    auto prim = parse_primary();
    if (!prim.ok()) return prim.status();
    ExprId e = *prim;
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == '?') {
        e = g_.optional(e);
      } else if (c == '*') {
        e = g_.star(e);
      } else if (c == '+') {
        e = g_.plus(e);
      } else if (c == '{') {
        size_t start = pos_;
        ++pos_;
        int64_t lo = parse_int(), hi;
        if (lo < 0) return error(pos_, "expected a number in '{m,n}'");
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          skip_space();
          hi = (pos_ < s_.size() && s_[pos_] == '}') ? kUnbounded : parse_int();
          if (hi < 0) return error(pos_, "expected a number or '}' after ',' in '{m,n}'");
        } else {
          hi = lo;
        }
        skip_space();
        if (pos_ >= s_.size() || s_[pos_] != '}') return error(pos_, "expected '}' closing the repetition");
        if (hi < lo) return error(start, "repetition {m,n} with n < m");
        if (lo > 100000 || (hi != kUnbounded && hi > 100000)) return error(start, "repetition count above 100000");
        e = g_.repeat(e, static_cast<int32_t>(lo), static_cast<int32_t>(hi));
      } else {
        break;
      }
      ++pos_;
    }
    return e;
  }

  int64_t parse_int() {
    skip_space();
    if (pos_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[pos_]))) return -1;
    int64_t v = 0;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      v = std::min<int64_t>(v * 10 + (s_[pos_] - '0'), int64_t{1} << 40);
      ++pos_;
    }
    skip_space();
    return v;
  }

  StatusOr<ExprId> parse_primary() {
    size_t start = pos_;
    char c = s_[pos_];
    if (c == '"' || c == '\'') {
      ++pos_;
      std::string bytes;
      while (true) {
        if (pos_ >= s_.size()) return error(start, "unterminated string literal");
        if (s_[pos_] == c) break;
        auto cp = parse_char();
        if (!cp.ok()) return cp.status();
        if (*cp >= 0x100000000ll) {
          bytes.push_back(static_cast<char>(*cp - 0x100000000ll));  // \xHH: a raw byte
        } else {
          append_utf8(static_cast<uint32_t>(*cp), bytes);
        }
      }
      ++pos_;
      return g_.bytes(std::move(bytes));
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return g_.char_class({}, true);
    }
    if (c == '(') {
      ++pos_;
      auto inner = parse_alternatives();
      if (!inner.ok()) return inner.status();
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] != ')') return error(start, "'(' is never closed");
      ++pos_;
      return *inner;
    }
    std::string name = parse_name();
    if (name.empty()) return error(start, std::string("unexpected character '") + c + "'");
    return g_.ref(rule_for(name, start));
  }

  // One character of a literal or class, escapes decoded: a code point, or 2^32 + byte for \xHH in a string.
  StatusOr<int64_t> parse_char() {
    size_t start = pos_;
    unsigned char c = static_cast<unsigned char>(s_[pos_]);
    if (c != '\\') {
      // A UTF-8 sequence in the grammar text stands for its code point.
      int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (len == 0 || pos_ + len > s_.size()) return error(start, "invalid UTF-8 in the grammar text");
      uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
      for (int i = 1; i < len; ++i) {
        unsigned char d = static_cast<unsigned char>(s_[pos_ + i]);
        if ((d >> 6) != 2) return error(start, "invalid UTF-8 in the grammar text");
        cp = (cp << 6) | (d & 0x3F);
      }
      pos_ += len;
      return static_cast<int64_t>(cp);
    }
    if (pos_ + 1 >= s_.size()) return error(start, "escape at the end of the text");
    char e = s_[pos_ + 1];
    pos_ += 2;
    if (const int32_t control = control_escape(e, /*bell=*/false); control >= 0) return int64_t{control};
    switch (e) {
      case 'x':
      case 'u':
      case 'U': {
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        const int64_t v = read_hex_digits(s_, &pos_, digits);
        if (v < 0) return error(start, std::string("expected ") + std::to_string(digits) + " hex digits after \\" + e);
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return error(start, "escape is not a Unicode scalar value");
        if (e == 'x' && v >= 0x80 && in_string_) return int64_t{0x100000000ll} + v;
        return static_cast<int64_t>(v);
      }
      default:
        if (std::isalnum(static_cast<unsigned char>(e))) {
          return error(start, std::string("unknown escape \\") + e);
        }
        return static_cast<int64_t>(static_cast<unsigned char>(e));
    }
  }

  StatusOr<ExprId> parse_class() {
    size_t start = pos_;
    ++pos_;
    bool negated = false;
    if (pos_ < s_.size() && s_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    in_string_ = false;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    while (true) {
      if (pos_ >= s_.size()) return error(start, "'[' is never closed");
      if (s_[pos_] == ']') break;
      auto lo = parse_char();
      if (!lo.ok()) return lo.status();
      int64_t hi = *lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        auto h = parse_char();
        if (!h.ok()) return h.status();
        hi = *h;
        if (hi < *lo) return error(start, "character range with its end before its start");
      }
      ranges.push_back({static_cast<uint32_t>(*lo), static_cast<uint32_t>(hi)});
    }
    in_string_ = true;
    ++pos_;
    if (utf8_sequences(ranges, negated).empty()) return error(start, "character class matches nothing");
    return g_.char_class(std::move(ranges), negated);
  }

  std::string_view s_;
  size_t pos_ = 0;
  bool in_string_ = true;
  Grammar g_;
  std::map<std::string, size_t> first_use_;
  std::map<std::string, bool> defined_;
};

}  // namespace

StatusOr<Grammar> parse_ebnf(std::string_view text) { return EbnfParser(text).run(); }

}  // namespace llmserve::structured

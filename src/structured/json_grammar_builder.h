// Builders of the JSON grammar pieces every JSON constraint shares: whitespace runs, strings (with length bounds),
// numbers, any value / object / array, object and array shapes, keys outside a set; and integer ranges as digit
// patterns. Used by json_schema_to_grammar.cc; the rules they add are made once per Grammar and shared.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "structured/grammar.h"

namespace llmserve::structured {

class JsonGrammarBuilder {
 public:
  JsonGrammarBuilder(Grammar& g, int32_t max_ws) : g_(g), max_ws_(max_ws) {}

  ExprId ws() {
    if (max_ws_ <= 0) return g_.bytes("");
    return g_.repeat(g_.char_class({{' ', ' '}, {'\t', '\t'}, {'\n', '\n'}, {'\r', '\r'}}), 0, max_ws_);
  }
  ExprId lit(const std::string& s) { return g_.bytes(s); }

  // One character of a JSON string's content: unescaped, or an escape (no \u surrogates, so one escape is always
  // one character of the decoded string and lengths count the same as Python's len()).
  ExprId string_char() {
    if (string_char_ >= 0) return g_.ref(string_char_);
    string_char_ = g_.add_rule("json_char");
    ExprId hex = g_.char_class({{'0', '9'}, {'a', 'f'}, {'A', 'F'}});
    ExprId not_surrogate = g_.choice(
        {g_.sequence({g_.char_class({{'0', '9'}, {'a', 'c'}, {'A', 'C'}, {'e', 'f'}, {'E', 'F'}}), hex, hex, hex}),
         g_.sequence({g_.char_class({{'d', 'd'}, {'D', 'D'}}), g_.char_class({{'0', '7'}}), hex, hex})});
    ExprId escape = g_.sequence(
        {lit("\\"),
         g_.choice(
             {g_.char_class(
                  {{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'}, {'n', 'n'}, {'r', 'r'}, {'t', 't'}}),
              g_.sequence({lit("u"), not_surrogate})})});
    g_.set_body(string_char_, g_.choice({g_.char_class({{'"', '"'}, {'\\', '\\'}, {0, 0x1F}}, true), escape}));
    return g_.ref(string_char_);
  }

  ExprId string(int32_t min_len = 0, int32_t max_len = kUnbounded) {
    if (min_len == 0 && max_len == kUnbounded) {
      if (string_ < 0) {
        string_ = g_.add_rule("json_string");
        g_.set_body(string_, g_.sequence({lit("\""), g_.star(string_char()), lit("\"")}));
      }
      return g_.ref(string_);
    }
    return g_.sequence({lit("\""), g_.repeat(string_char(), min_len, max_len), lit("\"")});
  }

  ExprId number() {
    if (number_ < 0) {
      number_ = g_.add_rule("json_number");
      ExprId digits = g_.plus(g_.char_class({{'0', '9'}}));
      g_.set_body(
          number_,
          g_.sequence({integer_unbounded(), g_.optional(g_.sequence({lit("."), digits})),
                       g_.optional(g_.sequence({g_.char_class({{'e', 'e'}, {'E', 'E'}}),
                                                g_.optional(g_.char_class({{'+', '+'}, {'-', '-'}})), digits}))}));
    }
    return g_.ref(number_);
  }

  ExprId integer_unbounded() {
    if (integer_ < 0) {
      integer_ = g_.add_rule("json_integer");
      g_.set_body(integer_, g_.sequence({g_.optional(lit("-")), nonneg_digits()}));
    }
    return g_.ref(integer_);
  }

  // 0 | [1-9][0-9]*
  ExprId nonneg_digits() {
    return g_.choice({lit("0"), g_.sequence({g_.char_class({{'1', '9'}}), g_.star(g_.char_class({{'0', '9'}}))})});
  }

  ExprId value() {
    if (value_ < 0) {
      value_ = g_.add_rule("json_value");
      RuleId object = g_.add_rule("json_object");
      RuleId array = g_.add_rule("json_array");
      g_.set_body(value_, g_.choice({g_.ref(object), g_.ref(array), string(), number(), lit("true"), lit("false"),
                                     lit("null")}));
      g_.set_body(object, object_of(value()));
      g_.set_body(array, array_of(value(), 0, kUnbounded));
      object_ = object;
    }
    return g_.ref(value_);
  }

  ExprId any_object() {
    value();
    return g_.ref(object_);
  }

  // "{" ws (member ws ("," ws member ws)*)? "}" with member = string ws ":" ws value_expr
  ExprId object_of(ExprId value_expr) {
    ExprId member = g_.sequence({string(), ws(), lit(":"), ws(), value_expr});
    ExprId more = g_.star(g_.sequence({lit(","), ws(), member, ws()}));
    return g_.sequence({lit("{"), ws(), g_.optional(g_.sequence({member, ws(), more})), lit("}")});
  }

  // A JSON string key, written without escapes, that is none of `names` (so an extra property never repeats a
  // declared one, whose value would then be overwritten by a value of the wrong schema).
  ExprId key_not_in(const std::vector<std::string>& names) {
    struct TrieNode {
      std::map<uint32_t, int> children;
      bool terminal = false;
    };
    std::vector<TrieNode> trie(1);
    for (const std::string& name : names) {
      std::vector<uint32_t> cps;
      if (!plain_code_points(name, cps)) continue;  // needs an escape: never produced by an unescaped key
      int at = 0;
      for (uint32_t cp : cps) {
        auto it = trie[at].children.find(cp);
        if (it == trie[at].children.end()) {
          trie.push_back({});
          it = trie[at].children.emplace(cp, static_cast<int>(trie.size() - 1)).first;
        }
        at = it->second;
      }
      trie[at].terminal = true;
    }
    std::vector<std::pair<uint32_t, uint32_t>> specials = {{'"', '"'}, {'\\', '\\'}, {0, 0x1F}};
    ExprId plain_tail = g_.star(g_.char_class(specials, true));
    std::vector<RuleId> rules(trie.size());
    for (size_t i = 0; i < trie.size(); ++i) rules[i] = g_.add_rule("key_not_in");
    for (size_t i = 0; i < trie.size(); ++i) {
      std::vector<ExprId> alts;
      if (!trie[i].terminal) alts.push_back(g_.bytes(""));
      auto excluded = specials;
      for (auto [cp, child] : trie[i].children) {
        std::string b;
        append_utf8(cp, b);
        alts.push_back(g_.sequence({g_.bytes(b), g_.ref(rules[child])}));
        excluded.push_back({cp, cp});
      }
      alts.push_back(g_.sequence({g_.char_class(excluded, true), plain_tail}));
      g_.set_body(rules[i], g_.choice(std::move(alts)));
    }
    return g_.sequence({lit("\""), g_.ref(rules[0]), lit("\"")});
  }

  static bool plain_code_points(const std::string& s, std::vector<uint32_t>& out) {
    for (size_t i = 0; i < s.size();) {
      unsigned char c = static_cast<unsigned char>(s[i]);
      int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (len == 0 || i + len > s.size()) return false;
      uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
      for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      if (cp < 0x20 || cp == '"' || cp == '\\') return false;
      out.push_back(cp);
      i += len;
    }
    return true;
  }

  ExprId array_of(ExprId item, int32_t min_items, int32_t max_items) {
    ExprId next = g_.sequence({lit(","), ws(), item, ws()});
    ExprId rest = g_.repeat(next, std::max(0, min_items - 1), max_items == kUnbounded ? kUnbounded : max_items - 1);
    ExprId items = g_.sequence({item, ws(), rest});
    if (max_items == 0) return g_.sequence({lit("["), ws(), lit("]")});
    return g_.sequence({lit("["), ws(), min_items > 0 ? items : g_.optional(items), lit("]")});
  }

  Grammar& g() { return g_; }

 private:
  Grammar& g_;
  int32_t max_ws_;
  RuleId string_char_ = -1, string_ = -1, number_ = -1, integer_ = -1, value_ = -1, object_ = -1;
};

// Integers in [lo, hi] (either end may be open) as digit patterns.
class IntegerRange {
 public:
  explicit IntegerRange(Grammar& g) : g_(g) {}

  ExprId range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
    std::vector<ExprId> alts;
    // Negative part: "-" then |x| in [max(1, -hi), -lo].
    if (!lo || *lo < 0) {
      int64_t abs_lo = hi ? std::max<int64_t>(1, -*hi) : 1;
      std::optional<int64_t> abs_hi = lo ? std::optional<int64_t>(-*lo) : std::nullopt;
      if (!abs_hi || abs_lo <= *abs_hi) alts.push_back(g_.sequence({g_.bytes("-"), nonneg(abs_lo, abs_hi)}));
    }
    if (!hi || *hi >= 0) {
      int64_t a = lo ? std::max<int64_t>(0, *lo) : 0;
      if (!hi || a <= *hi) alts.push_back(nonneg(a, hi));
    }
    return g_.choice(std::move(alts));
  }

  // [a, b] with a >= 0; b open if nullopt. No leading zeros.
  ExprId nonneg(int64_t a, std::optional<int64_t> b) {
    std::vector<ExprId> alts;
    std::string as = std::to_string(a);
    int n = static_cast<int>(as.size());
    int max_digits = b ? static_cast<int>(std::to_string(*b).size()) : n;
    for (int d = n; d <= max_digits; ++d) {
      int64_t first = d == 1 ? 0 : pow10(d - 1);
      int64_t last = pow10(d) - 1;
      int64_t x = std::max(a, first), y = b ? std::min(*b, last) : last;
      if (x <= y) alts.push_back(same_length(std::to_string(x), std::to_string(y)));
    }
    if (!b) {
      // Every number with more digits than `a`.
      alts.push_back(g_.sequence({g_.char_class({{'1', '9'}}), g_.repeat(g_.char_class({{'0', '9'}}), n, kUnbounded)}));
    }
    return g_.choice(std::move(alts));
  }

 private:
  static int64_t pow10(int d) {
    int64_t v = 1;
    for (int i = 0; i < d; ++i) v = v > INT64_MAX / 10 ? INT64_MAX : v * 10;
    return v;
  }

  ExprId digit_range(char lo, char hi) {
    return g_.char_class({{static_cast<uint32_t>(lo), static_cast<uint32_t>(hi)}});
  }

  // Decimal strings of equal length, lo <= hi.
  ExprId same_length(const std::string& lo, const std::string& hi) {
    if (lo == hi) return g_.bytes(lo);
    size_t n = lo.size();
    if (n == 1) return digit_range(lo[0], hi[0]);
    if (lo[0] == hi[0]) return g_.sequence({g_.bytes(lo.substr(0, 1)), same_length(lo.substr(1), hi.substr(1))});
    std::string zeros(n - 1, '0'), nines(n - 1, '9');
    if (lo.substr(1) == zeros && hi.substr(1) == nines) {
      return g_.sequence({digit_range(lo[0], hi[0]), g_.repeat(digit_range('0', '9'), n - 1, n - 1)});
    }
    std::vector<ExprId> alts;
    alts.push_back(g_.sequence({g_.bytes(lo.substr(0, 1)), same_length(lo.substr(1), nines)}));
    if (lo[0] + 1 <= hi[0] - 1) {
      alts.push_back(g_.sequence({digit_range(lo[0] + 1, hi[0] - 1), g_.repeat(digit_range('0', '9'), n - 1, n - 1)}));
    }
    alts.push_back(g_.sequence({g_.bytes(hi.substr(0, 1)), same_length(zeros, hi.substr(1))}));
    return g_.choice(std::move(alts));
  }

  Grammar& g_;
};

}  // namespace llmserve::structured

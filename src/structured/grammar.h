// Grammar IR shared by every front end (EBNF parser, regex, JSON schema, choice): rules whose bodies are expression
// trees over byte literals, Unicode character classes, rule references, sequences, alternations and repetitions.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace llmserve::structured {

// Expressions live in the Grammar's arena and are named by index (ExprId); rules likewise (RuleId).
using ExprId = int32_t;
using RuleId = int32_t;
inline constexpr int32_t kUnbounded = std::numeric_limits<int32_t>::max();  // repeat max: no upper bound

struct Expr {
  enum class Kind {
    kBytes,      // the literal byte string `bytes` (empty = the empty string)
    kCharClass,  // one Unicode code point (UTF-8 encoded) in `ranges` (inclusive), or not in them if `negated`
    kRuleRef,    // the rule `rule`
    kSequence,   // children one after the other
    kChoice,     // one of children
    kRepeat,     // children[0] repeated min..max times (max may be kUnbounded)
  };
  Kind kind = Kind::kBytes;
  std::string bytes;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  bool negated = false;
  RuleId rule = -1;
  std::vector<ExprId> children;
  int32_t min = 0, max = 0;
};

struct Rule {
  std::string name;
  ExprId body = -1;  // -1 while declared but not yet defined
};

class Grammar {
 public:
  // Builders; every returned id stays valid for the Grammar's life.
  ExprId bytes(std::string s);
  ExprId char_class(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated = false);
  ExprId ref(RuleId rule);
  ExprId sequence(std::vector<ExprId> children);
  ExprId choice(std::vector<ExprId> children);
  ExprId repeat(ExprId child, int32_t min, int32_t max);
  ExprId optional(ExprId child) { return repeat(child, 0, 1); }
  ExprId star(ExprId child) { return repeat(child, 0, kUnbounded); }
  ExprId plus(ExprId child) { return repeat(child, 1, kUnbounded); }

  // A new rule named `name` (made unique with a numeric suffix if taken) with no body yet.
  RuleId add_rule(const std::string& name);
  // The rule called `name`, or -1.
  RuleId find_rule(const std::string& name) const;
  void set_body(RuleId rule, ExprId body) { rules_[rule].body = body; }
  void set_root(RuleId rule) { root_ = rule; }

  const Expr& expr(ExprId id) const { return exprs_[id]; }
  const Rule& rule(RuleId id) const { return rules_[id]; }
  int32_t num_rules() const { return static_cast<int32_t>(rules_.size()); }
  RuleId root() const { return root_; }

  // OK if every rule has a body, the root is set, and no rule is left-recursive (a rule reachable from itself
  // without consuming a byte, which a top-down recognizer cannot run); InvalidArgument naming the rule otherwise.
  Status validate() const;
  // GBNF-like text of the grammar (debugging and error messages).
  std::string to_string() const;

 private:
  ExprId add(Expr e);
  std::vector<Expr> exprs_;
  std::vector<Rule> rules_;
  RuleId root_ = -1;
};

// Appends the UTF-8 encoding of code point cp.
void append_utf8(uint32_t cp, std::string& out);

// Escapes both front ends (GBNF, regex) spell alike. The code point of a one-letter control escape (\n \r \t \f \v
// \0, and \a where `bell`), or -1 for any other letter.
int32_t control_escape(char e, bool bell);
// `digits` hex digits at text[*pos] as a number, *pos moved past them; -1 (and *pos unchanged) if fewer follow.
int64_t read_hex_digits(std::string_view text, size_t* pos, int digits);

}  // namespace llmserve::structured

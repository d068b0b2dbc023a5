// Grammar IR builders, validation (left recursion) and printing.
// Left recursion is refused here because the recognizer expands rules top-down and would never stop.
#include "structured/grammar.h"

#include <cctype>
#include <functional>

namespace llmserve::structured {

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

ExprId Grammar::add(Expr e) {
  exprs_.push_back(std::move(e));
  return static_cast<ExprId>(exprs_.size() - 1);
}

ExprId Grammar::bytes(std::string s) {
  Expr e;
  e.kind = Expr::Kind::kBytes;
  e.bytes = std::move(s);
  return add(std::move(e));
}

ExprId Grammar::char_class(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
  Expr e;
  e.kind = Expr::Kind::kCharClass;
  e.ranges = std::move(ranges);
  e.negated = negated;
  return add(std::move(e));
}

ExprId Grammar::ref(RuleId rule) {
  Expr e;
  e.kind = Expr::Kind::kRuleRef;
  e.rule = rule;
  return add(std::move(e));
}

ExprId Grammar::sequence(std::vector<ExprId> children) {
  if (children.size() == 1) return children[0];
  Expr e;
  e.kind = Expr::Kind::kSequence;
  e.children = std::move(children);
  return add(std::move(e));
}

ExprId Grammar::choice(std::vector<ExprId> children) {
  if (children.size() == 1) return children[0];
  Expr e;
  e.kind = Expr::Kind::kChoice;
  e.children = std::move(children);
  return add(std::move(e));
}

ExprId Grammar::repeat(ExprId child, int32_t min, int32_t max) {
  Expr e;
  e.kind = Expr::Kind::kRepeat;
  e.children = {child};
  e.min = min;
  e.max = max;
  return add(std::move(e));
}

RuleId Grammar::add_rule(const std::string& name) {
  std::string unique = name;
  for (int i = 1; find_rule(unique) >= 0; ++i) unique = name + "_" + std::to_string(i);
  rules_.push_back(Rule{unique, -1});
  return static_cast<RuleId>(rules_.size() - 1);
}

RuleId Grammar::find_rule(const std::string& name) const {
  for (size_t i = 0; i < rules_.size(); ++i) {
    if (rules_[i].name == name) return static_cast<RuleId>(i);
  }
  return -1;
}

Status Grammar::validate() const {
  if (root_ < 0) return invalid_argument("grammar has no root rule");
  for (const Rule& r : rules_) {
    if (r.body < 0) return invalid_argument("rule '" + r.name + "' is referenced but never defined");
  }
  // nullable[rule] by fixed point, then the "leftmost reference" graph: rule A -> rule B if B can start A.
  std::vector<char> rule_nullable(rules_.size(), 0);
  std::function<bool(ExprId)> nullable = [&](ExprId id) -> bool {
    const Expr& e = exprs_[id];
    switch (e.kind) {
      case Expr::Kind::kBytes:
        return e.bytes.empty();
      case Expr::Kind::kCharClass:
        return false;
      case Expr::Kind::kRuleRef:
        return rule_nullable[e.rule] != 0;
      case Expr::Kind::kSequence:
        for (ExprId c : e.children) {
          if (!nullable(c)) return false;
        }
        return true;
      case Expr::Kind::kChoice:
        for (ExprId c : e.children) {
          if (nullable(c)) return true;
        }
        return false;
      case Expr::Kind::kRepeat:
        return e.min == 0 || nullable(e.children[0]);
    }
    return false;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < rules_.size(); ++i) {
      if (!rule_nullable[i] && nullable(rules_[i].body)) {
        rule_nullable[i] = 1;
        changed = true;
      }
    }
  }
  // Productive rules (those that derive some finite string), by fixed point: a rule that is not can never finish,
  // and a matcher led into it would wait for ever.
  std::vector<char> productive(rules_.size(), 0);
  std::function<bool(ExprId)> finite = [&](ExprId id) -> bool {
    const Expr& e = exprs_[id];
    switch (e.kind) {
      case Expr::Kind::kBytes:
      case Expr::Kind::kCharClass:
        return true;
      case Expr::Kind::kRuleRef:
        return productive[e.rule] != 0;
      case Expr::Kind::kSequence:
        for (ExprId c : e.children) {
          if (!finite(c)) return false;
        }
        return true;
      case Expr::Kind::kChoice:
        for (ExprId c : e.children) {
          if (finite(c)) return true;
        }
        return false;
      case Expr::Kind::kRepeat:
        return e.min == 0 || finite(e.children[0]);
    }
    return false;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < rules_.size(); ++i) {
      if (!productive[i] && finite(rules_[i].body)) {
        productive[i] = 1;
        changed = true;
      }
    }
  }
  for (size_t i = 0; i < rules_.size(); ++i) {
    if (!productive[i]) {
      return invalid_argument("rule '" + rules_[i].name +
                              "' can never finish: every alternative needs itself or another such rule again");
    }
  }
  std::vector<std::vector<RuleId>> left(rules_.size());
  std::function<void(ExprId, std::vector<RuleId>&)> leftmost = [&](ExprId id, std::vector<RuleId>& out) {
    const Expr& e = exprs_[id];
    switch (e.kind) {
      case Expr::Kind::kRuleRef:
        out.push_back(e.rule);
        break;
      case Expr::Kind::kSequence:
        for (ExprId c : e.children) {
          leftmost(c, out);
          if (!nullable(c)) break;
        }
        break;
      case Expr::Kind::kChoice:
        for (ExprId c : e.children) leftmost(c, out);
        break;
      case Expr::Kind::kRepeat:
        if (e.max > 0) leftmost(e.children[0], out);
        break;
      default:
        break;
    }
  };
  for (size_t i = 0; i < rules_.size(); ++i) leftmost(rules_[i].body, left[i]);
  // Cycle search (iterative colouring DFS).
  std::vector<int> color(rules_.size(), 0);
  std::function<RuleId(RuleId)> visit = [&](RuleId r) -> RuleId {
    color[r] = 1;
    for (RuleId n : left[r]) {
      if (color[n] == 1) return n;
      if (color[n] == 0) {
        RuleId found = visit(n);
        if (found >= 0) return found;
      }
    }
    color[r] = 2;
    return -1;
  };
  for (size_t i = 0; i < rules_.size(); ++i) {
    if (color[i] != 0) continue;
    RuleId r = visit(static_cast<RuleId>(i));
    if (r >= 0) {
      return invalid_argument("rule '" + rules_[r].name +
                              "' is left-recursive (it can reach itself before consuming any character); "
                              "rewrite it with repetition, e.g. `list ::= item (\",\" item)*`");
    }
  }
  return ok_status();
}

namespace {

std::string escape_byte(unsigned char c) {
  static const char* kHex = "0123456789ABCDEF";
  if (c == '"' || c == '\\' || c == ']' || c == '-' || c == '^') return std::string("\\") + static_cast<char>(c);
  if (c >= 0x20 && c < 0x7F) return std::string(1, static_cast<char>(c));
  return std::string("\\x") + kHex[c >> 4] + kHex[c & 15];
}

std::string cp_text(uint32_t cp) {
  if (cp < 0x80) return escape_byte(static_cast<unsigned char>(cp));
  char buf[16];
  snprintf(buf, sizeof(buf), "\\U%08X", cp);
  return buf;
}

}  // namespace

std::string Grammar::to_string() const {
  std::function<std::string(ExprId)> print = [&](ExprId id) -> std::string {
    const Expr& e = exprs_[id];
    std::string s;
    switch (e.kind) {
      case Expr::Kind::kBytes:
        s = "\"";
        for (unsigned char c : e.bytes) s += escape_byte(c);
        return s + "\"";
      case Expr::Kind::kCharClass:
        s = e.negated ? "[^" : "[";
        for (auto [lo, hi] : e.ranges) s += lo == hi ? cp_text(lo) : cp_text(lo) + "-" + cp_text(hi);
        return s + "]";
      case Expr::Kind::kRuleRef:
        return rules_[e.rule].name;
      case Expr::Kind::kSequence:
      case Expr::Kind::kChoice:
        s = "(";
        for (size_t i = 0; i < e.children.size(); ++i) {
          if (i > 0) s += e.kind == Expr::Kind::kChoice ? " | " : " ";
          s += print(e.children[i]);
        }
        return s + ")";
      case Expr::Kind::kRepeat:
        return print(e.children[0]) + "{" + std::to_string(e.min) + "," +
               (e.max == kUnbounded ? std::string() : std::to_string(e.max)) + "}";
    }
    return s;
  };
  std::string out;
  for (const Rule& r : rules_) out += r.name + " ::= " + (r.body >= 0 ? print(r.body) : "<undefined>") + "\n";
  return out;
}

int32_t control_escape(char e, bool bell) {
  switch (e) {
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    case 'f':
      return '\f';
    case 'v':
      return '\v';
    case '0':
      return 0;
    case 'a':
      return bell ? '\a' : -1;
    default:
      return -1;
  }
}

int64_t read_hex_digits(std::string_view text, size_t* pos, int digits) {
  int64_t v = 0;
  for (int i = 0; i < digits; ++i) {
    if (*pos + i >= text.size()) return -1;
    const char h = text[*pos + i];
    if (!std::isxdigit(static_cast<unsigned char>(h))) return -1;
    v = v * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
  }
  *pos += digits;
  return v;
}

}  // namespace llmserve::structured

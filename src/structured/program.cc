// Lowering of the grammar IR to the recognizer's flat program: literals and character classes become byte sets
// (code points expanded to their UTF-8 byte sequences), choices and repetitions become helper rules.
#include "structured/program.h"

#include <algorithm>
#include <map>
#include <string>

namespace llmserve::structured {

namespace {

void split_utf8(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  // Split at encoding-length boundaries first, then at continuation-byte boundaries, so each piece is a product of
  // per-byte ranges.
  static constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF};
  for (uint32_t end : kLengthEnds) {
    if (lo <= end && hi > end) {
      split_utf8(lo, end, out);
      split_utf8(end + 1, hi, out);
      return;
    }
  }
  if (hi < 0x80) {
    out.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  for (int i = 1; i < 4; ++i) {
    uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_utf8(lo, lo | m, out);
        split_utf8((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split_utf8(lo, (hi & ~m) - 1, out);
        split_utf8(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  append_utf8(lo, a);
  append_utf8(hi, b);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (size_t i = 0; i < a.size(); ++i) seq.push_back({static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i])});
  out.push_back(std::move(seq));
}

class Lowering {
 public:
  Lowering(const Grammar& g, int64_t max_elements) : g_(g), max_elements_(max_elements) {}

  StatusOr<Program> run() {
    p_.rule_alternatives.resize(g_.num_rules());
    for (RuleId r = 0; r < g_.num_rules(); ++r) p_.rule_names.push_back(g_.rule(r).name);
    for (RuleId r = 0; r < g_.num_rules(); ++r) {
      const Expr& body = g_.expr(g_.rule(r).body);
      if (body.kind == Expr::Kind::kChoice) {
        for (ExprId c : body.children) add_alternative(r, c);
      } else {
        add_alternative(r, g_.rule(r).body);
      }
      if (too_big_) break;
    }
    if (too_big_) {
      return invalid_argument("grammar too large: more than " + std::to_string(max_elements_) +
                              " elements after expanding repetition counts");
    }
    p_.root = g_.root();
    return std::move(p_);
  }

 private:
  int32_t new_rule(const std::string& name) {
    p_.rule_alternatives.emplace_back();
    p_.rule_names.push_back(name);
    return static_cast<int32_t>(p_.rule_alternatives.size() - 1);
  }

  void add_alternative(int32_t rule, ExprId e) {
    std::vector<Program::Element> seq;
    emit(e, seq);
    add_sequence(rule, std::move(seq));
  }

  void add_sequence(int32_t rule, std::vector<Program::Element> seq) {
    p_.rule_alternatives[rule].push_back(static_cast<int32_t>(p_.elements.size()));
    p_.elements.insert(p_.elements.end(), seq.begin(), seq.end());
    p_.elements.push_back({Program::kEnd, rule});
    if (static_cast<int64_t>(p_.elements.size()) > max_elements_) too_big_ = true;
  }

  int32_t byte_set(const ByteSet& s) {
    auto key = s.bits;
    auto it = byte_set_index_.find(key);
    if (it != byte_set_index_.end()) return it->second;
    p_.byte_sets.push_back(s);
    int32_t id = static_cast<int32_t>(p_.byte_sets.size() - 1);
    byte_set_index_[key] = id;
    return id;
  }

  // A helper rule standing for expression e (memoized so repeated copies share one rule).
  int32_t helper_rule(ExprId e) {
    auto it = helper_.find(e);
    if (it != helper_.end()) return it->second;
    const Expr& x = g_.expr(e);
    int32_t r = new_rule("_expr" + std::to_string(e));
    helper_[e] = r;
    if (x.kind == Expr::Kind::kChoice) {
      for (ExprId c : x.children) add_alternative(r, c);
    } else if (x.kind == Expr::Kind::kCharClass) {
      for (auto& seq : utf8_sequences(x.ranges, x.negated)) {
        std::vector<Program::Element> els;
        for (auto [lo, hi] : seq) {
          ByteSet s;
          s.add_range(lo, hi);
          els.push_back({Program::kByteSet, byte_set(s)});
        }
        add_sequence(r, std::move(els));
      }
    } else {
      add_alternative(r, e);
    }
    return r;
  }

  void emit(ExprId id, std::vector<Program::Element>& out) {
    if (too_big_) return;
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case Expr::Kind::kBytes:
        for (unsigned char c : e.bytes) {
          ByteSet s;
          s.add(c);
          out.push_back({Program::kByteSet, byte_set(s)});
        }
        return;
      case Expr::Kind::kCharClass: {
        auto seqs = utf8_sequences(e.ranges, e.negated);
        bool single_byte = std::all_of(seqs.begin(), seqs.end(), [](const auto& s) { return s.size() == 1; });
        if (single_byte) {
          ByteSet s;
          for (auto& seq : seqs) s.add_range(seq[0].first, seq[0].second);
          out.push_back({Program::kByteSet, byte_set(s)});
        } else {
          out.push_back({Program::kRuleRef, helper_rule(id)});
        }
        return;
      }
      case Expr::Kind::kRuleRef:
        out.push_back({Program::kRuleRef, e.rule});
        return;
      case Expr::Kind::kSequence:
        for (ExprId c : e.children) emit(c, out);
        return;
      case Expr::Kind::kChoice:
        out.push_back({Program::kRuleRef, helper_rule(id)});
        return;
      case Expr::Kind::kRepeat:
        emit_repeat(id, e, out);
        return;
    }
  }

  void emit_repeat(ExprId id, const Expr& e, std::vector<Program::Element>& out) {
    ExprId child = e.children[0];
    for (int32_t i = 0; i < e.min && !too_big_; ++i) {
      emit(child, out);
      if (static_cast<int64_t>(out.size() + p_.elements.size()) > max_elements_) too_big_ = true;
    }
    if (e.max == e.min || too_big_) return;
    if (e.max == kUnbounded) {
      // star ::= child star | ""  (the tail reference costs no stack frame in the recognizer)
      auto key = std::make_pair(child, -1);
      auto it = repeat_rules_.find(key);
      int32_t r;
      if (it != repeat_rules_.end()) {
        r = it->second;
      } else {
        r = new_rule("_star" + std::to_string(id));
        repeat_rules_[key] = r;
        std::vector<Program::Element> seq;
        emit(child, seq);
        seq.push_back({Program::kRuleRef, r});
        add_sequence(r, std::move(seq));
        add_sequence(r, {});
      }
      out.push_back({Program::kRuleRef, r});
      return;
    }
    // opt_k ::= child opt_{k-1} | ""  for k = 1..max-min, shared between repeats of the same child.
    int32_t k = e.max - e.min;
    int32_t prev = -1;
    for (int32_t j = 1; j <= k && !too_big_; ++j) {
      auto key = std::make_pair(child, j);
      auto it = repeat_rules_.find(key);
      if (it != repeat_rules_.end()) {
        prev = it->second;
        continue;
      }
      int32_t r = new_rule("_opt" + std::to_string(id) + "_" + std::to_string(j));
      repeat_rules_[key] = r;
      std::vector<Program::Element> seq;
      emit(child, seq);
      if (prev >= 0) seq.push_back({Program::kRuleRef, prev});
      add_sequence(r, std::move(seq));
      add_sequence(r, {});
      prev = r;
    }
    if (prev >= 0) out.push_back({Program::kRuleRef, prev});
  }

  const Grammar& g_;
  int64_t max_elements_;
  bool too_big_ = false;
  Program p_;
  std::map<std::array<uint64_t, 4>, int32_t> byte_set_index_;
  std::map<ExprId, int32_t> helper_;
  std::map<std::pair<ExprId, int32_t>, int32_t> repeat_rules_;
};

}  // namespace

std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_sequences(std::vector<std::pair<uint32_t, uint32_t>> ranges,
                                                                     bool negated) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (auto [lo, hi] : ranges) {
    if (lo > hi) continue;
    hi = std::min<uint32_t>(hi, 0x10FFFF);
    if (!merged.empty() && lo <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, hi);
    } else {
      merged.push_back({lo, hi});
    }
  }
  if (negated) {
    std::vector<std::pair<uint32_t, uint32_t>> inv;
    uint32_t next = 0;
    for (auto [lo, hi] : merged) {
      if (lo > next) inv.push_back({next, lo - 1});
      next = hi + 1;
    }
    if (next <= 0x10FFFF) inv.push_back({next, 0x10FFFF});
    merged = std::move(inv);
  }
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> out;
  for (auto [lo, hi] : merged) {
    // Surrogates have no UTF-8 encoding.
    if (lo < 0xD800 && hi >= 0xD800) {
      split_utf8(lo, 0xD7FF, out);
      if (hi > 0xDFFF) split_utf8(0xE000, hi, out);
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      if (hi > 0xDFFF) split_utf8(0xE000, hi, out);
    } else {
      split_utf8(lo, hi, out);
    }
  }
  return out;
}

StatusOr<Program> lower_grammar(const Grammar& grammar, int64_t max_elements) {
  return Lowering(grammar, max_elements).run();
}

}  // namespace llmserve::structured

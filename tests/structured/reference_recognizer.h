// Brute-force oracle for the mask tests: a plain stack-set recognizer over the lowered program with explicit
// vector stacks (no interning, no memoized transitions, no tail calls, no token walk), fed one token at a time.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "structured/program.h"

namespace llmserve::structured {

class ReferenceRecognizer {
 public:
  explicit ReferenceRecognizer(const Program& p) : p_(&p) {
    for (int32_t alt : p.rule_alternatives[p.root]) expand({alt}, 0);
  }

  // Consumes the bytes; false (and the recognizer dead) if any is refused.
  bool feed(const std::string& bytes) {
    for (unsigned char c : bytes) {
      std::set<std::vector<int32_t>> old = std::move(stacks_);
      stacks_.clear();
      can_end_ = false;
      for (const auto& s : old) {
        int32_t top = s.back();
        if (!p_->byte_sets[p_->elements[top].value].has(c)) continue;
        std::vector<int32_t> next = s;
        next.back() = top + 1;
        expand(std::move(next), 0);
      }
      if (stacks_.empty() && !can_end_) return false;
    }
    return true;
  }
  bool alive() const { return !stacks_.empty() || can_end_; }
  bool can_end() const { return can_end_; }
  bool only_end() const { return stacks_.empty(); }

 private:
  // Top of stack = back(); entries below the top are return positions.
  void expand(std::vector<int32_t> s, int depth) {
    // Nullable loops without tail calls grow without bound; their configurations repeat after one turn, and no
    // test input closes more than 60 rules at once.
    if (depth > 60 || s.size() > 2000) return;
    int32_t top = s.back();
    const auto& e = p_->elements[top];
    if (e.kind == Program::kByteSet) {
      stacks_.insert(std::move(s));
    } else if (e.kind == Program::kEnd) {
      s.pop_back();
      if (s.empty()) {
        can_end_ = true;
      } else {
        expand(std::move(s), depth + 1);
      }
    } else {
      s.back() = top + 1;
      for (int32_t alt : p_->rule_alternatives[e.value]) {
        std::vector<int32_t> t = s;
        t.push_back(alt);
        expand(std::move(t), depth + 1);
      }
    }
  }

  const Program* p_;
  std::set<std::vector<int32_t>> stacks_;
  bool can_end_ = false;
};

}  // namespace llmserve::structured

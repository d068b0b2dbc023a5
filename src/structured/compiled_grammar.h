// A compiled constraint: the lowered program plus the automaton whose states, transitions and token masks fill in
// as matchers use them. Shared between requests; every access to the automaton takes the grammar's mutex, and
// what a matcher keeps (state ids, mask pointers) stays valid for the grammar's life.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "structured/automaton.h"
#include "structured/grammar_matcher.h"
#include "structured/program.h"
#include "structured/token_index.h"

namespace llmserve::structured {

class CompiledGrammar {
 public:
  CompiledGrammar(ConstraintSpec spec, std::shared_ptr<const TokenIndex> tokens, Program program,
                  std::shared_ptr<std::atomic<int64_t>> mask_budget);

  const ConstraintSpec& spec() const { return spec_; }
  const TokenIndex& tokens() const { return *tokens_; }
  const Program& program() const { return program_; }

  // Thread-safe views of the automaton (see automaton.h).
  int32_t start_state() const;
  int32_t walk(int32_t state, std::string_view bytes) const;
  bool can_end(int32_t state) const;
  bool only_end(int32_t state) const;
  std::shared_ptr<const std::vector<uint32_t>> mask(int32_t state) const;
  int32_t num_states() const;

 private:
  ConstraintSpec spec_;
  std::shared_ptr<const TokenIndex> tokens_;
  Program program_;
  mutable std::mutex mu_;
  mutable Automaton automaton_;  // guarded by mu_
};

}  // namespace llmserve::structured

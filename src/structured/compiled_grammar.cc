// CompiledGrammar: the mutex around the shared automaton.
#include "structured/compiled_grammar.h"

namespace llmserve::structured {

CompiledGrammar::CompiledGrammar(ConstraintSpec spec, std::shared_ptr<const TokenIndex> tokens, Program program,
                                 std::shared_ptr<std::atomic<int64_t>> mask_budget)
    : spec_(std::move(spec)),
      tokens_(std::move(tokens)),
      program_(std::move(program)),
      automaton_(program_, *tokens_, std::move(mask_budget)) {}

int32_t CompiledGrammar::start_state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return automaton_.start();
}

int32_t CompiledGrammar::walk(int32_t state, std::string_view bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  return automaton_.walk(state, bytes);
}

bool CompiledGrammar::can_end(int32_t state) const {
  std::lock_guard<std::mutex> lock(mu_);
  return automaton_.can_end(state);
}

bool CompiledGrammar::only_end(int32_t state) const {
  std::lock_guard<std::mutex> lock(mu_);
  return automaton_.only_end(state);
}

std::shared_ptr<const std::vector<uint32_t>> CompiledGrammar::mask(int32_t state) const {
  std::lock_guard<std::mutex> lock(mu_);
  return automaton_.mask(state);
}

int32_t CompiledGrammar::num_states() const {
  std::lock_guard<std::mutex> lock(mu_);
  return automaton_.num_states();
}

}  // namespace llmserve::structured

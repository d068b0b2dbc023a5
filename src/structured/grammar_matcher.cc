// GrammarMatcher: a request's history of automaton states (one per accepted token), so rollback is a pop.
#include "structured/grammar_matcher.h"

#include <cstring>

#include "core/logging.h"
#include "structured/compiled_grammar.h"

namespace llmserve::structured {

namespace {
constexpr int32_t kTerminated = -1;  // history entry after EOS
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar) : grammar_(std::move(grammar)) {
  CHECK(grammar_ != nullptr) << "GrammarMatcher needs a compiled grammar";
  history_.push_back(grammar_->start_state());
}

int32_t GrammarMatcher::bitmask_words() const { return grammar_->tokens().num_words; }

void GrammarMatcher::fill_next_token_bitmask(uint32_t* words) const {
  const TokenIndex& tokens = grammar_->tokens();
  int32_t state = history_.back();
  bool eos_allowed = true;
  if (state == kTerminated) {
    std::memset(words, 0, sizeof(uint32_t) * tokens.num_words);
  } else {
    auto mask = grammar_->mask(state);
    std::memcpy(words, mask->data(), sizeof(uint32_t) * tokens.num_words);
    eos_allowed = grammar_->can_end(state);
  }
  if (eos_allowed) {
    for (int32_t id : tokens.eos_ids) words[id >> 5] |= 1u << (id & 31);
  }
}

bool GrammarMatcher::accept_token(int32_t token) {
  const TokenIndex& tokens = grammar_->tokens();
  int32_t state = history_.back();
  if (state == kTerminated || token < 0 || token >= tokens.vocab_size) return false;
  if (tokens.is_eos[token]) {
    if (!grammar_->can_end(state)) return false;
    history_.push_back(kTerminated);
    return true;
  }
  const std::string& bytes = tokens.token_bytes[token];
  if (bytes.empty()) return false;
  int32_t next = grammar_->walk(state, bytes);
  if (next == Automaton::kDead) return false;
  history_.push_back(next);
  return true;
}

bool GrammarMatcher::is_terminated() const {
  int32_t state = history_.back();
  return state == kTerminated || grammar_->only_end(state);
}

void GrammarMatcher::rollback(int32_t num_tokens) {
  CHECK(num_tokens >= 0 && num_tokens < static_cast<int32_t>(history_.size()))
      << "rollback of " << num_tokens << " tokens, but only " << history_.size() - 1 << " were accepted";
  history_.resize(history_.size() - num_tokens);
}

void GrammarMatcher::reset() { history_.resize(1); }

}  // namespace llmserve::structured

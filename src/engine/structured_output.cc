// Structured output in the engine: constraint conversion, matcher creation, matcher resync and the parallel bitmask
// fill (structured_output.h).
#include "engine/structured_output.h"

#include <algorithm>
#include <unordered_map>
#include <nlohmann/json.hpp>

#include "core/thread_pool.h"

namespace llmserve {

structured::ConstraintSpec to_constraint_spec(const StructuredOutputsParams &p) {
  using Kind = structured::ConstraintSpec::Kind;
  if (p.json) return {Kind::kJsonSchema, *p.json};
  if (p.regex) return {Kind::kRegex, *p.regex};
  if (p.choice) return {Kind::kChoice, nlohmann::json(*p.choice).dump()};
  if (p.grammar) return {Kind::kGrammar, *p.grammar};
  return {Kind::kJsonObject, ""};
}

StatusOr<std::unique_ptr<structured::GrammarMatcher>> make_grammar_matcher(structured::GrammarCompiler *compiler,
                                                                           const StructuredOutputsParams &params) {
  if (compiler == nullptr) {
    return invalid_argument(
        "structured_outputs: constrained decoding needs the model's tokenizer, and this engine has none");
  }
  if (params.num_constraints() != 1) {
    return invalid_argument("structured_outputs: exactly one of json, regex, choice, grammar, json_object must be set");
  }
  StatusOr<std::shared_ptr<const structured::CompiledGrammar>> grammar = compiler->compile(to_constraint_spec(params));
  if (!grammar.ok()) return invalid_argument("structured_outputs: " + grammar.status().message());
  return std::make_unique<structured::GrammarMatcher>(std::move(*grammar));
}

bool sync_matcher(structured::GrammarMatcher &matcher, std::span<const int32_t> outputs) {
  const int64_t accepted = matcher.num_accepted_tokens();
  const int64_t want = static_cast<int64_t>(outputs.size());
  if (accepted == want) return true;
  // Cheapest correct path: a matcher ahead of the request (a dropped in-flight token) rolls back; one behind accepts
  // the missing outputs. Neither happens when bitmasks are filled after the previous step is applied (as both the
  // immediate and the deferred path do); both keep it correct if it does.
  if (accepted > want) {
    matcher.rollback(static_cast<int32_t>(accepted - want));
    return true;
  }
  for (int64_t i = accepted; i < want; ++i) {
    if (!matcher.accept_token(outputs[static_cast<size_t>(i)])) return false;
  }
  return true;
}

void fill_grammar_bitmasks(std::span<structured::GrammarMatcher *const> matchers, int32_t words, uint32_t *bitmask) {
  auto fill_row = [&](size_t r) {
    structured::GrammarMatcher &m = *matchers[r];
    uint32_t *row = bitmask + static_cast<int64_t>(r) * words;
    const int32_t own = std::min(words, m.bitmask_words());
    if (own < m.bitmask_words()) {
      std::vector<uint32_t> full(static_cast<size_t>(m.bitmask_words()));
      m.fill_next_token_bitmask(full.data());
      std::copy_n(full.data(), own, row);
    } else {
      m.fill_next_token_bitmask(row);
    }
    std::fill(row + own, row + words, 0u);
  };
  // Matchers of one grammar take its lock for every mask: spread over threads they would only queue on it (a
  // contended mutex per row costs more than the row's copy). So one task per grammar, its rows in order; different
  // grammars in parallel.
  std::vector<std::vector<size_t>> groups;
  std::unordered_map<const structured::CompiledGrammar *, size_t> group_of;
  for (size_t r = 0; r < matchers.size(); ++r) {
    auto [it, added] = group_of.emplace(matchers[r]->grammar(), groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(r);
  }
  auto fill_groups = [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      for (size_t r : groups[static_cast<size_t>(g)]) fill_row(r);
    }
  };
  if (groups.size() <= 1) {
    fill_groups(0, static_cast<int64_t>(groups.size()));
  } else {
    parallel_for(static_cast<int64_t>(groups.size()), 1, fill_groups);
  }
}

}  // namespace llmserve

// The engine's structured-output manager (vLLM's StructuredOutputManager): turns a request's
// StructuredOutputsParams into a compiled grammar (cached by the compiler, one per tokenizer) and a per-request
// GrammarMatcher, and fills the allowed-token bitmasks of a step's constrained rows, on worker threads when there are
// several. Invariant: a matcher has accepted exactly the request's output tokens whenever a bitmask is computed from
// it (sync_matcher rebuilds it otherwise, e.g. after tokens were dropped).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "engine/sampling_params.h"
#include "structured/grammar_matcher.h"

namespace llmserve {

// vLLM's field -> the grammar engine's constraint (choice: a JSON array of the strings).
structured::ConstraintSpec to_constraint_spec(const StructuredOutputsParams &params);

// Compiles `params` with `compiler` (InvalidArgument "structured_outputs: <what is wrong>"; also when `compiler` is
// null, i.e. the engine has no tokenizer to build one from) and returns a fresh matcher for it.
StatusOr<std::unique_ptr<structured::GrammarMatcher>> make_grammar_matcher(structured::GrammarCompiler *compiler,
                                                                           const StructuredOutputsParams &params);

// Brings `matcher` to exactly `outputs` accepted (rolls back extra tokens, accepts missing ones); false when an
// output token is not allowed by the grammar (then the matcher holds the longest allowed prefix).
bool sync_matcher(structured::GrammarMatcher &matcher, std::span<const int32_t> outputs);

// Fills rows [0, matchers.size()) of `bitmask` ([rows, words] uint32, row-major): each matcher's next-token bitmask,
// zero past its own bitmask_words(). Rows of different grammars are filled in parallel on the global thread pool,
// the rows of one grammar on one thread (they share its lock).
void fill_grammar_bitmasks(std::span<structured::GrammarMatcher *const> matchers, int32_t words, uint32_t *bitmask);

}  // namespace llmserve

// Python-`re`-compatible regex subset -> Grammar IR (a full match of the pattern): literals and escapes, classes,
// groups (capturing, non-capturing, named), alternation, quantifiers (lazy forms as greedy), ^ / $ at the ends.
// Where Python's Unicode classes are wider than what we generate (\d, \w), we generate the ASCII subset, so every
// output still fullmatches.
#pragma once

#include <string_view>

#include "core/status.h"
#include "structured/grammar.h"

namespace llmserve::structured {

// Adds the pattern to `g` as an expression. InvalidArgument "regex error at offset N: ..." for syntax errors and
// for what is refused (lookarounds, backreferences, inline flags, possessive quantifiers, inner anchors).
StatusOr<ExprId> add_regex(Grammar& g, std::string_view pattern);
// A whole grammar whose root is the pattern.
StatusOr<Grammar> regex_to_grammar(std::string_view pattern);

}  // namespace llmserve::structured

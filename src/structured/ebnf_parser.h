// GBNF-style EBNF (llama.cpp / xgrammar syntax) -> Grammar IR: `name ::= alternatives`, `|`, sequences, groups,
// `?` `*` `+` `{m}` `{m,}` `{m,n}`, "strings" and 'strings' with escapes, [classes] with ranges / ^negation /
// escapes, `.` (any character), rule references, `#` comments; the start rule is `root`.
#pragma once

#include <string_view>

#include "core/status.h"
#include "structured/grammar.h"

namespace llmserve::structured {

// InvalidArgument "grammar syntax error at LINE:COLUMN: ..." for bad syntax, or naming an undefined rule (with the
// place it is used), a missing `root`, a left-recursive rule.
StatusOr<Grammar> parse_ebnf(std::string_view text);

}  // namespace llmserve::structured

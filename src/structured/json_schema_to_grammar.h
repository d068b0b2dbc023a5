// JSON Schema -> Grammar IR for what OpenAI's strict structured outputs allow (objects, arrays, enum, const, anyOf,
// $ref/$defs, strings with length/pattern/format, integer/number ranges, boolean, null), and the builtin grammar of
// any JSON value / object (response_format json_object). Property order is as declared; whitespace between JSON
// tokens is at most max_whitespace characters (0 = compact).
#pragma once

#include <string_view>

#include "core/status.h"
#include "structured/grammar.h"

namespace llmserve::structured {

// InvalidArgument naming the keyword and the JSON path (`/properties/age/minimum`) of anything refused: keywords
// outside the supported set, unsupported formats, bounds the grammar cannot express, malformed schema JSON.
StatusOr<Grammar> json_schema_to_grammar(std::string_view schema_json, int32_t max_whitespace);
// Adds the schema's rules to `g` and returns the expression of one value of it, for grammars that embed JSON
// (tool calls wrapped in tags); errors as above.
StatusOr<ExprId> add_json_schema(Grammar& g, std::string_view schema_json, int32_t max_whitespace);
// Any JSON object (whitespace as above) at the top level.
Grammar json_object_grammar(int32_t max_whitespace);

}  // namespace llmserve::structured

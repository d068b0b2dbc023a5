// The request fields that constrain the output: OpenAI's response_format, vLLM's structured_outputs and its older
// guided_json / guided_regex / guided_choice / guided_grammar, and chat's tools + tool_choice. Invariant: at most
// one constraint per request reaches SamplingParams::structured_outputs; a second is InvalidArgument naming both.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/status.h"
#include "engine/sampling_params.h"

namespace llmserve::server {

// chat's tool_choice: kNone renders the tools and parses nothing; kAuto parses tool calls out of free text (needs
// --enable-auto-tool-choice and a --tool-call-parser); kRequired / kNamed constrain the output to tool-call JSON.
enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ToolsRequest {
  nlohmann::ordered_json tools = nullptr;  // the validated list as sent (rendered by the chat template)
  ToolChoice choice = ToolChoice::kNone;
  std::string named_function;  // kNamed: the function the output calls
};

// Reads response_format / structured_outputs / guided_* from `body` into `out` (nullopt: unconstrained) and sets
// `*field` to the name of the field the constraint came from ("" when none). InvalidArgument naming the field for a
// malformed value, an unknown key, or two constraints at once.
Status parse_output_constraint(const nlohmann::ordered_json &body, std::optional<StructuredOutputsParams> *out,
                               std::string *field);

// Reads chat's tools / tool_choice (vLLM's rules: tool_choice defaults to "auto" when tools are given; "required" or
// a named function needs tools; a named function must be one of them). InvalidArgument naming the field.
Status parse_tools(const nlohmann::ordered_json &body, ToolsRequest *out);

// The constraint "required" / named tool_choice puts on the output (vLLM's): for kNamed the function's parameters
// schema (the output is the arguments object); for kRequired a non-empty JSON array of {"name", "parameters"}
// objects, one alternative per tool. Must only be called for kRequired / kNamed.
StructuredOutputsParams tool_call_constraint(const ToolsRequest &tools);

}  // namespace llmserve::server

// Tool-call parsers: the model's text -> OpenAI tool calls, for the formats the model families' chat templates teach
// (vLLM's --tool-call-parser names): hermes (Qwen / Hermes `<tool_call>{"name", "arguments"}</tool_call>`),
// llama3_json (`{"name", "parameters"}`, optionally after <|python_tag|>, several joined by ";"), mistral
// (`[TOOL_CALLS][{"name", "arguments"}, ...]` and the newer `[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}`), plus the
// JSON of tool_choice "required" (`[{"name", "parameters"}, ...]`). Invariant: parsing is a function of the text
// alone and only ever extends as the text grows, so a stream of deltas (ToolCallStreamer) adds up to exactly what
// the whole text parses to: arguments are the model's own JSON text of the arguments object, never re-serialised.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace llmserve::server {

struct ParsedToolCall {
  std::string name;
  bool name_done = false;
  std::string arguments;  // the arguments' JSON text so far (complete when arguments_done)
  bool arguments_done = false;
};

struct ToolCallParse {
  // Text that is content: before the first tool call. While the text may still grow, a tail that could begin a
  // tool-call marker is held back from it.
  std::string content;
  std::vector<ParsedToolCall> calls;
  // The text is (so far) a tool-call reply; false: plain content.
  bool in_tool_calls = false;
  // Final parse only: every call is complete and valid JSON (otherwise the whole text counts as content).
  bool valid = false;
};

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  // Parses all generated text so far; `final`: no more text follows.
  virtual ToolCallParse parse(std::string_view text, bool final) const = 0;
  // Whether the parser needs special tokens kept in the text (mistral's [TOOL_CALLS] is one).
  virtual bool needs_special_tokens() const { return false; }
};

// vLLM's --tool-call-parser names: "hermes", "llama3_json", "mistral". InvalidArgument naming the known ones.
StatusOr<std::unique_ptr<ToolCallParser>> make_tool_call_parser(const std::string &name);
// tool_choice "required": a JSON array of {"name", "parameters"} objects.
std::unique_ptr<ToolCallParser> make_required_tool_call_parser();
// A named tool_choice: the whole reply is the arguments of `function`.
std::unique_ptr<ToolCallParser> make_named_tool_call_parser(std::string function);
bool is_known_tool_call_parser(const std::string &name);

// The final reading of a whole reply: content (empty when the reply was only tool calls) and complete calls.
struct ToolCallResult {
  std::string content;
  std::vector<ParsedToolCall> calls;  // empty: no (valid) tool call; the text is content
};
ToolCallResult parse_tool_calls(const ToolCallParser &parser, std::string_view text);

// One choice's streaming state: feed it the whole text so far; it returns what is new since the last call, as
// OpenAI streams it (content text; per call first its id and name, then argument pieces).
class ToolCallStreamer {
 public:
  explicit ToolCallStreamer(const ToolCallParser &parser) : parser_(parser) {}
  struct CallDelta {
    size_t index = 0;
    bool first = false;  // carries id, type and name (and arguments "" or the first piece)
    std::string id, name, arguments;
  };
  struct Delta {
    std::string content;
    std::vector<CallDelta> calls;
  };
  // `final`: the text is complete; the deltas then bring the streamed total to parse_tool_calls(text).
  Delta update(std::string_view text, bool final);
  size_t num_calls() const { return ids_.size(); }

 private:
  const ToolCallParser &parser_;
  size_t content_sent_ = 0;
  std::vector<std::string> ids_;        // per announced call
  std::vector<size_t> arguments_sent_;  // bytes of each call's arguments sent
};

// "call_" + 24 random alphanumerics (OpenAI's shape).
std::string random_tool_call_id();

}  // namespace llmserve::server

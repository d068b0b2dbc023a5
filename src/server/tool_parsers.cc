// Tool-call parsers over a partial-JSON scanner: each format finds where its calls start (a marker or the reply's
// first character), then reads call objects field by field, reporting a value's text as far as it has arrived. The
// final parse checks every call with nlohmann's JSON parser.
#include "server/tool_parsers.h"

#include <nlohmann/json.hpp>
#include <random>

namespace llmserve::server {
namespace {

constexpr size_t kIncomplete = std::string_view::npos;
constexpr size_t kInvalid = std::string_view::npos - 1;

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

size_t skip_ws(std::string_view s, size_t pos) {
  while (pos < s.size() && is_ws(s[pos])) ++pos;
  return pos;
}

// The end of the JSON string starting at s[pos] == '"' (one past the closing quote), or kIncomplete.
size_t scan_string(std::string_view s, size_t pos) {
  for (size_t i = pos + 1; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == '"') {
      return i + 1;
    }
  }
  return kIncomplete;
}

// The end of the JSON value starting at s[pos] (no leading whitespace), kIncomplete when the text ends inside it,
// kInvalid when s[pos] cannot start a value or brackets do not match. Structure only: the final parse validates.
// A number or literal at the very end of the text is incomplete unless `final` (more digits could follow).
size_t scan_value(std::string_view s, size_t pos, bool final) {
  if (pos >= s.size()) return kIncomplete;
  const char c = s[pos];
  if (c == '"') return scan_string(s, pos);
  if (c == '{' || c == '[') {
    std::string stack;
    for (size_t i = pos; i < s.size(); ++i) {
      const char x = s[i];
      if (x == '"') {
        i = scan_string(s, i);
        if (i == kIncomplete) return kIncomplete;
        --i;
      } else if (x == '{' || x == '[') {
        stack.push_back(x == '{' ? '}' : ']');
      } else if (x == '}' || x == ']') {
        if (stack.empty() || stack.back() != x) return kInvalid;
        stack.pop_back();
        if (stack.empty()) return i + 1;
      }
    }
    return kIncomplete;
  }
  if (c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n') {
    size_t i = pos;
    while (i < s.size() && !is_ws(s[i]) && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ';') ++i;
    return i == s.size() && !final ? kIncomplete : i;
  }
  return kInvalid;
}

// One call object `{"name": ..., "<args key>": {...}}` read from s[pos] == '{' as far as the text goes.
struct CallScan {
  ParsedToolCall call;
  size_t end = kIncomplete;  // one past '}' when complete; kInvalid on a syntax error
};

CallScan scan_call_object(std::string_view s, size_t pos, bool final, std::initializer_list<const char *> args_keys) {
  CallScan out;
  if (pos >= s.size()) return out;
  if (s[pos] != '{') {
    out.end = kInvalid;
    return out;
  }
  size_t i = pos + 1;
  for (;;) {
    i = skip_ws(s, i);
    if (i >= s.size()) return out;
    if (s[i] == '}') {
      out.end = i + 1;
      return out;
    }
    if (s[i] == ',') {
      ++i;
      continue;
    }
    if (s[i] != '"') {
      out.end = kInvalid;
      return out;
    }
    const size_t key_end = scan_string(s, i);
    if (key_end == kIncomplete) return out;
    const std::string_view key = s.substr(i + 1, key_end - i - 2);
    i = skip_ws(s, key_end);
    if (i >= s.size()) return out;
    if (s[i] != ':') {
      out.end = kInvalid;
      return out;
    }
    const size_t value_start = skip_ws(s, i + 1);
    const size_t value_end = scan_value(s, value_start, final);
    if (value_end == kInvalid) {
      out.end = kInvalid;
      return out;
    }
    bool is_args = false;
    for (const char *k : args_keys) is_args |= key == k;
    if (key == "name" && value_end != kIncomplete) {
      nlohmann::json name = nlohmann::json::parse(s.substr(value_start, value_end - value_start), nullptr, false);
      if (!name.is_string()) {
        out.end = kInvalid;
        return out;
      }
      out.call.name = name.get<std::string>();
      out.call.name_done = true;
    } else if (is_args && value_start < s.size()) {
      out.call.arguments =
          std::string(s.substr(value_start, (value_end == kIncomplete ? s.size() : value_end) - value_start));
      out.call.arguments_done = value_end != kIncomplete;
    }
    if (value_end == kIncomplete) return out;
    i = value_end;
  }
}

// A call is complete when its name and a JSON-object arguments value (absent: "{}") are.
bool finish_call(ParsedToolCall &c, size_t end) {
  if (end == kIncomplete || end == kInvalid || !c.name_done) return false;
  if (!c.arguments_done) {
    if (!c.arguments.empty()) return false;
    c.arguments = "{}";
    c.arguments_done = true;
  }
  return nlohmann::json::parse(c.arguments, nullptr, false).is_object();
}

// The content before `marker` (first occurrence at or after 0): none yet -> all text but a tail that could start the
// marker (unless final).
size_t content_end(std::string_view text, std::string_view marker, bool final, bool *found) {
  const size_t at = text.find(marker);
  *found = at != std::string_view::npos;
  if (*found) return at;
  if (final) return text.size();
  for (size_t keep = std::min(marker.size() - 1, text.size()); keep > 0; --keep) {
    if (text.substr(text.size() - keep) == marker.substr(0, keep)) return text.size() - keep;
  }
  return text.size();
}

// A JSON array of call objects from s[pos] (after whitespace): `[{...}, {...}]`.
void scan_call_array(std::string_view s, size_t pos, bool final, std::initializer_list<const char *> args_keys,
                     ToolCallParse *out, size_t *end) {
  *end = kIncomplete;
  pos = skip_ws(s, pos);
  if (pos >= s.size()) return;
  if (s[pos] != '[') {
    *end = kInvalid;
    return;
  }
  size_t i = pos + 1;
  bool valid = true;
  for (;;) {
    i = skip_ws(s, i);
    if (i >= s.size()) break;
    if (s[i] == ']') {
      *end = i + 1;
      break;
    }
    if (s[i] == ',') {
      ++i;
      continue;
    }
    CallScan c = scan_call_object(s, i, final, args_keys);
    if (c.end == kInvalid) {
      *end = kInvalid;
      return;
    }
    valid &= finish_call(c.call, c.end);
    out->calls.push_back(std::move(c.call));
    if (c.end == kIncomplete) break;
    i = c.end;
  }
  out->valid = valid && *end != kIncomplete && *end != kInvalid && !out->calls.empty();
}

// Qwen / Hermes: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, one block per call.
class HermesParser : public ToolCallParser {
 public:
  ToolCallParse parse(std::string_view text, bool final) const override {
    static constexpr std::string_view kStart = "<tool_call>", kEnd = "</tool_call>";
    ToolCallParse out;
    bool found = false;
    const size_t first = content_end(text, kStart, final, &found);
    out.content = std::string(text.substr(0, first));
    if (!found) return out;
    out.in_tool_calls = true;
    bool valid = true;
    size_t pos = first;
    while (pos != std::string_view::npos && pos < text.size()) {
      CallScan c = scan_call_object(text, skip_ws(text, pos + kStart.size()), final, {"arguments", "parameters"});
      if (c.end == kInvalid) {
        valid = false;
        break;
      }
      valid &= finish_call(c.call, c.end);
      out.calls.push_back(std::move(c.call));
      if (c.end == kIncomplete) break;
      pos = text.find(kStart, c.end);  // the closing tag (optional at the very end, as vLLM) and text between blocks
      const size_t close = skip_ws(text, c.end);
      if (text.substr(close, kEnd.size()) != kEnd && close < text.size() && pos != close) valid = false;
    }
    out.valid = valid && !out.calls.empty();
    return out;
  }
};

// Llama 3.x JSON tool calls: the reply is {"name": ..., "parameters": {...}} (several joined by "; "), optionally
// after <|python_tag|>; anything else is content.
class Llama3JsonParser : public ToolCallParser {
 public:
  ToolCallParse parse(std::string_view text, bool final) const override {
    static constexpr std::string_view kTag = "<|python_tag|>";
    ToolCallParse out;
    size_t pos = skip_ws(text, 0);
    if (pos == text.size() && !final) return out;  // nothing but whitespace yet: could still become a call
    const std::string_view rest = text.substr(pos);
    if (!final && rest.size() < kTag.size() && kTag.substr(0, rest.size()) == rest) return out;
    if (rest.substr(0, kTag.size()) == kTag) pos = skip_ws(text, pos + kTag.size());
    if (pos < text.size() && text[pos] != '{') {
      out.content = std::string(text);
      return out;
    }
    if (pos >= text.size()) return out;
    out.in_tool_calls = true;
    bool valid = true;
    for (;;) {
      CallScan c = scan_call_object(text, pos, final, {"parameters", "arguments"});
      if (c.end == kInvalid) {
        valid = false;
        break;
      }
      valid &= finish_call(c.call, c.end);
      out.calls.push_back(std::move(c.call));
      if (c.end == kIncomplete) break;
      pos = skip_ws(text, c.end);
      if (pos >= text.size()) break;
      if (text[pos] != ';') {
        valid = false;
        break;
      }
      pos = skip_ws(text, pos + 1);
      if (pos >= text.size()) break;
    }
    out.valid = valid && !out.calls.empty();
    return out;
  }
};

// Mistral: [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (v3 tokenizers), or per call
// [TOOL_CALLS]name[ARGS]{...} with an optional [CALL_ID]id before [ARGS] (v11+).
class MistralParser : public ToolCallParser {
 public:
  bool needs_special_tokens() const override { return true; }
  ToolCallParse parse(std::string_view text, bool final) const override {
    static constexpr std::string_view kStart = "[TOOL_CALLS]", kArgs = "[ARGS]", kCallId = "[CALL_ID]";
    ToolCallParse out;
    bool found = false;
    const size_t first = content_end(text, kStart, final, &found);
    out.content = std::string(text.substr(0, first));
    if (!found) return out;
    out.in_tool_calls = true;
    size_t pos = skip_ws(text, first + kStart.size());
    if (pos >= text.size()) return out;
    if (text[pos] == '[') {
      size_t end = 0;
      scan_call_array(text, pos, final, {"arguments", "parameters"}, &out, &end);
      return out;
    }
    bool valid = true;
    while (pos < text.size()) {
      const size_t args = text.find(kArgs, pos);
      if (args == std::string_view::npos) break;  // the name is still arriving
      std::string_view name = text.substr(pos, args - pos);
      if (const size_t id = name.find(kCallId); id != std::string_view::npos) name = name.substr(0, id);
      ParsedToolCall call;
      call.name = std::string(name);
      call.name_done = true;
      const size_t value_start = skip_ws(text, args + kArgs.size());
      const size_t value_end = scan_value(text, value_start, final);
      if (value_end == kInvalid) {
        valid = false;
        break;
      }
      if (value_start < text.size()) {
        call.arguments =
            std::string(text.substr(value_start, (value_end == kIncomplete ? text.size() : value_end) - value_start));
      }
      call.arguments_done = value_end != kIncomplete;
      valid &= !call.name.empty() && finish_call(call, value_end);
      out.calls.push_back(std::move(call));
      if (value_end == kIncomplete) break;
      const size_t next = text.find(kStart, value_end);
      if (next == std::string_view::npos) break;
      pos = next + kStart.size();
    }
    out.valid = valid && !out.calls.empty();
    return out;
  }
};

// tool_choice "required": the whole reply is [{"name": ..., "parameters": {...}}, ...] (the constraint's schema).
class RequiredParser : public ToolCallParser {
 public:
  ToolCallParse parse(std::string_view text, bool final) const override {
    ToolCallParse out;
    out.in_tool_calls = true;
    size_t end = 0;
    scan_call_array(text, 0, final, {"parameters"}, &out, &end);
    if (end == kInvalid) out.valid = false;
    return out;
  }
};

// A named tool_choice: the reply is the arguments object (the constraint's schema), the name is known from the start.
class NamedParser : public ToolCallParser {
 public:
  explicit NamedParser(std::string function) : function_(std::move(function)) {}
  ToolCallParse parse(std::string_view text, bool final) const override {
    ToolCallParse out;
    out.in_tool_calls = true;
    ParsedToolCall call;
    call.name = function_;
    call.name_done = true;
    // Leading whitespace is not part of the arguments (a prefix of them is streamed, so it is dropped from both).
    call.arguments = std::string(text.substr(std::min(skip_ws(text, 0), text.size())));
    call.arguments_done = final;
    out.valid = final && nlohmann::json::parse(call.arguments, nullptr, false).is_object();
    out.calls.push_back(std::move(call));
    return out;
  }

 private:
  std::string function_;
};

}  // namespace

std::unique_ptr<ToolCallParser> make_named_tool_call_parser(std::string function) {
  return std::make_unique<NamedParser>(std::move(function));
}

bool is_known_tool_call_parser(const std::string &name) {
  return name == "hermes" || name == "llama3_json" || name == "mistral";
}

StatusOr<std::unique_ptr<ToolCallParser>> make_tool_call_parser(const std::string &name) {
  if (name == "hermes") return std::unique_ptr<ToolCallParser>(new HermesParser());
  if (name == "llama3_json") return std::unique_ptr<ToolCallParser>(new Llama3JsonParser());
  if (name == "mistral") return std::unique_ptr<ToolCallParser>(new MistralParser());
  return invalid_argument("tool-call-parser: unknown parser '" + name + "' (supported: hermes, llama3_json, mistral)");
}

std::unique_ptr<ToolCallParser> make_required_tool_call_parser() { return std::make_unique<RequiredParser>(); }

ToolCallResult parse_tool_calls(const ToolCallParser &parser, std::string_view text) {
  ToolCallParse p = parser.parse(text, /*final=*/true);
  ToolCallResult r;
  if (!p.in_tool_calls || !p.valid) {
    r.content = std::string(text);
    return r;
  }
  r.content = std::move(p.content);
  r.calls = std::move(p.calls);
  return r;
}

std::string random_tool_call_id() {
  static constexpr char kAlnum[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return id;
}

ToolCallStreamer::Delta ToolCallStreamer::update(std::string_view text, bool final) {
  Delta d;
  std::string content;
  std::vector<ParsedToolCall> calls;
  if (final) {
    ToolCallResult r = parse_tool_calls(parser_, text);
    content = std::move(r.content);
    calls = std::move(r.calls);
    // A reply that looked like tool calls but did not parse becomes content: the rest of the text follows.
    if (calls.empty()) content = std::string(text);
  } else {
    ToolCallParse p = parser_.parse(text, false);
    content = std::move(p.content);
    calls = std::move(p.calls);
  }
  if (content.size() > content_sent_) {
    d.content = content.substr(content_sent_);
    content_sent_ = content.size();
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    const ParsedToolCall &c = calls[i];
    if (i > ids_.size() || !c.name_done) break;  // announced in order, once the name is known
    if (i == ids_.size()) {
      ids_.push_back(random_tool_call_id());
      arguments_sent_.push_back(0);
      d.calls.push_back({i, true, ids_[i], c.name, ""});
    }
    if (c.arguments.size() > arguments_sent_[i]) {
      std::string piece = c.arguments.substr(arguments_sent_[i]);
      arguments_sent_[i] = c.arguments.size();
      if (!d.calls.empty() && d.calls.back().index == i) {
        d.calls.back().arguments += piece;
      } else {
        d.calls.push_back({i, false, "", "", std::move(piece)});
      }
    }
  }
  return d;
}

}  // namespace llmserve::server

// ChatTemplate: parses a Hugging Face chat template once and renders it for a conversation, byte-identical to
// Python jinja2 configured as transformers configures it (trim_blocks, lstrip_blocks, loopcontrols, HF tojson,
// raise_exception, strftime_now). Sandboxed: no I/O; loops, call depth and output size are bounded.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/status.h"

namespace llmserve {

namespace jinja {
struct Template;
}

struct ChatTemplateOptions {
  int64_t max_loop_iterations = 2'000'000;  // summed over all loops of one render
  int max_call_depth = 128;                 // nested macro calls
  size_t max_output_bytes = 32u << 20;      // any string the template builds, and the output
  std::optional<std::tm> now;               // what strftime_now() sees; unset = the local time at render
};

class ChatTemplate {
 public:
  // Parses a template; syntax errors are InvalidArgument with "line N: ...".
  static StatusOr<ChatTemplate> parse(std::string source);

  // Renders with a JSON context: messages, tools, documents, add_generation_prompt, bos_token, eos_token, plus any
  // chat_template_kwargs. Object key order is kept (it shows in tojson output), so prefer ordered_json.
  // Runtime errors (incl. raise_exception) are InvalidArgument with "line N: ...".
  StatusOr<std::string> render(const nlohmann::ordered_json& context, const ChatTemplateOptions& options = {}) const;
  StatusOr<std::string> render(const nlohmann::json& context, const ChatTemplateOptions& options = {}) const;

  const std::string& source() const { return source_; }

 private:
  ChatTemplate() = default;
  std::string source_;
  std::shared_ptr<const jinja::Template> tmpl_;
};

// Parses "YYYY-MM-DD" or "YYYY-MM-DD HH:MM:SS" (also with 'T') into a tm for ChatTemplateOptions::now.
StatusOr<std::tm> parse_template_time(const std::string& text);

}  // namespace llmserve

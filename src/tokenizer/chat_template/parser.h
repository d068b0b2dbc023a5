// Jinja2 parser: tokens -> AST with jinja2's grammar and operator precedence (jinja2/parser.py).
// Invariant: every syntax error jinja2 reports at compile time for the tags transformers enables is a
// TemplateError with the line here too; nesting depth is bounded so hostile input cannot overflow the stack.
#pragma once

#include <string>

#include "tokenizer/chat_template/ast.h"

namespace llmserve::jinja {

// Throws TemplateError on syntax errors.
Template parse_template(const std::string& source);

// Names the interpreter implements; the parser rejects other filters/tests outside `if` blocks and
// conditional expressions at compile time, as jinja2 does.
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

}  // namespace llmserve::jinja

// Jinja2 lexer with the whitespace rules transformers uses (trim_blocks, lstrip_blocks, `-`/`+` modifiers).
// Invariant: the token stream is exactly what jinja2's lexer yields for the same source, data text included,
// so that whitespace in the output matches Python byte for byte.
#pragma once

#include <string>
#include <vector>

namespace llmserve::jinja {

enum class TokenKind {
  kData,        // literal template text
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the unescaped value
  kInt,
  kFloat,
  kOperator,  // text holds the operator
  kEof,
};

struct Token {
  TokenKind kind;
  std::string text;
  int line;
};

// Throws TemplateError (with the line) on malformed input: unclosed tags/comments/strings, bad characters.
std::vector<Token> tokenize(const std::string& source);

}  // namespace llmserve::jinja

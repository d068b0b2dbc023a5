// Jinja2 lexer: root text scanning with trim_blocks/lstrip_blocks, then expression tokens inside tags.
// Mirrors jinja2.lexer.Lexer.tokeniter's rules (see lexer.h) including its brace balancing inside tags.
#include "tokenizer/chat_template/lexer.h"

#include <cstring>

#include "tokenizer/chat_template/value.h"

namespace llmserve::jinja {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Byte length of the Python-whitespace code point (str.isspace / re's \s) starting at `pos`, or 0.
size_t space_len_at(const std::string& s, size_t pos) {
  if (pos >= s.size()) return 0;
  unsigned char c = s[pos];
  size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 0 || pos + len > s.size()) return 0;
  std::u32string cp = utf8_decode(s.substr(pos, len));
  return cp.size() == 1 && py_isspace(cp[0]) ? len : 0;
}

// Byte length of the Python-whitespace code point ending at `end`, or 0.
size_t space_len_before(const std::string& s, size_t end) {
  size_t begin = end;
  while (begin > 0 && end - begin < 4) {
    --begin;
    if ((static_cast<unsigned char>(s[begin]) & 0xC0) != 0x80) break;
  }
  return begin < end && space_len_at(s, begin) == end - begin ? end - begin : 0;
}

int count_newlines(const std::string& s, size_t begin, size_t end) {
  int n = 0;
  for (size_t i = begin; i < end; ++i) n += s[i] == '\n';
  return n;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's "unicode-escape" decoding of a string literal's body.
std::string unescape(const std::string& s, int line) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      out += s[i];
      continue;
    }
    char c = s[++i];
    switch (c) {
      case '\n':
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
      case 'u':
      case 'U': {
        size_t n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        char32_t cp = 0;
        for (size_t k = 0; k < n; ++k) {
          int h = i + 1 + k < s.size() ? hex_value(s[i + 1 + k]) : -1;
          if (h < 0) throw TemplateError("truncated \\" + std::string(1, c) + " escape in string literal", line);
          cp = cp * 16 + h;
        }
        if (cp > 0x10FFFF) throw TemplateError("illegal Unicode character in string literal", line);
        i += n;
        utf8_append(out, cp);
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          char32_t cp = c - '0';
          for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k)
            cp = cp * 8 + (s[++i] - '0');
          utf8_append(out, cp);
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) lex_root();
    tokens_.push_back({TokenKind::kEof, "", line_});
    return std::move(tokens_);
  }

 private:
  void emit(TokenKind kind, std::string text) { tokens_.push_back({kind, std::move(text), line_}); }

  // Finds the next `{{`, `{%` or `{#` at or after pos_; returns npos when none.
  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  // Applies `-` (strip all trailing whitespace) or lstrip_blocks (strip the tag's own line indentation).
  std::string strip_text(std::string text, char sign, bool is_variable) {
    if (sign == '-') {
      size_t end = text.size();
      while (size_t n = space_len_before(text, end)) end -= n;
      pending_newlines_ = count_newlines(text, end, text.size());
      text.resize(end);
    } else if (sign != '+' && !is_variable) {
      size_t l_pos = text.rfind('\n');
      l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
      if (l_pos > 0 || line_starting_) {
        bool all_ws = true;
        for (size_t i = l_pos; i < text.size() && all_ws;) {
          size_t n = space_len_at(text, i);
          all_ws = n > 0;
          i += n;
        }
        if (all_ws) text.resize(l_pos);
      }
    }
    return text;
  }

  void emit_data(const std::string& text) {
    if (!text.empty()) emit(TokenKind::kData, text);
    line_ += count_newlines(text, 0, text.size()) + pending_newlines_;
    pending_newlines_ = 0;
  }

  // Consumes a block end after `%}`: `-%}` strips following whitespace; plain `%}` eats one newline.
  void consume_block_suffix(char sign) {
    if (sign == '-') {
      while (size_t n = space_len_at(src_, pos_)) {
        line_ += src_[pos_] == '\n';
        pos_ += n;
      }
    } else if (sign != '+' && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
    }
  }

  bool try_raw(size_t tag, char sign, const std::string& text) {
    size_t p = tag + 2 + (sign ? 1 : 0);
    while (p < src_.size() && is_ws(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_name_char(src_[p + 3]))) return false;
    p += 3;
    while (p < src_.size() && is_ws(src_[p])) ++p;
    bool strip_after = false;
    if (src_.compare(p, 3, "-%}") == 0) {
      strip_after = true;
      p += 3;
    } else if (src_.compare(p, 2, "%}") == 0) {
      p += 2;
    } else {
      return false;
    }
    emit_data(strip_text(text, sign, false));
    line_ += count_newlines(src_, tag, p);
    if (strip_after) {
      while (size_t n = space_len_at(src_, p)) {
        line_ += src_[p] == '\n';
        p += n;
      }
    }
    // Body runs to the next {% endraw %}.
    for (size_t q = src_.find("{%", p); q != std::string::npos; q = src_.find("{%", q + 1)) {
      size_t r = q + 2;
      char end_sign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) end_sign = src_[r++];
      while (r < src_.size() && is_ws(src_[r])) ++r;
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < src_.size() && is_ws(src_[r])) ++r;
      char close_sign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) close_sign = src_[r++];
      if (src_.compare(r, 2, "%}") != 0) continue;
      line_starting_ = false;
      std::string body = strip_text(src_.substr(p, q - p), end_sign, false);
      emit_data(body);
      line_ += count_newlines(src_, q, r + 2);
      pos_ = r + 2;
      consume_block_suffix(close_sign);
      line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
      return true;
    }
    throw TemplateError("Missing end of raw directive", line_);
  }

  void lex_root() {
    size_t tag = find_tag(pos_);
    if (tag == std::string::npos) {
      emit_data(src_.substr(pos_));
      pos_ = src_.size();
      return;
    }
    char kind = src_[tag + 1];
    char sign = 0;
    if (tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+')) sign = src_[tag + 2];
    std::string text = src_.substr(pos_, tag - pos_);
    if (kind == '%' && try_raw(tag, sign, text)) return;
    emit_data(strip_text(std::move(text), sign, kind == '{'));
    pos_ = tag + 2 + (sign ? 1 : 0);
    line_starting_ = false;
    if (kind == '#') {
      lex_comment();
    } else {
      lex_tag(kind == '{');
    }
  }

  void lex_comment() {
    size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) throw TemplateError("Missing end of comment tag", line_);
    char sign = end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    line_ += count_newlines(src_, pos_, end);
    pos_ = end + 2;
    consume_block_suffix(sign);
    line_starting_ = src_[pos_ - 1] == '\n';
  }

  void lex_tag(bool is_variable) {
    emit(is_variable ? TokenKind::kVarBegin : TokenKind::kBlockBegin, "");
    std::vector<char> balance;
    while (true) {
      if (pos_ >= src_.size())
        throw TemplateError(
            is_variable ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'",
            line_);
      if (balance.empty() && try_tag_end(is_variable)) return;
      char c = src_[pos_];
      if (is_ws(c)) {
        line_ += c == '\n';
        ++pos_;
      } else if (is_digit(c)) {
        lex_number();
      } else if (is_name_start(c)) {
        size_t b = pos_;
        while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
        emit(TokenKind::kName, src_.substr(b, pos_ - b));
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        lex_operator(balance);
      }
    }
  }

  bool try_tag_end(bool is_variable) {
    const char* close = is_variable ? "}}" : "%}";
    char sign = 0;
    size_t p = pos_;
    if (src_[p] == '-' || (!is_variable && src_[p] == '+')) {
      if (src_.compare(p + 1, 2, close) != 0) return false;
      sign = src_[p];
      ++p;
    } else if (src_.compare(p, 2, close) != 0) {
      return false;
    }
    emit(is_variable ? TokenKind::kVarEnd : TokenKind::kBlockEnd, "");
    pos_ = p + 2;
    if (is_variable) {
      if (sign == '-') consume_block_suffix('-');
    } else {
      consume_block_suffix(sign);
    }
    line_starting_ = src_[pos_ - 1] == '\n';
    return true;
  }

  void lex_number() {
    size_t b = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() &&
             (is_digit(src_[pos_]) || (src_[pos_] == '_' && pos_ + 1 < src_.size() && is_digit(src_[pos_ + 1]))))
        ++pos_;
    };
    digits();
    bool is_float = false;
    // A float needs digits after the dot; `x.0.1`-style attribute chains never reach here (the lookbehind).
    bool after_dot = b > 0 && src_[b - 1] == '.';
    if (!after_dot && pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
      ++pos_;
      digits();
      is_float = true;
    }
    if (!after_dot && pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t save = pos_++;
      if (pos_ < src_.size() && (src_[pos_] == '+' || src_[pos_] == '-')) ++pos_;
      if (pos_ < src_.size() && is_digit(src_[pos_])) {
        digits();
        is_float = true;
      } else {
        pos_ = save;
      }
    }
    std::string text;
    for (size_t i = b; i < pos_; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    emit(is_float ? TokenKind::kFloat : TokenKind::kInt, text);
  }

  void lex_string(char quote) {
    size_t b = ++pos_;
    while (pos_ < src_.size() && src_[pos_] != quote) {
      if (src_[pos_] == '\\') ++pos_;
      ++pos_;
    }
    if (pos_ >= src_.size()) throw TemplateError("unexpected end of string literal", line_);
    int start_line = line_;
    std::string body = src_.substr(b, pos_ - b);
    ++pos_;
    tokens_.push_back({TokenKind::kString, unescape(body, start_line), start_line});
    line_ += count_newlines(body, 0, body.size());
  }

  void lex_operator(std::vector<char>& balance) {
    static const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                 "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};
    for (const char* op : kOps) {
      size_t n = std::strlen(op);
      if (src_.compare(pos_, n, op) != 0) continue;
      char c = op[0];
      if (n == 1 && (c == '(' || c == '[' || c == '{')) {
        balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      } else if (n == 1 && (c == ')' || c == ']' || c == '}')) {
        if (balance.empty()) throw TemplateError(std::string("unexpected '") + c + "'", line_);
        if (balance.back() != c) {
          throw TemplateError(std::string("unexpected '") + c + "', expected '" + balance.back() + "'", line_);
        }
        balance.pop_back();
      }
      emit(TokenKind::kOperator, op);
      pos_ += n;
      return;
    }
    throw TemplateError(std::string("unexpected char '") + src_[pos_] + "'", line_);
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  int pending_newlines_ = 0;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) {
  // jinja2 normalises \r\n and \r to \n and drops one trailing newline (keep_trailing_newline=False).
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src += source[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src)).run();
}

}  // namespace llmserve::jinja

// PCRE2 wrapper: compiled once with JIT, matched with per-thread match data so one Regex serves all threads.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "tokenizer/unicode.h"

namespace llmserve {
namespace {

// Oniguruma / Rust-regex Unicode sets. \s: White_Space; \w: Alphabetic, marks, decimal digits, connector
// punctuation, join controls (UTS #18);
// \d: decimal digits. PCRE2's own \s/\w differ (e.g. U+180E, marks), hence the rewrite.
constexpr std::string_view kSpaceSet =
    "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}";
constexpr std::string_view kWordSet = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200c}\\x{200d}";
constexpr std::string_view kDigitSet = "\\p{Nd}";

std::string_view set_for(char c) {
  switch (c) {
    case 's':
    case 'S':
      return kSpaceSet;
    case 'w':
    case 'W':
      return kWordSet;
    default:
      return kDigitSet;
  }
}

}  // namespace

std::string translate_oniguruma_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[i + 1];
      bool shorthand = e == 's' || e == 'S' || e == 'w' || e == 'W' || e == 'd' || e == 'D';
      bool negated = e == 'S' || e == 'W' || e == 'D';
      if (shorthand && (!in_class || !negated)) {
        if (in_class) {
          out.append(set_for(e));
        } else {
          out.append(negated ? "[^" : "[");
          out.append(set_for(e));
          out.push_back(']');
        }
        ++i;
        continue;
      }
      out.push_back(c);
      out.push_back(e);
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

StatusOr<std::unique_ptr<Regex>> Regex::compile(std::string_view pattern) {
  std::string translated = translate_oniguruma_pattern(pattern);
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &err_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    return invalid_argument("bad regex '" + std::string(pattern) + "': " + reinterpret_cast<char*>(buf) +
                            " at offset " + std::to_string(err_offset));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // best effort: falls back to the interpreter
  std::unique_ptr<Regex> re(new Regex());
  re->code_ = code;
  return re;
}

StatusOr<std::unique_ptr<Regex>> Regex::literal(std::string_view literal) {
  std::string escaped;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/").find(c) != std::string_view::npos) escaped.push_back('\\');
    escaped.push_back(c);
  }
  // \Q..\E would also work, but explicit escaping keeps the translator out of the way.
  return compile(escaped);
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  struct MatchData {
    pcre2_match_data* md = pcre2_match_data_create(4, nullptr);
    ~MatchData() { pcre2_match_data_free(md); }
  };
  thread_local MatchData t_md;
  std::vector<std::pair<size_t, size_t>> out;
  auto* code = static_cast<pcre2_code*>(code_);
  auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  size_t last_end = static_cast<size_t>(-1);
  while (pos <= text.size()) {
    int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, t_md.md, nullptr);
    if (rc < 0) break;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(t_md.md);
    size_t s = ov[0], e = ov[1];
    if (s == e && s == last_end) {
      // Empty match right after the previous match: skip one character and search again.
      if (pos >= text.size()) break;
      pos += unicode::utf8_length(static_cast<unsigned char>(text[pos]));
      continue;
    }
    out.emplace_back(s, e);
    last_end = e;
    pos = e;
  }
  return out;
}

}  // namespace llmserve

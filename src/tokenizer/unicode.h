// UTF-8 helpers and Unicode character properties/normalization for the tokenizer (ICU underneath).
// Predicates mirror the Rust `char` methods HF `tokenizers` uses, so splits match it code point for code point.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace llmserve::unicode {

// Decodes the code point at text[*pos] and advances *pos. Invalid bytes decode as U+FFFD, one byte each
// (inputs are validated at the API boundary, so this only guards internal misuse).
char32_t next_code_point(std::string_view text, size_t* pos);
// Byte length of the UTF-8 sequence starting with lead byte `b` (1 for invalid lead bytes).
inline size_t utf8_length(unsigned char b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : b < 0xF8 ? 4 : 1; }
void append_utf8(char32_t cp, std::string* out);
// True if `text` is well-formed UTF-8.
bool is_valid_utf8(std::string_view text);
// Decodes bytes as UTF-8, replacing each maximal ill-formed subpart by U+FFFD (Rust's from_utf8_lossy rule).
std::string utf8_lossy(std::string_view bytes);
// Byte length of the longest prefix of `bytes` that ends on a complete code point; the rest is an
// incomplete (but so far valid) sequence that more bytes may complete.
size_t complete_utf8_prefix(std::string_view bytes);

// Rust char::is_whitespace (White_Space property).
bool is_whitespace(char32_t c);
// Rust char::is_alphanumeric (Alphabetic or Numeric general categories Nd/Nl/No).
bool is_alphanumeric(char32_t c);
// Rust regex \w: Alphabetic, marks, Nd, Pc, join controls.
bool is_word_char(char32_t c);
// Rust char::is_numeric (Nd, Nl, No).
bool is_numeric(char32_t c);
// ASCII punctuation or Unicode P* categories (HF `is_punc`).
bool is_punctuation(char32_t c);
// General category helpers used by BertNormalizer / StripAccents.
bool is_control_like(char32_t c);     // Cc, Cf, Cn, Co
bool is_mark_nonspacing(char32_t c);  // Mn
bool is_combining_mark(char32_t c);   // Mn, Mc, Me
bool is_chinese_char(char32_t c);     // the CJK blocks BERT pads with spaces

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
std::string normalize(std::string_view text, NormalForm form);
// Per-code-point full lowercase mapping (Rust char::to_lowercase; no context-dependent final sigma).
std::string to_lower(std::string_view text);

}  // namespace llmserve::unicode

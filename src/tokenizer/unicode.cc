// UTF-8 handling and ICU-backed character properties; ASCII inputs take fast paths that skip ICU entirely.
#include "tokenizer/unicode.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <vector>

namespace llmserve::unicode {

char32_t next_code_point(std::string_view text, size_t* pos) {
  size_t i = *pos;
  unsigned char b = static_cast<unsigned char>(text[i]);
  size_t len = utf8_length(b);
  if (len == 1 || i + len > text.size()) {
    *pos = i + 1;
    return b < 0x80 ? b : 0xFFFD;
  }
  char32_t cp = len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
  *pos = i + len;
  return cp;
}

void append_utf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Length of the well-formed sequence at bytes[i], or 0 with *bad_len = the maximal ill-formed subpart
// length (>= 1), or 0 with *bad_len = 0 when the sequence is a valid but truncated prefix at the end.
size_t scan_sequence(std::string_view bytes, size_t i, size_t* bad_len) {
  unsigned char b = static_cast<unsigned char>(bytes[i]);
  if (b < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    need = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    *bad_len = 1;
    return 0;
  }
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= bytes.size()) {
      *bad_len = 0;  // truncated at the end
      return 0;
    }
    unsigned char c = static_cast<unsigned char>(bytes[i + k]);
    unsigned char klo = k == 1 ? lo : 0x80, khi = k == 1 ? hi : 0xBF;
    if (c < klo || c > khi) {
      *bad_len = k;
      return 0;
    }
  }
  return need;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  size_t i = 0, bad = 0;
  while (i < text.size()) {
    size_t n = scan_sequence(text, i, &bad);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0, bad = 0;
  while (i < bytes.size()) {
    size_t n = scan_sequence(bytes, i, &bad);
    if (n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      i = bad == 0 ? bytes.size() : i + bad;
    }
  }
  return out;
}

size_t complete_utf8_prefix(std::string_view bytes) {
  size_t i = 0, bad = 0;
  while (i < bytes.size()) {
    size_t n = scan_sequence(bytes, i, &bad);
    if (n == 0 && bad == 0) return i;
    i += n > 0 ? n : bad;
  }
  return bytes.size();
}

bool is_whitespace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE);
}

bool is_numeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

bool is_alphanumeric(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_ALPHABETIC) || is_numeric(c);
}

bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || c == '_';
  if (c == 0x200C || c == 0x200D || u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_ALPHABETIC)) return true;
  int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_NON_SPACING_MARK || t == U_COMBINING_SPACING_MARK || t == U_ENCLOSING_MARK ||
         t == U_DECIMAL_DIGIT_NUMBER || t == U_CONNECTOR_PUNCTUATION;
}

bool is_punctuation(char32_t c) {
  if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_CONNECTOR_PUNCTUATION || t == U_DASH_PUNCTUATION || t == U_START_PUNCTUATION ||
         t == U_END_PUNCTUATION || t == U_INITIAL_PUNCTUATION || t == U_FINAL_PUNCTUATION || t == U_OTHER_PUNCTUATION;
}

bool is_control_like(char32_t c) {
  int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_CONTROL_CHAR || t == U_FORMAT_CHAR || t == U_UNASSIGNED || t == U_PRIVATE_USE_CHAR;
}

bool is_mark_nonspacing(char32_t c) { return c >= 0x80 && u_charType(static_cast<UChar32>(c)) == U_NON_SPACING_MARK; }

bool is_combining_mark(char32_t c) {
  if (c < 0x80) return false;
  int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_NON_SPACING_MARK || t == U_COMBINING_SPACING_MARK || t == U_ENCLOSING_MARK;
}

bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

namespace {

bool is_ascii(std::string_view text) {
  for (char ch : text)
    if (static_cast<unsigned char>(ch) >= 0x80) return false;
  return true;
}

std::u16string to_utf16(std::string_view text) {
  std::u16string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    char32_t cp = next_code_point(text, &pos);
    if (cp >= 0x10000) {
      cp -= 0x10000;
      out.push_back(static_cast<char16_t>(0xD800 + (cp >> 10)));
      out.push_back(static_cast<char16_t>(0xDC00 + (cp & 0x3FF)));
    } else {
      out.push_back(static_cast<char16_t>(cp));
    }
  }
  return out;
}

void append_utf16(const char16_t* s, int32_t n, std::string* out) {
  for (int32_t i = 0; i < n; ++i) {
    char32_t cp = s[i];
    if (cp >= 0xD800 && cp < 0xDC00 && i + 1 < n) {
      cp = 0x10000 + ((cp - 0xD800) << 10) + (s[i + 1] - 0xDC00);
      ++i;
    }
    append_utf8(cp, out);
  }
}

}  // namespace

std::string normalize(std::string_view text, NormalForm form) {
  if (is_ascii(text)) return std::string(text);
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* norm = nullptr;
  switch (form) {
    case NormalForm::kNFC:
      norm = unorm2_getNFCInstance(&err);
      break;
    case NormalForm::kNFD:
      norm = unorm2_getNFDInstance(&err);
      break;
    case NormalForm::kNFKC:
      norm = unorm2_getNFKCInstance(&err);
      break;
    case NormalForm::kNFKD:
      norm = unorm2_getNFKDInstance(&err);
      break;
  }
  if (U_FAILURE(err)) return std::string(text);
  std::u16string src = to_utf16(text);
  std::vector<UChar> dst(src.size() * 4 + 16);
  int32_t n = unorm2_normalize(norm, reinterpret_cast<const UChar*>(src.data()), static_cast<int32_t>(src.size()),
                               dst.data(), static_cast<int32_t>(dst.size()), &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) {
    err = U_ZERO_ERROR;
    dst.resize(static_cast<size_t>(n) + 1);
    n = unorm2_normalize(norm, reinterpret_cast<const UChar*>(src.data()), static_cast<int32_t>(src.size()), dst.data(),
                         static_cast<int32_t>(dst.size()), &err);
  }
  if (U_FAILURE(err)) return std::string(text);
  std::string out;
  out.reserve(static_cast<size_t>(n));
  append_utf16(reinterpret_cast<const char16_t*>(dst.data()), n, &out);
  return out;
}

std::string to_lower(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    unsigned char b = static_cast<unsigned char>(text[pos]);
    if (b < 0x80) {
      out.push_back(static_cast<char>(b >= 'A' && b <= 'Z' ? b + 32 : b));
      ++pos;
      continue;
    }
    char32_t cp = next_code_point(text, &pos);
    // Lowercasing one code point at a time keeps it context-free, as Rust's char::to_lowercase is.
    UChar src[2];
    int32_t src_len = 0;
    if (cp >= 0x10000) {
      src[0] = static_cast<UChar>(0xD800 + ((cp - 0x10000) >> 10));
      src[1] = static_cast<UChar>(0xDC00 + ((cp - 0x10000) & 0x3FF));
      src_len = 2;
    } else {
      src[0] = static_cast<UChar>(cp);
      src_len = 1;
    }
    UChar dst[8];
    UErrorCode err = U_ZERO_ERROR;
    int32_t n = u_strToLower(dst, 8, src, src_len, "", &err);
    if (U_FAILURE(err)) {
      append_utf8(cp, &out);
    } else {
      append_utf16(reinterpret_cast<const char16_t*>(dst), n, &out);
    }
  }
  return out;
}

}  // namespace llmserve::unicode

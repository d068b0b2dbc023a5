// Precompiled normalizer (SentencePiece's compiled normalization rules, as in T5/ALBERT tokenizer.json files):
// a darts-clone double-array trie over UTF-8 keys plus a blob of NUL-terminated replacements, applied per
// extended grapheme cluster (whole cluster first when shorter than 6 bytes, else code point by code point).
#include <unicode/ubrk.h>
#include <unicode/utext.h>

#include <cstring>
#include <vector>

#include "tokenizer/normalizer.h"

namespace llmserve {
namespace {

StatusOr<std::string> base64_decode(const std::string& in, const std::string& path) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    int v = value(c);
    if (v < 0) return json_util::field_error(path, "invalid base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

class PrecompiledNormalizer : public Normalizer {
 public:
  Status load(const std::string& blob, const std::string& path) {
    if (blob.size() < 4) return json_util::field_error(path, "charsmap too short");
    uint32_t trie_bytes = 0;
    for (int i = 3; i >= 0; --i) trie_bytes = (trie_bytes << 8) | static_cast<unsigned char>(blob[i]);
    if (trie_bytes % 4 != 0 || 4 + static_cast<size_t>(trie_bytes) > blob.size()) {
      return json_util::field_error(path, "charsmap trie size out of range");
    }
    units_.resize(trie_bytes / 4);
    for (size_t i = 0; i < units_.size(); ++i) {
      const unsigned char* p = reinterpret_cast<const unsigned char*>(blob.data()) + 4 + 4 * i;
      units_[i] = p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
    }
    normalized_ = blob.substr(4 + trie_bytes);
    if (units_.empty()) return json_util::field_error(path, "charsmap trie is empty");
    return ok_status();
  }

  void normalize(std::string& text) const override {
    if (text.empty()) return;
    std::string out;
    out.reserve(text.size());
    UErrorCode err = U_ZERO_ERROR;
    UText* ut = utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &err);
    UBreakIterator* bi = ubrk_open(UBRK_CHARACTER, "", nullptr, 0, &err);
    if (U_SUCCESS(err)) ubrk_setUText(bi, ut, &err);
    if (U_FAILURE(err)) {
      ubrk_close(bi);
      utext_close(ut);
      return;
    }
    int32_t begin = ubrk_first(bi);
    for (int32_t end = ubrk_next(bi); end != UBRK_DONE; begin = end, end = ubrk_next(bi)) {
      std::string_view grapheme(text.data() + begin, static_cast<size_t>(end - begin));
      std::string_view norm;
      if (grapheme.size() < 6 && transform(grapheme, &norm)) {
        out.append(norm);
        continue;
      }
      for (size_t i = 0; i < grapheme.size();) {
        unsigned char b = static_cast<unsigned char>(grapheme[i]);
        size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        std::string_view part = grapheme.substr(i, len);
        out.append(transform(part, &norm) ? norm : part);
        i += len;
      }
    }
    ubrk_close(bi);
    utext_close(ut);
    text = std::move(out);
  }

 private:
  // The replacement of the shortest trie key that prefixes `chunk` (as spm_precompiled does), if any.
  bool transform(std::string_view chunk, std::string_view* norm) const {
    auto offset = [](uint32_t u) -> size_t { return (u >> 10) << ((u & (1u << 9)) >> 6); };
    size_t pos = offset(units_[0]);
    for (unsigned char c : chunk) {
      pos ^= c;
      if (pos >= units_.size()) return false;
      uint32_t unit = units_[pos];
      if ((unit & ((1u << 31) | 0xFF)) != c) return false;
      pos ^= offset(unit);
      if (pos >= units_.size()) return false;
      if ((unit >> 8) & 1) {
        size_t index = units_[pos] & ((1u << 31) - 1);
        if (index > normalized_.size()) return false;
        size_t stop = normalized_.find('\0', index);
        *norm = std::string_view(normalized_)
                    .substr(index, (stop == std::string::npos ? normalized_.size() : stop) - index);
        return true;
      }
    }
    return false;
  }

  std::vector<uint32_t> units_;
  std::string normalized_;
};

}  // namespace

StatusOr<std::unique_ptr<Normalizer>> make_precompiled_normalizer(const json_util::Json& j, const std::string& path) {
  ASSIGN_OR_RETURN(std::string b64, json_util::get_string(j, "precompiled_charsmap", path));
  ASSIGN_OR_RETURN(std::string blob, base64_decode(b64, path + ".precompiled_charsmap"));
  auto n = std::make_unique<PrecompiledNormalizer>();
  RETURN_IF_ERROR(n->load(blob, path + ".precompiled_charsmap"));
  return std::unique_ptr<Normalizer>(std::move(n));
}

}  // namespace llmserve

// Token bytes from a Tokenizer (byte-level BPE, SentencePiece with byte fallback, or plain text), checked against
// the tokenizer's own decode() on a sample so a decoder we misread is an error at startup, not a wrong mask; and
// from tiktoken files (base64 token, rank).
#include "structured/vocabulary.h"

#include <fstream>
#include <sstream>

#include "tokenizer/tokenizer.h"

namespace llmserve::structured {

namespace {

// GPT-2's byte <-> printable-character table used by byte-level BPE: code point -> byte, -1 if none.
std::vector<int> byte_level_inverse() {
  std::vector<int> inv(512, -1);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    int cp = printable ? b : 256 + n++;
    inv[cp] = b;
  }
  return inv;
}

// Decodes UTF-8 into code points; false on invalid input.
bool code_points(const std::string& s, std::vector<uint32_t>& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < len; ++k) {
      unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 2) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    out.push_back(cp);
    i += len;
  }
  return true;
}

bool valid_utf8(const std::string& s) {
  std::vector<uint32_t> cps;
  return code_points(s, cps);
}

enum class Style { kByteLevel, kSentencePiece, kPlain };

}  // namespace

StatusOr<Vocabulary> Vocabulary::from_tokenizer(const Tokenizer& tok) {
  const int32_t n = tok.vocab_size();
  const std::string kMeta = "\xE2\x96\x81";  // U+2581 '▁'
  Style style = Style::kPlain;
  bool has_meta = false, has_wordpiece = false;
  for (int32_t id = 0; id < n; ++id) {
    auto t = tok.id_to_token(id);
    if (!t || tok.is_added(id)) continue;
    has_meta |= t->find(kMeta) != std::string::npos;
    has_wordpiece |= t->size() > 2 && t->compare(0, 2, "##") == 0;
  }
  if (auto g = tok.token_to_id("\xC4\xA0"); g && tok.decode(std::vector<int32_t>{*g}) == " ") {  // 'Ġ' decodes to ' '
    style = Style::kByteLevel;
  } else if (has_meta) {
    style = Style::kSentencePiece;
  } else if (has_wordpiece) {
    return unimplemented("constrained decoding: WordPiece vocabularies ('##' continuation tokens) are not supported");
  }
  static const std::vector<int> kInverse = byte_level_inverse();
  Vocabulary v;
  v.token_bytes.resize(n);
  std::vector<uint32_t> cps;
  for (int32_t id = 0; id < n; ++id) {
    auto t = tok.id_to_token(id);
    if (!t || tok.is_added(id) || tok.is_special(id)) continue;
    std::string bytes;
    if (style == Style::kByteLevel) {
      if (!code_points(*t, cps)) continue;
      bool ok = true;
      for (uint32_t cp : cps) {
        if (cp >= kInverse.size() || kInverse[cp] < 0) {
          ok = false;
          break;
        }
        bytes.push_back(static_cast<char>(kInverse[cp]));
      }
      if (!ok) continue;
    } else if (style == Style::kSentencePiece) {
      if (tok.is_byte_fallback_token(id)) {
        bytes.push_back(static_cast<char>(std::stoi(t->substr(3, 2), nullptr, 16)));
      } else {
        for (size_t p = 0; p < t->size();) {
          if (t->compare(p, kMeta.size(), kMeta) == 0) {
            bytes.push_back(' ');
            p += kMeta.size();
          } else {
            bytes.push_back((*t)[p++]);
          }
        }
      }
    } else {
      bytes = *t;
    }
    if (!bytes.empty()) v.token_bytes[id] = std::move(bytes);
  }
  // Check our reading against decode() on a sample: decode([anchor, id]) must be decode([anchor]) + bytes (the
  // anchor keeps decoders that strip a leading space off the first token from hiding it).
  std::optional<int32_t> anchor;
  for (int32_t id = 0; id < n && !anchor; ++id) {
    const auto& b = v.token_bytes[id];
    if (b && b->size() == 1 && std::isalpha(static_cast<unsigned char>((*b)[0]))) anchor = id;
  }
  if (!anchor) return unimplemented("constrained decoding: the vocabulary has no single-letter token to probe with");
  std::string anchor_text = tok.decode(std::vector<int32_t>{*anchor});
  int32_t stride = std::max<int32_t>(1, n / 4000);
  for (int32_t id = 0; id < n; id += stride) {
    const auto& b = v.token_bytes[id];
    if (!b || !valid_utf8(*b)) continue;
    std::string got = tok.decode(std::vector<int32_t>{*anchor, id});
    if (got != anchor_text + *b) {
      return unimplemented("constrained decoding: cannot tell the bytes of token " + std::to_string(id) + " ('" +
                           *tok.id_to_token(id) + "'): decode gives '" +
                           got.substr(std::min(got.size(), anchor_text.size())) + "', expected '" + *b + "'");
    }
  }
  return v;
}

StatusOr<Vocabulary> Vocabulary::from_tiktoken_file(const std::string& path, int32_t num_special_tokens) {
  std::ifstream in(path);
  if (!in) return not_found("cannot open tiktoken file " + path);
  auto b64 = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  Vocabulary v;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    std::istringstream ss(line);
    std::string token;
    int64_t rank = -1;
    ss >> token >> rank;
    if (rank < 0 || rank > 10'000'000) return invalid_argument(path + ":" + std::to_string(line_no) + ": bad rank");
    std::string bytes;
    uint32_t acc = 0;
    int bits = 0;
    for (char c : token) {
      if (c == '=') break;
      int d = b64(c);
      if (d < 0) return invalid_argument(path + ":" + std::to_string(line_no) + ": bad base64");
      acc = (acc << 6) | static_cast<uint32_t>(d);
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        bytes.push_back(static_cast<char>((acc >> bits) & 0xFF));
      }
    }
    if (static_cast<int64_t>(v.token_bytes.size()) <= rank) v.token_bytes.resize(rank + 1);
    v.token_bytes[rank] = std::move(bytes);
  }
  if (v.token_bytes.empty()) return invalid_argument(path + ": no tokens");
  v.token_bytes.resize(v.token_bytes.size() + num_special_tokens);
  return v;
}

}  // namespace llmserve::structured

// Decoder implementations, each matching the HF component's per-token or whole-list behaviour.
#include "tokenizer/decoder.h"

#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"

namespace llmserve {
namespace {

using json_util::Json;

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t prev = 0;
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, prev)) {
    out.append(s, prev, pos - prev);
    out.append(to);
    prev = pos + from.size();
  }
  if (prev == 0) return;
  out.append(s, prev, std::string::npos);
  s = std::move(out);
}

class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      size_t start = bytes.size();
      size_t pos = 0;
      bool ok = true;
      while (pos < t.size()) {
        int b = byte_level_byte(unicode::next_code_point(t, &pos));
        if (b < 0) {
          ok = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
      }
      if (!ok) {
        // A token with characters outside the byte alphabet (an added token) contributes its raw bytes.
        bytes.resize(start);
        bytes.append(t);
      }
    }
    tokens.assign(1, unicode::utf8_lossy(bytes));
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) replace_all(tokens[i], replacement_, i == 0 && strip_first_ ? "" : " ");
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

bool parse_byte_token(const std::string& t, unsigned char* byte) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return false;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return false;
  *byte = static_cast<unsigned char>(hi * 16 + lo);
  return true;
}

class ByteFallbackDecoder : public Decoder {
 public:
  bool has_byte_fallback() const override { return true; }
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (unicode::is_valid_utf8(pending)) {
        out.push_back(pending);
      } else {
        // An invalid run becomes one U+FFFD per byte, as in HF.
        for (size_t i = 0; i < pending.size(); ++i) out.push_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (auto& t : tokens) {
      unsigned char b;
      if (parse_byte_token(t, &b)) {
        pending.push_back(static_cast<char>(b));
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all.append(t);
    tokens.assign(1, std::move(all));
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, int64_t start, int64_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::vector<std::pair<size_t, char32_t>> chars;  // (byte offset, code point)
      size_t pos = 0;
      while (pos < t.size()) {
        size_t at = pos;
        chars.push_back({at, unicode::next_code_point(t, &pos)});
      }
      size_t start_cut = 0;
      for (size_t i = 0; i < chars.size() && static_cast<int64_t>(i) < start_; ++i) {
        if (chars[i].second != content_) break;
        start_cut = i + 1;
      }
      size_t stop_cut = chars.size();
      for (int64_t i = 0; i < stop_ && static_cast<size_t>(i) < chars.size(); ++i) {
        size_t index = chars.size() - static_cast<size_t>(i) - 1;
        if (chars[index].second != content_) break;
        stop_cut = index;
      }
      if (stop_cut <= start_cut) {
        t.clear();
        continue;
      }
      size_t b = start_cut < chars.size() ? chars[start_cut].first : t.size();
      size_t e = stop_cut < chars.size() ? chars[stop_cut].first : t.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  char32_t content_;
  int64_t start_, stop_;
};

class ReplaceDecoder : public Decoder {
 public:
  explicit ReplaceDecoder(Replacement replacement) : replacement_(std::move(replacement)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) replacement_.apply(t);
  }

 private:
  Replacement replacement_;
};

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (!prefix_.empty() && t.compare(0, prefix_.size(), prefix_) == 0) {
          t.erase(0, prefix_.size());
        } else {
          t.insert(0, " ");
        }
      }
      if (cleanup_) cleanup(t);
    }
  }
  static void cleanup(std::string& t) {
    static const std::pair<const char*, const char*> kRules[] = {
        {" .", "."},   {" ?", "?"},           {" !", "!"},   {" ,", ","},     {" ' ", "'"},   {" n't", "n't"},
        {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (auto [from, to] : kRules) replace_all(t, from, to);
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class BpeSuffixDecoder : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) replace_all(tokens[i], suffix_, i + 1 == tokens.size() ? "" : " ");
  }

 private:
  std::string suffix_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }
  bool has_byte_fallback() const override {
    for (const auto& p : parts_)
      if (p->has_byte_fallback()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

StatusOr<std::unique_ptr<Decoder>> make_decoder(const Json& j, const std::string& path) {
  ASSIGN_OR_RETURN(std::string type, json_util::get_string(j, "type", path));
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Metaspace") {
    ASSIGN_OR_RETURN(std::string replacement, json_util::get_string_or(j, "replacement", path, "\u2581"));
    bool strip_first = true;
    if (json_util::find(j, "prepend_scheme") != nullptr) {
      ASSIGN_OR_RETURN(std::string scheme, json_util::get_string(j, "prepend_scheme", path));
      strip_first = scheme != "never";
    } else {
      ASSIGN_OR_RETURN(strip_first, json_util::get_bool_or(j, "add_prefix_space", path, true));
    }
    return std::unique_ptr<Decoder>(new MetaspaceDecoder(std::move(replacement), strip_first));
  }
  if (type == "Strip") {
    ASSIGN_OR_RETURN(std::string content, json_util::get_string(j, "content", path));
    size_t pos = 0;
    if (content.empty()) return json_util::field_error(path + ".content", "expected one character");
    char32_t c = unicode::next_code_point(content, &pos);
    ASSIGN_OR_RETURN(int64_t start, json_util::get_int_or(j, "start", path, 0));
    ASSIGN_OR_RETURN(int64_t stop, json_util::get_int_or(j, "stop", path, 0));
    return std::unique_ptr<Decoder>(new StripDecoder(c, start, stop));
  }
  if (type == "Replace") {
    ASSIGN_OR_RETURN(Replacement replacement, Replacement::parse(j, path));
    return std::unique_ptr<Decoder>(new ReplaceDecoder(std::move(replacement)));
  }
  if (type == "WordPiece") {
    ASSIGN_OR_RETURN(std::string prefix, json_util::get_string_or(j, "prefix", path, "##"));
    ASSIGN_OR_RETURN(bool cleanup, json_util::get_bool_or(j, "cleanup", path, true));
    return std::unique_ptr<Decoder>(new WordPieceDecoder(std::move(prefix), cleanup));
  }
  if (type == "BPEDecoder") {
    ASSIGN_OR_RETURN(std::string suffix, json_util::get_string_or(j, "suffix", path, "</w>"));
    return std::unique_ptr<Decoder>(new BpeSuffixDecoder(std::move(suffix)));
  }
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(auto parts, json_util::make_each<Decoder>(j, "decoders", path, make_decoder));
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(parts)));
  }
  return unimplemented(path + ".type: decoder '" + type + "' is not supported");
}

}  // namespace llmserve

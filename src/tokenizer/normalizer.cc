// Normalizer implementations. Each mirrors the HF component of the same name character for character.
#include "tokenizer/normalizer.h"

#include <vector>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace llmserve {
namespace {

using json_util::Json;

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::NormalForm form) : form_(form) {}
  void normalize(std::string& text) const override { text = unicode::normalize(text, form_); }

 private:
  unicode::NormalForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = unicode::to_lower(text); }
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t pos = begin;
        if (!unicode::is_whitespace(unicode::next_code_point(text, &pos))) break;
        begin = pos;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        size_t pos = start;
        if (!unicode::is_whitespace(unicode::next_code_point(text, &pos))) break;
        end = start;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  explicit ReplaceNormalizer(Replacement replacement) : replacement_(std::move(replacement)) {}
  void normalize(std::string& text) const override { replacement_.apply(text); }

 private:
  Replacement replacement_;
};

class StripAccentsNormalizer : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    std::string out;
    size_t pos = 0;
    while (pos < text.size()) {
      char32_t c = unicode::next_code_point(text, &pos);
      if (!unicode::is_combining_mark(c)) unicode::append_utf8(c, &out);
    }
    text = std::move(out);
  }
};

class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool chinese, bool strip_accents, bool lowercase)
      : clean_text_(clean_text), chinese_(chinese), strip_accents_(strip_accents), lowercase_(lowercase) {}
  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    size_t pos = 0;
    while (pos < text.size()) {
      char32_t c = unicode::next_code_point(text, &pos);
      if (clean_text_) {
        bool ws = c == '\t' || c == '\n' || c == '\r' || unicode::is_whitespace(c);
        if (c == 0 || c == 0xFFFD || (!ws && unicode::is_control_like(c))) continue;
        if (ws) c = ' ';
      }
      if (chinese_ && unicode::is_chinese_char(c)) {
        out.push_back(' ');
        unicode::append_utf8(c, &out);
        out.push_back(' ');
      } else {
        unicode::append_utf8(c, &out);
      }
    }
    if (strip_accents_) {
      std::string nfd = unicode::normalize(out, unicode::NormalForm::kNFD);
      out.clear();
      size_t p = 0;
      while (p < nfd.size()) {
        char32_t c = unicode::next_code_point(nfd, &p);
        if (!unicode::is_mark_nonspacing(c)) unicode::append_utf8(c, &out);
      }
    }
    if (lowercase_) out = unicode::to_lower(out);
    text = std::move(out);
  }

 private:
  bool clean_text_, chinese_, strip_accents_, lowercase_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& text) const override {
    for (const auto& p : parts_) p->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

// Parses {"String": s} / {"Regex": r} pattern objects shared by Replace and Split.
StatusOr<std::unique_ptr<Regex>> make_pattern(const Json& j, const std::string& path, std::string* literal) {
  if (!j.is_object()) return json_util::field_error(path, "expected {\"String\": ...} or {\"Regex\": ...}");
  if (const Json* s = json_util::find(j, "String"); s != nullptr && s->is_string()) {
    *literal = s->get<std::string>();
    return std::unique_ptr<Regex>();
  }
  if (const Json* r = json_util::find(j, "Regex"); r != nullptr && r->is_string()) {
    auto re = Regex::compile(r->get<std::string>());
    if (!re.ok()) return re.status().with_context(path + ".Regex");
    return re;
  }
  return json_util::field_error(path, "expected {\"String\": ...} or {\"Regex\": ...}");
}

StatusOr<Replacement> Replacement::parse(const Json& j, const std::string& path) {
  const Json* pattern = json_util::find(j, "pattern");
  if (pattern == nullptr) return json_util::field_error(path + ".pattern", "missing");
  Replacement r;
  ASSIGN_OR_RETURN(std::unique_ptr<Regex> re, make_pattern(*pattern, path + ".pattern", &r.literal_));
  r.re_ = std::move(re);
  ASSIGN_OR_RETURN(r.content_, json_util::get_string(j, "content", path));
  return r;
}

void Replacement::apply(std::string& text) const {
  if (re_ == nullptr && literal_.empty()) return;
  std::string out;
  size_t prev = 0;
  auto replace = [&](size_t begin, size_t end) {
    out.append(text, prev, begin - prev);
    out.append(content_);
    prev = end;
  };
  if (re_ == nullptr) {
    for (size_t pos = text.find(literal_); pos != std::string::npos; pos = text.find(literal_, prev)) {
      replace(pos, pos + literal_.size());
    }
  } else {
    for (auto [begin, end] : re_->find_all(text)) replace(begin, end);
  }
  out.append(text, prev, std::string::npos);
  text = std::move(out);
}

StatusOr<std::unique_ptr<Normalizer>> make_precompiled_normalizer(const Json& j, const std::string& path);

StatusOr<std::unique_ptr<Normalizer>> make_normalizer(const Json& j, const std::string& path) {
  ASSIGN_OR_RETURN(std::string type, json_util::get_string(j, "type", path));
  if (type == "Precompiled") return make_precompiled_normalizer(j, path);
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormalForm::kNFC));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormalForm::kNFD));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormalForm::kNFKC));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormalForm::kNFKD));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "StripAccents") return std::unique_ptr<Normalizer>(new StripAccentsNormalizer());
  if (type == "Strip") {
    ASSIGN_OR_RETURN(bool left, json_util::get_bool_or(j, "strip_left", path, true));
    ASSIGN_OR_RETURN(bool right, json_util::get_bool_or(j, "strip_right", path, true));
    return std::unique_ptr<Normalizer>(new StripNormalizer(left, right));
  }
  if (type == "Prepend") {
    ASSIGN_OR_RETURN(std::string prepend, json_util::get_string(j, "prepend", path));
    return std::unique_ptr<Normalizer>(new PrependNormalizer(std::move(prepend)));
  }
  if (type == "Replace") {
    ASSIGN_OR_RETURN(Replacement replacement, Replacement::parse(j, path));
    return std::unique_ptr<Normalizer>(new ReplaceNormalizer(std::move(replacement)));
  }
  if (type == "BertNormalizer") {
    ASSIGN_OR_RETURN(bool clean, json_util::get_bool_or(j, "clean_text", path, true));
    ASSIGN_OR_RETURN(bool chinese, json_util::get_bool_or(j, "handle_chinese_chars", path, true));
    ASSIGN_OR_RETURN(bool lower, json_util::get_bool_or(j, "lowercase", path, true));
    // strip_accents: null means "follow lowercase", as in BERT.
    ASSIGN_OR_RETURN(bool strip, json_util::get_bool_or(j, "strip_accents", path, lower));
    return std::unique_ptr<Normalizer>(new BertNormalizer(clean, chinese, strip, lower));
  }
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(auto parts, json_util::make_each<Normalizer>(j, "normalizers", path, make_normalizer));
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts)));
  }
  return unimplemented(path + ".type: normalizer '" + type + "' is not supported");
}

}  // namespace llmserve

// Unigram (SentencePiece): Viterbi best segmentation by piece log-probabilities; characters no piece covers
// cost min_score - 10 as unk (fused when consecutive), then byte fallback to <0xXX> pieces if enabled.
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tokenizer/model.h"
#include "tokenizer/unicode.h"

namespace llmserve {
namespace {

using json_util::Json;

constexpr double kUnkPenalty = 10.0;

// HF reads scores with serde_json's default float parser: the decimal digits as a u64, converted to f64, then
// one multiplication or division by a power of ten. That can be 1 ulp off the correctly rounded value, and
// Viterbi ties between segmentations with the same pieces hinge on such ulps. The file holds the shortest
// round-trip digits of each score, which std::to_chars regenerates from our (correctly rounded) double.
double serde_json_f64(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  uint64_t significand = 0;
  int exponent = 0;
  bool negative = false, seen_dot = false;
  for (char* p = buf; p < res.ptr; ++p) {
    char c = *p;
    if (c == '-') {
      negative = true;
    } else if (c == '.') {
      seen_dot = true;
    } else if (c >= '0' && c <= '9') {
      significand = significand * 10 + static_cast<uint64_t>(c - '0');
      if (seen_dot) --exponent;
    } else if (c == 'e' || c == 'E') {
      exponent += std::atoi(p + 1);
      break;
    }
  }
  if (exponent < -308 || exponent > 308) return v;
  char pow_text[16];
  std::snprintf(pow_text, sizeof(pow_text), "1e%d", exponent < 0 ? -exponent : exponent);
  double pow10 = std::strtod(pow_text, nullptr);  // correctly rounded, like Rust's literal table
  double f = static_cast<double>(significand);
  f = exponent >= 0 ? f * pow10 : f / pow10;
  return negative ? -f : f;
}

class UnigramModel : public Model {
 public:
  Status load(const Json& j, const std::string& path) {
    const Json* vocab = json_util::find(j, "vocab");
    if (vocab == nullptr || !vocab->is_array()) return json_util::field_error(path + ".vocab", "expected a list");
    scores_.reserve(vocab->size());
    for (size_t i = 0; i < vocab->size(); ++i) {
      const Json& e = (*vocab)[i];
      if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number()) {
        return json_util::field_error(path + ".vocab[" + std::to_string(i) + "]", "expected [piece, score]");
      }
      std::string piece = e[0].get<std::string>();
      max_piece_bytes_ = std::max(max_piece_bytes_, piece.size());
      vocab_.emplace(piece, static_cast<int32_t>(i));  // first occurrence wins
      scores_.push_back(serde_json_f64(e[1].get<double>()));
      min_score_ = std::min(min_score_, scores_.back());
    }
    RETURN_IF_ERROR(index_vocab(path + ".vocab"));
    ASSIGN_OR_RETURN(int64_t unk, json_util::get_int_or(j, "unk_id", path, -1));
    if (unk >= static_cast<int64_t>(scores_.size())) return json_util::field_error(path + ".unk_id", "out of range");
    unk_id_ = static_cast<int32_t>(unk);
    ASSIGN_OR_RETURN(byte_fallback_, json_util::get_bool_or(j, "byte_fallback", path, false));
    fuse_unk_ = true;  // HF always fuses unknown runs for Unigram
    return ok_status();
  }

  void tokenize(std::string_view s, std::vector<int32_t>& out) const override {
    struct Node {
      int32_t id = -1;
      double score = 0;
      int64_t starts_at = -1;
    };
    std::vector<Node> best(s.size() + 1);
    double unk_score = min_score_ - kUnkPenalty;
    size_t start = 0;
    while (start < s.size()) {
      double here = best[start].score;
      size_t mblen = std::min(unicode::utf8_length(static_cast<unsigned char>(s[start])), s.size() - start);
      bool has_single = false;
      size_t limit = std::min(s.size() - start, max_piece_bytes_);
      for (size_t len = 1; len <= limit; ++len) {
        if (start + len < s.size() && (static_cast<unsigned char>(s[start + len]) & 0xC0) == 0x80) continue;
        auto id = token_to_id(s.substr(start, len));
        if (!id) continue;
        Node& target = best[start + len];
        double cand = scores_[*id] + here;
        if (target.starts_at < 0 || cand > target.score) target = {*id, cand, static_cast<int64_t>(start)};
        if (len == mblen) has_single = true;
      }
      if (!has_single) {
        Node& target = best[start + mblen];
        double cand = unk_score + here;
        if (target.starts_at < 0 || cand > target.score) target = {unk_id_, cand, static_cast<int64_t>(start)};
      }
      start += mblen;
    }
    // Backtrack into string pieces, fusing consecutive unks.
    std::vector<std::pair<std::string_view, bool>> pieces;  // (text, is_unk)
    size_t end = s.size();
    while (end > 0) {
      const Node& n = best[end];
      size_t b = static_cast<size_t>(n.starts_at);
      bool is_unk = unk_id_ >= 0 && n.id == unk_id_;
      if (is_unk && fuse_unk_ && !pieces.empty() && pieces.back().second) {
        pieces.back().first = s.substr(b, pieces.back().first.size() + (end - b));
      } else {
        pieces.push_back({s.substr(b, end - b), is_unk});
      }
      end = b;
    }
    for (size_t k = pieces.size(); k-- > 0;) emit(pieces[k].first, out);
  }

 private:
  void emit(std::string_view piece, std::vector<int32_t>& out) const {
    if (auto id = token_to_id(piece)) {
      out.push_back(*id);
      return;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      bool ok = true;
      for (unsigned char b : piece) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", b);
        auto id = token_to_id(name);
        if (!id) {
          ok = false;
          break;
        }
        bytes.push_back(*id);
      }
      if (ok) {
        out.insert(out.end(), bytes.begin(), bytes.end());
        return;
      }
    }
    // HF fails the whole encode when unk_id is missing; we drop the piece instead of failing (documented).
    if (unk_id_ >= 0) out.push_back(unk_id_);
  }

  std::vector<double> scores_;
  double min_score_ = 1e300;
  size_t max_piece_bytes_ = 0;
  int32_t unk_id_ = -1;
  bool byte_fallback_ = false;
  bool fuse_unk_ = true;
};

}  // namespace

StatusOr<std::unique_ptr<Model>> make_unigram_model(const Json& j, const std::string& path) {
  auto model = std::make_unique<UnigramModel>();
  RETURN_IF_ERROR(model->load(j, path));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace llmserve

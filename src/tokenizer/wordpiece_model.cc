// WordPiece (BERT): greedy longest-match-first with a continuing-subword prefix; a word that cannot be
// covered, or is longer than max_input_chars_per_word characters, becomes the single unk token.
#include <string>

#include "tokenizer/model.h"
#include "tokenizer/unicode.h"

namespace llmserve {
namespace {

using json_util::Json;

class WordPieceModel : public Model {
 public:
  Status load(const Json& j, const std::string& path) {
    const Json* vocab = json_util::find(j, "vocab");
    if (vocab == nullptr || !vocab->is_object()) return json_util::field_error(path + ".vocab", "expected an object");
    for (auto it = vocab->begin(); it != vocab->end(); ++it) {
      if (!it->is_number_integer()) return json_util::field_error(path + ".vocab." + it.key(), "expected an integer");
      vocab_[it.key()] = it->get<int32_t>();
    }
    RETURN_IF_ERROR(index_vocab(path + ".vocab"));
    ASSIGN_OR_RETURN(std::string unk, json_util::get_string_or(j, "unk_token", path, "[UNK]"));
    auto unk_id = token_to_id(unk);
    if (!unk_id) return json_util::field_error(path + ".unk_token", "'" + unk + "' is not in the vocabulary");
    unk_id_ = *unk_id;
    ASSIGN_OR_RETURN(prefix_, json_util::get_string_or(j, "continuing_subword_prefix", path, "##"));
    ASSIGN_OR_RETURN(max_chars_, json_util::get_int_or(j, "max_input_chars_per_word", path, 100));
    return ok_status();
  }

  void tokenize(std::string_view word, std::vector<int32_t>& out) const override {
    int64_t num_chars = 0;
    for (unsigned char b : word) num_chars += (b & 0xC0) != 0x80;
    if (num_chars > max_chars_) {
      out.push_back(unk_id_);
      return;
    }
    size_t before = out.size();
    size_t start = 0;
    std::string key;
    while (start < word.size()) {
      size_t end = word.size();
      int32_t found = -1;
      while (start < end) {
        key.clear();
        if (start > 0) key = prefix_;
        key.append(word.substr(start, end - start));
        if (auto id = token_to_id(key)) {
          found = *id;
          break;
        }
        do {
          --end;
        } while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
      }
      if (found < 0) {
        out.resize(before);
        out.push_back(unk_id_);
        return;
      }
      out.push_back(found);
      start = end;
    }
  }

 private:
  int32_t unk_id_ = 0;
  std::string prefix_;
  int64_t max_chars_ = 100;
};

}  // namespace

StatusOr<std::unique_ptr<Model>> make_wordpiece_model(const Json& j, const std::string& path) {
  auto model = std::make_unique<WordPieceModel>();
  RETURN_IF_ERROR(model->load(j, path));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace llmserve

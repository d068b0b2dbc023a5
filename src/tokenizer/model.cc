// Model factory and the shared vocabulary index.
#include "tokenizer/model.h"

namespace llmserve {

StatusOr<std::unique_ptr<Model>> make_bpe_model(const json_util::Json& j, const std::string& path);
StatusOr<std::unique_ptr<Model>> make_wordpiece_model(const json_util::Json& j, const std::string& path);
StatusOr<std::unique_ptr<Model>> make_unigram_model(const json_util::Json& j, const std::string& path);

Status Model::index_vocab(const std::string& path) {
  int64_t max_id = -1;
  for (const auto& [token, id] : vocab_) {
    if (id < 0) return json_util::field_error(path, "negative id for token '" + token + "'");
    max_id = std::max<int64_t>(max_id, id);
  }
  id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  has_id_.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [token, id] : vocab_) {
    id_to_token_[id] = token;
    has_id_[id] = true;
  }
  return ok_status();
}

StatusOr<std::unique_ptr<Model>> make_model(const json_util::Json& j, const std::string& path) {
  if (!j.is_object()) return json_util::field_error(path, "expected an object");
  std::string type;
  if (json_util::find(j, "type") != nullptr) {
    ASSIGN_OR_RETURN(type, json_util::get_string(j, "type", path));
  } else if (json_util::find(j, "merges") != nullptr) {
    type = "BPE";  // very old files omit the type
  }
  if (type == "BPE") return make_bpe_model(j, path);
  if (type == "WordPiece") return make_wordpiece_model(j, path);
  if (type == "Unigram") return make_unigram_model(j, path);
  return unimplemented(path + ".type: model '" + type + "' is not supported");
}

}  // namespace llmserve

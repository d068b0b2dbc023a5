// Tokenization models of HF `tokenizers`: BPE (byte-level and SentencePiece-style with byte fallback),
// WordPiece and Unigram. A model maps one pre-tokenized piece to ids and owns the base vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/json_util.h"

namespace llmserve {

// Hash for string maps that accept string_view lookups without allocating.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of `piece` (non-empty, valid UTF-8) to `out`.
  virtual void tokenize(std::string_view piece, std::vector<int32_t>& out) const = 0;
  std::optional<int32_t> token_to_id(std::string_view token) const {
    auto it = vocab_.find(token);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }
  // nullptr if `id` has no entry in the model vocabulary.
  const std::string* id_to_token(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[id]) return nullptr;
    return &id_to_token_[id];
  }
  // One past the largest id in the vocabulary.
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }

 protected:
  // Fills id_to_token_ from vocab_; InvalidArgument on negative ids.
  Status index_vocab(const std::string& path);
  Vocab vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
};

// Builds the model described by tokenizer.json's "model" object.
StatusOr<std::unique_ptr<Model>> make_model(const json_util::Json& j, const std::string& path);

}  // namespace llmserve

// Tokenizer: HF `tokenizer.json` (plus tokenizer_config.json, special_tokens_map.json, chat_template.jinja,
// generation_config.json) loaded into normalizer -> added tokens -> pre-tokenizer -> model -> post-processor,
// and decoder for the way back. Encode/decode match HF `tokenizers` id for id. Immutable after loading,
// so one instance serves every thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/decoder.h"
#include "tokenizer/model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/transformers_compat.h"

namespace llmserve {

class Tokenizer {
 public:
  // Loads a model directory (tokenizer.json required; tokenizer_config.json, special_tokens_map.json,
  // chat_template.jinja and generation_config.json when present) or a tokenizer.json path. NotFound if
  // tokenizer.json is missing; InvalidArgument naming the file and JSON field for malformed content;
  // Unimplemented naming the component for a kind of normalizer/model/... this library does not support.
  // kTransformers applies what transformers 5's AutoTokenizer changes (the class from tokenizer_config.json and
  // config.json's model_type); kHfTokenizers runs tokenizer.json as the `tokenizers` library does.
  static StatusOr<std::unique_ptr<Tokenizer>> from_dir(const std::string& dir,
                                                       TokenizerPipeline pipeline = TokenizerPipeline::kTransformers);
  // The same from file contents (config may be empty; no config.json).
  static StatusOr<std::unique_ptr<Tokenizer>> from_json(const std::string& tokenizer_json_text,
                                                        const std::string& tokenizer_config_json_text = "",
                                                        TokenizerPipeline pipeline = TokenizerPipeline::kTransformers);

  // Ids of `text`; with add_special_tokens the post-processor adds BOS/EOS/CLS/... Invalid UTF-8 in `text`
  // is first replaced by U+FFFD (HF only accepts valid strings).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // encode() of each text on the global thread pool; result i belongs to texts[i].
  std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string>& texts, bool add_special_tokens) const;
  // Text of `ids`. Ids with no token (negative or past the vocabulary) are skipped, as HF does.
  // skip_special_tokens drops special added tokens. spaces_between_special_tokens=true is HF `tokenizers`'
  // decode; false decodes the runs between added tokens separately and concatenates the added tokens'
  // contents verbatim (no decoder, no separator), as transformers' slow tokenizers do.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false,
                     bool spaces_between_special_tokens = true) const;

  std::optional<std::string> id_to_token(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // One past the largest id of the model vocabulary and the added tokens.
  int32_t vocab_size() const;

  std::optional<int32_t> bos_token_id() const { return bos_id_; }
  std::optional<int32_t> eos_token_id() const { return eos_id_; }
  std::optional<int32_t> pad_token_id() const { return pad_id_; }
  // The EOS id plus generation_config.json's eos_token_id list (deduplicated, in that order).
  std::vector<int32_t> eos_token_ids() const { return eos_ids_; }
  bool is_special(int32_t id) const { return special_ids_.count(id) != 0; }
  // True for an id from the added tokens (special or not): its text is literal, outside the model's vocabulary.
  bool is_added(int32_t id) const { return added_id_to_content_.count(id) != 0; }
  // True for an id whose token is "<0xXX>" when the decoder fuses byte tokens (ByteFallback).
  bool is_byte_fallback_token(int32_t id) const;
  // True if decode() would produce text for `id` (it exists and is not skipped).
  bool contributes(int32_t id, bool skip_special_tokens) const;

  // Chat template source: "default" (or the only one), or a named template; nullopt if none.
  std::optional<std::string> chat_template(std::string_view name = "default") const;
  std::vector<std::string> chat_template_names() const;
  std::string bos_token() const { return bos_token_; }
  std::string eos_token() const { return eos_token_; }
  std::string pad_token() const { return pad_token_; }
  // tokenizer_config.json flags (nullopt when absent).
  std::optional<bool> add_bos_token() const { return add_bos_token_; }
  std::optional<bool> add_eos_token() const { return add_eos_token_; }

 private:
  Tokenizer() = default;
  Status load_tokenizer_json(const json_util::Json& j);
  Status load_config(const json_util::Json& j, const std::string& file, TokenizerPipeline pipeline);
  Status load_special_tokens_map(const std::string& text, const std::string& file);
  void add_generation_eos(const std::string& text);
  void finish_loading();
  const std::string* token_of(int32_t id) const;
  std::string decode_tokens(std::vector<std::string> tokens) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  AddedVocabulary added_;
  std::unordered_map<int32_t, std::string> added_id_to_content_;      // normalized content, as HF decodes it
  std::unordered_map<int32_t, std::string> added_id_to_raw_content_;  // content as written in the file
  Vocab added_content_to_id_;
  std::unordered_set<int32_t> special_ids_;
  bool byte_fallback_decoder_ = false;

  std::string bos_token_, eos_token_, pad_token_;
  std::optional<int32_t> bos_id_, eos_id_, pad_id_;
  std::vector<int32_t> eos_ids_;
  std::optional<bool> add_bos_token_, add_eos_token_;
  std::map<std::string, std::string> chat_templates_;  // name -> source
};

}  // namespace llmserve

// Tokenizer loading (tokenizer.json + side files) and the encode/decode pipelines.
#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/thread_pool.h"
#include "tokenizer/unicode.h"

namespace llmserve {
namespace {

using json_util::Json;

StatusOr<Json> parse_json(const std::string& text, const std::string& file) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(file + ": not valid JSON");
  if (!j.is_object()) return invalid_argument(file + ": expected a JSON object at the top level");
  return j;
}

std::optional<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A special token in tokenizer_config.json / special_tokens_map.json: "text" or {"content": "text", ...}.
std::optional<std::string> token_string(const Json& j, const char* key) {
  const Json* v = json_util::find(j, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (const Json* c = json_util::find(*v, "content"); c != nullptr && c->is_string()) return c->get<std::string>();
  return std::nullopt;
}

// tokenizer.json as the chosen pipeline runs it: transformers' class may rebuild some components.
StatusOr<Json> pipeline_json(const std::string& text, const Json& config, std::string_view model_type,
                             TokenizerPipeline pipeline) {
  ASSIGN_OR_RETURN(Json j, parse_json(text, "tokenizer.json"));
  if (pipeline == TokenizerPipeline::kHfTokenizers) return j;
  return apply_transformers_class(std::move(j), config, transformers_tokenizer_class(config, model_type));
}

}  // namespace

Status Tokenizer::load_tokenizer_json(const Json& j) {
  auto ctx = [](const Status& s) { return s.with_context("tokenizer.json"); };
  const Json* model = json_util::find(j, "model");
  if (model == nullptr) return invalid_argument("tokenizer.json: model: missing");
  auto m = make_model(*model, "model");
  if (!m.ok()) return ctx(m.status());
  model_ = std::move(m).value();
  if (const Json* n = json_util::find(j, "normalizer")) {
    auto r = make_normalizer(*n, "normalizer");
    if (!r.ok()) return ctx(r.status());
    normalizer_ = std::move(r).value();
  }
  if (const Json* p = json_util::find(j, "pre_tokenizer")) {
    auto r = make_pre_tokenizer(*p, "pre_tokenizer");
    if (!r.ok()) return ctx(r.status());
    pre_tokenizer_ = std::move(r).value();
  }
  if (const Json* p = json_util::find(j, "post_processor")) {
    auto r = make_post_processor(*p, "post_processor");
    if (!r.ok()) return ctx(r.status());
    post_processor_ = std::move(r).value();
  }
  if (const Json* d = json_util::find(j, "decoder")) {
    auto r = make_decoder(*d, "decoder");
    if (!r.ok()) return ctx(r.status());
    decoder_ = std::move(r).value();
    byte_fallback_decoder_ = decoder_->has_byte_fallback();
  }
  std::vector<AddedToken> added;
  if (const Json* list = json_util::find(j, "added_tokens")) {
    if (!list->is_array()) return invalid_argument("tokenizer.json: added_tokens: expected a list");
    for (size_t i = 0; i < list->size(); ++i) {
      const Json& t = (*list)[i];
      std::string where = "added_tokens[" + std::to_string(i) + "]";
      AddedToken tok;
      auto content = json_util::get_string(t, "content", where);
      if (!content.ok()) return ctx(content.status());
      tok.content = *content;
      const Json* id = json_util::find(t, "id");
      if (id == nullptr || !id->is_number_integer() || id->get<int64_t>() < 0) {
        return invalid_argument("tokenizer.json: " + where + ".id: expected a non-negative integer");
      }
      tok.id = id->get<int32_t>();
      for (auto [key, field] :
           {std::pair{"special", &tok.special}, std::pair{"lstrip", &tok.lstrip}, std::pair{"rstrip", &tok.rstrip},
            std::pair{"single_word", &tok.single_word}, std::pair{"normalized", &tok.normalized}}) {
        auto v = json_util::get_bool_or(t, key, where, key == std::string_view("normalized") ? !tok.special : false);
        if (!v.ok()) return ctx(v.status());
        *field = *v;
      }
      if (tok.content.empty()) return invalid_argument("tokenizer.json: " + where + ".content: empty");
      added_id_to_content_[tok.id] = tok.content;
      added_content_to_id_[tok.content] = tok.id;
      if (tok.special) special_ids_.insert(tok.id);
      added.push_back(std::move(tok));
    }
  }
  // HF maps a normalized added token's id back to its normalized content (what decode() then sees).
  if (normalizer_ != nullptr) {
    for (auto& tok : added) {
      if (!tok.normalized) continue;
      std::string content = tok.content;
      normalizer_->normalize(content);
      added_id_to_content_[tok.id] = content;
    }
  }
  for (const auto& tok : added) added_id_to_raw_content_[tok.id] = tok.content;
  added_.build(std::move(added), normalizer_.get());
  return ok_status();
}

Status Tokenizer::load_config(const Json& j, const std::string& file, TokenizerPipeline pipeline) {
  if (auto s = token_string(j, "bos_token")) bos_token_ = *s;
  if (auto s = token_string(j, "eos_token")) eos_token_ = *s;
  if (auto s = token_string(j, "pad_token")) pad_token_ = *s;
  auto flag = [&](const char* key) -> StatusOr<std::optional<bool>> {
    const Json* v = json_util::find(j, key);
    if (v == nullptr) return std::optional<bool>();
    if (!v->is_boolean()) return invalid_argument(file + ": " + key + ": expected a boolean");
    return std::optional<bool>(v->get<bool>());
  };
  ASSIGN_OR_RETURN(add_bos_token_, flag("add_bos_token"));
  ASSIGN_OR_RETURN(add_eos_token_, flag("add_eos_token"));
  if (const Json* t = json_util::find(j, "chat_template")) {
    if (t->is_string()) {
      chat_templates_["default"] = t->get<std::string>();
    } else if (t->is_array()) {
      for (size_t i = 0; i < t->size(); ++i) {
        const Json& e = (*t)[i];
        std::string where = "chat_template[" + std::to_string(i) + "]";
        auto name = json_util::get_string(e, "name", where);
        auto body = json_util::get_string(e, "template", where);
        if (!name.ok()) return name.status().with_context(file);
        if (!body.ok()) return body.status().with_context(file);
        chat_templates_[*name] = *body;
      }
    } else {
      return invalid_argument(file + ": chat_template: expected a string or a list of {name, template}");
    }
  }
  // The tokenizers pipeline keeps this library's earlier rule: Llama-family classes rebuild the post-processor
  // from these flags (add_bos_token defaulting to true). transformers 5 drops both flags whenever tokenizer.json
  // exists (PreTrainedTokenizerBase.from_pretrained) and keeps its post-processor, so it never applies them.
  std::string cls;
  if (auto c = token_string(j, "tokenizer_class")) cls = *c;
  bool llama_like = cls == "LlamaTokenizer" || cls == "LlamaTokenizerFast" || cls == "CodeLlamaTokenizer" ||
                    cls == "CodeLlamaTokenizerFast" || cls == "GemmaTokenizer" || cls == "GemmaTokenizerFast";
  if (pipeline == TokenizerPipeline::kHfTokenizers && llama_like && (add_bos_token_ || add_eos_token_)) {
    std::vector<int32_t> prefix, suffix;
    bool add_bos = add_bos_token_.value_or(true), add_eos = add_eos_token_.value_or(false);
    if (add_bos) {
      auto id = token_to_id(bos_token_);
      if (!id) return invalid_argument(file + ": add_bos_token is set but bos_token '" + bos_token_ + "' is unknown");
      prefix.push_back(*id);
    }
    if (add_eos) {
      auto id = token_to_id(eos_token_);
      if (!id) return invalid_argument(file + ": add_eos_token is set but eos_token '" + eos_token_ + "' is unknown");
      suffix.push_back(*id);
    }
    post_processor_ = make_wrap_processor(std::move(prefix), std::move(suffix));
  }
  return ok_status();
}

Status Tokenizer::load_special_tokens_map(const std::string& text, const std::string& file) {
  ASSIGN_OR_RETURN(Json j, parse_json(text, file));
  // Loaded before tokenizer_config.json, whose values take precedence.
  if (auto s = token_string(j, "bos_token")) bos_token_ = *s;
  if (auto s = token_string(j, "eos_token")) eos_token_ = *s;
  if (auto s = token_string(j, "pad_token")) pad_token_ = *s;
  return ok_status();
}

void Tokenizer::add_generation_eos(const std::string& text) {
  Json j = Json::parse(text, nullptr, false);
  const Json* e = j.is_discarded() ? nullptr : json_util::find(j, "eos_token_id");
  if (e == nullptr) return;
  auto add = [&](const Json& v) {
    if (!v.is_number_integer()) return;
    int32_t id = v.get<int32_t>();
    if (std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end()) eos_ids_.push_back(id);
  };
  if (e->is_array()) {
    for (const Json& v : *e) add(v);
  } else {
    add(*e);
  }
}

void Tokenizer::finish_loading() {
  if (!bos_token_.empty()) bos_id_ = token_to_id(bos_token_);
  if (!eos_token_.empty()) eos_id_ = token_to_id(eos_token_);
  if (!pad_token_.empty()) pad_id_ = token_to_id(pad_token_);
  if (eos_id_ && std::find(eos_ids_.begin(), eos_ids_.end(), *eos_id_) == eos_ids_.end()) {
    eos_ids_.insert(eos_ids_.begin(), *eos_id_);
  }
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::from_json(const std::string& tokenizer_json_text,
                                                          const std::string& tokenizer_config_json_text,
                                                          TokenizerPipeline pipeline) {
  Json config = Json::object();
  if (!tokenizer_config_json_text.empty()) {
    ASSIGN_OR_RETURN(config, parse_json(tokenizer_config_json_text, "tokenizer_config.json"));
  }
  ASSIGN_OR_RETURN(Json j, pipeline_json(tokenizer_json_text, config, "", pipeline));
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  RETURN_IF_ERROR(t->load_tokenizer_json(j));
  if (!tokenizer_config_json_text.empty()) RETURN_IF_ERROR(t->load_config(config, "tokenizer_config.json", pipeline));
  t->finish_loading();
  return t;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::from_dir(const std::string& dir_or_file, TokenizerPipeline pipeline) {
  namespace fs = std::filesystem;
  fs::path path(dir_or_file);
  std::error_code ec;
  fs::path dir = fs::is_directory(path, ec) ? path : path.parent_path();
  fs::path json_path = fs::is_directory(path, ec) ? path / "tokenizer.json" : path;
  auto json_text = read_file(json_path);
  if (!json_text) return not_found(json_path.string() + ": cannot read tokenizer.json");
  const std::string config_file = (dir / "tokenizer_config.json").string();
  auto config_text = read_file(config_file);
  Json config = Json::object();
  if (config_text) {
    ASSIGN_OR_RETURN(config, parse_json(*config_text, config_file));
  }
  // AutoTokenizer lets config.json's model_type override the configured class; an unreadable config.json is
  // the model loader's error to report, here it only means "no model_type".
  std::string model_type;
  if (auto text = read_file(dir / "config.json")) {
    Json c = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (auto m = token_string(c, "model_type")) model_type = *m;
  }
  auto j = pipeline_json(*json_text, config, model_type, pipeline);
  if (!j.ok()) return j.status().with_context(json_path.string());
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  RETURN_IF_ERROR(t->load_tokenizer_json(*j).with_context(json_path.string()));
  if (auto text = read_file(dir / "special_tokens_map.json")) {
    RETURN_IF_ERROR(t->load_special_tokens_map(*text, (dir / "special_tokens_map.json").string()));
  }
  if (config_text) RETURN_IF_ERROR(t->load_config(config, config_file, pipeline));
  if (auto text = read_file(dir / "chat_template.jinja")) t->chat_templates_["default"] = *text;
  if (auto text = read_file(dir / "generation_config.json")) t->add_generation_eos(*text);
  t->finish_loading();
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view input, bool add_special_tokens) const {
  std::string repaired;
  if (!unicode::is_valid_utf8(input)) {
    repaired = unicode::utf8_lossy(input);
    input = repaired;
  }
  std::vector<Segment> segments;
  added_.split(input, normalizer_.get(), segments);
  std::vector<int32_t> ids;
  ids.reserve(input.size() / 3 + 4);
  std::vector<PreToken> pieces;
  for (auto& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    pieces.clear();
    pieces.push_back({std::move(seg.text), seg.at_start});
    if (pre_tokenizer_ != nullptr) pre_tokenizer_->pre_tokenize(pieces);
    for (const auto& p : pieces) model_->tokenize(p.text, ids);
  }
  if (add_special_tokens && post_processor_ != nullptr) post_processor_->process(ids);
  return ids;
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(const std::vector<std::string>& texts,
                                                          bool add_special_tokens) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  ThreadPool::global().parallel_for(static_cast<int64_t>(texts.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = encode(texts[i], add_special_tokens);
  });
  return out;
}

const std::string* Tokenizer::token_of(int32_t id) const {
  auto it = added_id_to_content_.find(id);
  if (it != added_id_to_content_.end()) return &it->second;
  return model_->id_to_token(id);
}

bool Tokenizer::contributes(int32_t id, bool skip_special_tokens) const {
  return token_of(id) != nullptr && !(skip_special_tokens && is_special(id));
}

bool Tokenizer::is_byte_fallback_token(int32_t id) const {
  if (!byte_fallback_decoder_) return false;
  const std::string* t = token_of(id);
  return t != nullptr && t->size() == 6 && t->compare(0, 3, "<0x") == 0 && (*t)[5] == '>';
}

std::string Tokenizer::decode_tokens(std::vector<std::string> tokens) const {
  if (decoder_ == nullptr) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out.push_back(' ');
      out.append(tokens[i]);
    }
    return out;
  }
  decoder_->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out.append(t);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens,
                              bool spaces_between_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  if (spaces_between_special_tokens) {
    for (int32_t id : ids) {
      if (contributes(id, skip_special_tokens)) tokens.push_back(*token_of(id));
    }
    return decode_tokens(std::move(tokens));
  }
  std::string out;
  for (int32_t id : ids) {
    if (!contributes(id, skip_special_tokens)) continue;
    if (added_id_to_raw_content_.count(id) != 0) {
      out.append(decode_tokens(std::move(tokens)));
      tokens.clear();
      out.append(added_id_to_raw_content_.at(id));
    } else {
      tokens.push_back(*token_of(id));
    }
  }
  if (!tokens.empty()) out.append(decode_tokens(std::move(tokens)));
  return out;
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  const std::string* t = token_of(id);
  if (t == nullptr) return std::nullopt;
  return *t;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto it = added_content_to_id_.find(token);
  if (it != added_content_to_id_.end()) return it->second;
  return model_->token_to_id(token);
}

int32_t Tokenizer::vocab_size() const {
  int32_t n = model_->vocab_size();
  for (const auto& [id, content] : added_id_to_content_) n = std::max(n, id + 1);
  return n;
}

std::optional<std::string> Tokenizer::chat_template(std::string_view name) const {
  auto it = chat_templates_.find(std::string(name));
  if (it != chat_templates_.end()) return it->second;
  if (name == "default" && chat_templates_.size() == 1) return chat_templates_.begin()->second;
  return std::nullopt;
}

std::vector<std::string> Tokenizer::chat_template_names() const {
  std::vector<std::string> names;
  for (const auto& [name, body] : chat_templates_) names.push_back(name);
  return names;
}

}  // namespace llmserve

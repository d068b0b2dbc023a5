// Post-processor implementations: every supported kind reduces to "prefix ids + sequence + suffix ids".
#include "tokenizer/post_processor.h"

namespace llmserve {
namespace {

using json_util::Json;

class WrapProcessor : public PostProcessor {
 public:
  WrapProcessor(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}
  void process(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
    ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  }

 private:
  std::vector<int32_t> prefix_, suffix_;
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& p : parts_) p->process(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

// "sep"/"cls" of Bert/RobertaProcessing: [token, id].
StatusOr<int32_t> pair_id(const Json& j, const char* key, const std::string& path) {
  const Json* v = json_util::find(j, key);
  if (v == nullptr || !v->is_array() || v->size() != 2 || !(*v)[1].is_number_integer()) {
    return json_util::field_error(path + "." + key, "expected [token, id]");
  }
  return (*v)[1].get<int32_t>();
}

StatusOr<std::unique_ptr<PostProcessor>> make_template(const Json& j, const std::string& path) {
  const Json* single = json_util::find(j, "single");
  if (single == nullptr || !single->is_array()) return json_util::field_error(path + ".single", "expected a list");
  const Json* specials = json_util::find(j, "special_tokens");
  std::vector<int32_t> prefix, suffix;
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const Json& item = (*single)[i];
    std::string where = path + ".single[" + std::to_string(i) + "]";
    if (json_util::find(item, "Sequence") != nullptr) {
      seen_sequence = true;
      continue;
    }
    const Json* st = json_util::find(item, "SpecialToken");
    if (st == nullptr) return json_util::field_error(where, "expected Sequence or SpecialToken");
    ASSIGN_OR_RETURN(std::string name, json_util::get_string(*st, "id", where + ".SpecialToken"));
    const Json* entry = specials == nullptr ? nullptr : json_util::find(*specials, name);
    const Json* ids = entry == nullptr ? nullptr : json_util::find(*entry, "ids");
    if (ids == nullptr || !ids->is_array()) {
      return json_util::field_error(path + ".special_tokens." + name, "missing (used by " + where + ")");
    }
    for (const Json& id : *ids) {
      if (!id.is_number_integer()) return json_util::field_error(path + ".special_tokens." + name, "bad id");
      (seen_sequence ? suffix : prefix).push_back(id.get<int32_t>());
    }
  }
  return make_wrap_processor(std::move(prefix), std::move(suffix));
}

}  // namespace

std::unique_ptr<PostProcessor> make_wrap_processor(std::vector<int32_t> prefix, std::vector<int32_t> suffix) {
  return std::make_unique<WrapProcessor>(std::move(prefix), std::move(suffix));
}

StatusOr<std::unique_ptr<PostProcessor>> make_post_processor(const Json& j, const std::string& path) {
  ASSIGN_OR_RETURN(std::string type, json_util::get_string(j, "type", path));
  if (type == "TemplateProcessing") return make_template(j, path);
  if (type == "ByteLevel") return make_wrap_processor({}, {});
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    ASSIGN_OR_RETURN(int32_t cls, pair_id(j, "cls", path));
    ASSIGN_OR_RETURN(int32_t sep, pair_id(j, "sep", path));
    return make_wrap_processor({cls}, {sep});
  }
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(auto parts, json_util::make_each<PostProcessor>(j, "processors", path, make_post_processor));
    return std::unique_ptr<PostProcessor>(new SequenceProcessor(std::move(parts)));
  }
  return unimplemented(path + ".type: post-processor '" + type + "' is not supported");
}

}  // namespace llmserve

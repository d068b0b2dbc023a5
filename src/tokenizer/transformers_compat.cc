// transformers 5.17's class choice (models/auto/tokenization_auto.py) and class constructors
// (models/llama/tokenization_llama.py) applied to tokenizer.json. Tables are copied from that version.
#include "tokenizer/transformers_compat.h"

#include <algorithm>
#include <array>
#include <optional>

namespace llmserve {
namespace {

using json_util::Json;

// Model types whose registered tokenizer differs from LlamaTokenizer and overrides a hub tokenizer_class:
// TOKENIZER_MAPPING_NAMES entries that are TokenizersBackend / PreTrainedTokenizerFast / MistralCommonBackend,
// plus MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS members with a specialized class ("qwen2").
constexpr std::array kOverridingModelTypes = {"EvollaModel",
                                              "arctic",
                                              "aria",
                                              "bigbird_pegasus",
                                              "camembertv2-base",
                                              "canary",
                                              "chameleon",
                                              "chatlm",
                                              "cohere_asr",
                                              "deepseek_ocr",
                                              "deepseek_ocr2",
                                              "deepseek_v2",
                                              "deepseek_v3",
                                              "deepseek_v32",
                                              "deepseek_v4",
                                              "deepseek_vl",
                                              "deepseek_vl_hybrid",
                                              "deepseek_vl_v2",
                                              "ernie4_5",
                                              "ernie4_5_moe",
                                              "flex_olmo",
                                              "fuyu",
                                              "glm",
                                              "glm4",
                                              "glm4_moe",
                                              "glm4_moe_lite",
                                              "glm4v",
                                              "glm4v_moe",
                                              "glm_image",
                                              "glmasr",
                                              "got_ocr2",
                                              "gpt_bigcode",
                                              "granite",
                                              "granitemoe",
                                              "granitemoehybrid",
                                              "granitemoeshared",
                                              "h2ovl_chat",
                                              "hyperclovax",
                                              "hyperclovax_vlm",
                                              "internlm2",
                                              "jamba",
                                              "janus",
                                              "kimi_k25",
                                              "kimi_linear",
                                              "kosmos-2",
                                              "llava",
                                              "llava_next",
                                              "mimo_v2_flash",
                                              "minicpm3",
                                              "minicpmv",
                                              "minicpmv4_6",
                                              "minimax_m2",
                                              "ministral",
                                              "ministral3",
                                              "mistral",
                                              "mistral3",
                                              "mixtral",
                                              "modernbert",
                                              "molmo",
                                              "molmo2",
                                              "nemotron",
                                              "nvfp4",
                                              "nystromformer",
                                              "olmo2",
                                              "olmo3",
                                              "olmo_hybrid",
                                              "opencua",
                                              "openvla",
                                              "paddleocr_vl",
                                              "pegasus_x",
                                              "persimmon",
                                              "phi3",
                                              "phi3_v",
                                              "phimoe",
                                              "pix2struct",
                                              "pixtral",
                                              "qwen2",
                                              "smolvlm",
                                              "stablelm",
                                              "step3_vl",
                                              "step3p5",
                                              "umt5",
                                              "vipllava",
                                              "vision-encoder-decoder",
                                              "voxtral",
                                              "voxtral_realtime",
                                              "xlm-roberta-xl"};

std::string strip_fast(std::string s) {
  if (s.size() > 4 && s.ends_with("Fast") && s != "PreTrainedTokenizerFast") s.resize(s.size() - 4);
  return s;
}

std::optional<bool> bool_field(const Json& j, const char* key) {
  const Json* v = json_util::find(j, key);
  if (v == nullptr || !v->is_boolean()) return std::nullopt;
  return v->get<bool>();
}

// LlamaTokenizer.__init__: add_prefix_space defaults to true, legacy to false (transformers 5 changed both
// defaults), and the prepend scheme is _get_prepend_scheme(add_prefix_space, self).
Json rebuild_llama(Json tj, const Json& config) {
  bool add_prefix_space = bool_field(config, "add_prefix_space").value_or(true);
  bool legacy = bool_field(config, "legacy").value_or(false);
  std::string scheme = !add_prefix_space ? "never" : legacy ? "always" : "first";
  tj["normalizer"] = nullptr;
  tj["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", false}};
  Json decoders = Json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                               {{"type", "ByteFallback"}},
                               {{"type", "Fuse"}}});
  if (add_prefix_space) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  tj["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  // BPE(vocab, merges, fuse_unk=True, byte_fallback=True): no unk token.
  if (Json* model = tj.contains("model") ? &tj["model"] : nullptr; model != nullptr && model->is_object()) {
    (*model)["unk_token"] = nullptr;
    (*model)["fuse_unk"] = true;
    (*model)["byte_fallback"] = true;
  }
  return tj;
}

}  // namespace

bool parse_tokenizer_pipeline(std::string_view name, TokenizerPipeline* out) {
  if (name == "transformers") {
    *out = TokenizerPipeline::kTransformers;
  } else if (name == "tokenizers") {
    *out = TokenizerPipeline::kHfTokenizers;
  } else {
    return false;
  }
  return true;
}

std::string transformers_tokenizer_class(const Json& tokenizer_config, std::string_view model_type) {
  const Json* c = json_util::find(tokenizer_config, "tokenizer_class");
  std::string hub = c != nullptr && c->is_string() ? strip_fast(c->get<std::string>()) : "";
  if (hub.empty()) return "TokenizersBackend";
  bool overridden =
      std::find(kOverridingModelTypes.begin(), kOverridingModelTypes.end(), model_type) != kOverridingModelTypes.end();
  if (overridden && hub != "TokenizersBackend") return model_type == "qwen2" ? "Qwen2Tokenizer" : "TokenizersBackend";
  return hub;
}

Json apply_transformers_class(Json tokenizer_json, const Json& tokenizer_config, std::string_view cls) {
  // LlamaTokenizer keeps tokenizer.json's vocabulary and merges only when the model is BPE.
  const Json* model = json_util::find(tokenizer_json, "model");
  const Json* type = model != nullptr ? json_util::find(*model, "type") : nullptr;
  bool bpe = type != nullptr && type->is_string() && type->get<std::string>() == "BPE";
  if (cls == "LlamaTokenizer" && bpe) return rebuild_llama(std::move(tokenizer_json), tokenizer_config);
  return tokenizer_json;
}

}  // namespace llmserve

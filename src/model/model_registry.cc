// The architecture table: HF `architectures` name -> factory.
#include "model/model_registry.h"

#include <map>

#include "model/llama.h"

namespace llmserve {
namespace {

const std::map<std::string, ModelFactory>& registry() {
  static const std::map<std::string, ModelFactory> table = {
      {"LlamaForCausalLM", create_llama_family_model},
      {"MistralForCausalLM", create_llama_family_model},
      {"Qwen2ForCausalLM", create_llama_family_model},
      {"Qwen3ForCausalLM", create_llama_family_model},
  };
  return table;
}

}  // namespace

bool parse_dtype_flag(const std::string& name, std::optional<DType>* dtype) {
  DType parsed;
  if (name == "auto") {
    dtype->reset();
  } else if (parse_dtype(name, &parsed) && (parsed == DType::kF32 || parsed == DType::kBF16)) {
    *dtype = parsed;
  } else {
    return false;
  }
  return true;
}

DType resolve_weight_dtype(const ModelConfig& config, const ModelLoadOptions& options) {
  if (options.weight_dtype) return *options.weight_dtype;
  return config.dtype == DType::kBF16 ? DType::kBF16 : DType::kF32;
}

bool parse_load_format(const std::string& name, LoadFormat* format) {
  if (name == "auto") *format = LoadFormat::kAuto;
  else if (name == "safetensors") *format = LoadFormat::kSafetensors;
  else if (name == "dummy") *format = LoadFormat::kDummy;
  else return false;
  return true;
}

StatusOr<std::unique_ptr<CausalLM>> load_model(const std::string& model_dir, const ModelLoadOptions& options,
                                               const ModelConfig* config) {
  ModelConfig loaded;
  if (config == nullptr) {
    ASSIGN_OR_RETURN(loaded, load_model_config(model_dir));
    config = &loaded;
  }
  std::unique_ptr<WeightSource> weights;
  if (options.load_format == LoadFormat::kDummy) {
    weights = make_dummy_weight_source(options.seed);
  } else {
    ASSIGN_OR_RETURN(weights, open_safetensors_checkpoint(model_dir));
  }
  return create_model(*config, *weights, options);
}

StatusOr<std::unique_ptr<CausalLM>> create_model(const ModelConfig& config, WeightSource& weights,
                                                 const ModelLoadOptions& options) {
  auto it = registry().find(config.architecture);
  if (it == registry().end()) {
    std::string list;
    for (const auto& [name, factory] : registry()) list += (list.empty() ? "" : ", ") + name;
    return invalid_argument("unsupported architecture '" + config.architecture + "'; supported: " + list);
  }
  return it->second(config, weights, options);
}

}  // namespace llmserve

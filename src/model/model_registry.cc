// Loading a model directory and building the model its architecture names (the table: architectures.cc).
#include "model/model_registry.h"

#ifdef LLMSERVE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "model/architectures.h"
#include "model/device_weights.h"

namespace llmserve {
bool parse_dtype_flag(const std::string& name, std::optional<DType>* dtype) {
  DType parsed;
  if (name == "auto") {
    dtype->reset();
  } else if (parse_dtype(name, &parsed) && (parsed == DType::kF32 || parsed == DType::kBF16 || parsed == DType::kF16)) {
    *dtype = parsed;
  } else {
    return false;
  }
  return true;
}

DType resolve_weight_dtype(const ModelConfig& config, const ModelLoadOptions& options) {
  if (options.weight_dtype) return *options.weight_dtype;
  if (config.dtype == DType::kF16 && !options.device.is_cpu()) return DType::kF16;
  return config.dtype == DType::kBF16 ? DType::kBF16 : DType::kF32;
}

bool parse_device_flag(const std::string& name, Device* device) {
  if (name == "cpu") {
    *device = Device::cpu();
    return true;
  }
  if (name == "cuda") {
    *device = Device::cuda(0);
    return true;
  }
  if (name.rfind("cuda:", 0) == 0 && name.size() > 5 && name.size() < 9 &&
      name.find_first_not_of("0123456789", 5) == std::string::npos) {
    *device = Device::cuda(std::stoi(name.substr(5)));
    return true;
  }
  return false;
}

bool parse_load_format(const std::string& name, LoadFormat* format) {
  if (name == "auto")
    *format = LoadFormat::kAuto;
  else if (name == "safetensors")
    *format = LoadFormat::kSafetensors;
  else if (name == "dummy")
    *format = LoadFormat::kDummy;
  else
    return false;
  return true;
}

StatusOr<std::unique_ptr<CausalLM>> load_model(const std::string& model_dir, const ModelLoadOptions& options,
                                               const ModelConfig* config) {
  ModelConfig loaded;
  if (config == nullptr) {
    ASSIGN_OR_RETURN(loaded, load_model_config(model_dir));
    config = &loaded;
  }
  if (options.device.is_cpu() && resolve_weight_dtype(*config, options) == DType::kF16) {
    return invalid_argument("--dtype float16 needs --device cuda (the CPU kernels run f32 or bf16 weights)");
  }
#ifdef LLMSERVE_WITH_CUDA
  if (!options.device.is_cpu()) {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || options.device.index >= count) {
      return invalid_argument("--device " + options.device.to_string() + ": no such CUDA device (" +
                              (err != cudaSuccess ? cudaGetErrorString(err) : std::to_string(count) + " present") +
                              ")");
    }
  }
#else
  if (!options.device.is_cpu()) {
    return invalid_argument("--device " + options.device.to_string() + ": this build has no CUDA support");
  }
#endif
  ASSIGN_OR_RETURN(
      std::optional<QuantizationConfig> quantization,
      resolve_quantization_flag(config->quantization, options.quantization, options.load_format == LoadFormat::kDummy));
  ModelConfig quantized;
  if (quantization.has_value() != config->quantization.has_value()) {
    quantized = *config;
    quantized.quantization = quantization;
    config = &quantized;
  }
  std::unique_ptr<WeightSource> weights;
  if (options.load_format == LoadFormat::kDummy) {
    weights = make_dummy_weight_source(options.seed);
  } else {
    ASSIGN_OR_RETURN(weights, open_safetensors_checkpoint(model_dir));
  }
  if (options.device.is_cpu()) return create_model(*config, *weights, options);
  std::unique_ptr<WeightSource> on_device = make_device_weight_source(*weights, options.device);
  return create_model(*config, *on_device, options);
}

StatusOr<std::unique_ptr<CausalLM>> create_model(const ModelConfig& config, WeightSource& weights,
                                                 const ModelLoadOptions& options) {
  const Architecture* arch = find_architecture(config.architecture);
  if (arch == nullptr) {
    std::string list;
    for (const Architecture& a : architectures()) list += (list.empty() ? "" : ", ") + std::string(a.name);
    return invalid_argument("unsupported architecture '" + config.architecture + "'; supported: " + list);
  }
  return arch->factory(config, weights, options);
}

}  // namespace llmserve

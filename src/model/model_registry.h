// Architectures by their HF `architectures` name, and loading a model directory (config + weights) into one.
// An unknown architecture is an InvalidArgument error that lists the supported names.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/causal_lm.h"
#include "model/layers/communicator.h"
#include "model/model_config.h"
#include "model/weight_source.h"

namespace llmserve {

enum class LoadFormat { kAuto, kSafetensors, kDummy };
// Parses --load-format values: "auto", "safetensors", "dummy".
bool parse_load_format(const std::string& name, LoadFormat* format);
// Parses --device: "cpu", "cuda" or "cuda:N". False on anything else.
bool parse_device_flag(const std::string& name, Device* device);

struct ModelLoadOptions {
  // GEMM weight dtype; nullopt = the checkpoint's (bf16 stays bf16 and zero-copy: oneDNN's bf16 GEMM is the
  // fastest CPU path, bench/RESULTS.md; every other dtype widens to f32; on CUDA f16 stays f16 too).
  // On CUDA this is also the activation and KV-cache dtype; float16 needs CUDA.
  std::optional<DType> weight_dtype;
  Device device = Device::cpu();  // where weights, activations and (through the runner) the KV cache live
  LoadFormat load_format = LoadFormat::kAuto;
  uint64_t seed = 0;                 // dummy weights
  // --quantization: empty (the checkpoint's quantization_config), or a method resolve_quantization_flag accepts.
  std::string quantization;
  // Tensor parallelism: this model is one rank's shard, its collectives over `communicator` (null: world size 1).
  // The communicator must outlive the model. Built by runtime/tensor_parallel_model.h, which owns the ranks.
  Communicator* communicator = nullptr;
};

using ModelFactory = std::function<StatusOr<std::unique_ptr<CausalLM>>(
    const ModelConfig&, WeightSource&, const ModelLoadOptions&)>;

// Builds the model named by config.architecture from `weights`.
StatusOr<std::unique_ptr<CausalLM>> create_model(const ModelConfig& config, WeightSource& weights,
                                                 const ModelLoadOptions& options);

// Parses --dtype: "auto" (nullopt: the checkpoint's), "float32"/"float", "bfloat16", "float16". False otherwise.
bool parse_dtype_flag(const std::string& name, std::optional<DType>* dtype);

// The dtype weights are held in for `config` under `options` (on CUDA also the activation dtype).
DType resolve_weight_dtype(const ModelConfig& config, const ModelLoadOptions& options);

// Loads config.json from `model_dir` (or uses `config` when given, e.g. --config FILE with dummy weights),
// opens the weights as options.load_format says and builds the model. Weights in a file are converted to
// options.weight_dtype once, here.
StatusOr<std::unique_ptr<CausalLM>> load_model(const std::string& model_dir, const ModelLoadOptions& options,
                                               const ModelConfig* config = nullptr);

}  // namespace llmserve

// The Llama-family decoder (Llama, Mistral, Qwen2 with q/k/v bias, Qwen3 with q/k RMSNorm); see llama.cc.
#pragma once

#include <memory>

#include "model/causal_lm.h"
#include "model/model_registry.h"

namespace llmserve {

StatusOr<std::unique_ptr<CausalLM>> create_llama_family_model(const ModelConfig& config, WeightSource& weights,
                                                              const ModelLoadOptions& options);

}  // namespace llmserve

// THE architecture table: one row per HF `architectures` name — its model_type, the config defaults parsing applies
// (model_config.cc) and the factory that builds it (model_registry.cc). Adding an architecture = one row here plus
// its composition file (e.g. llama.cc).
#pragma once

#include <string_view>
#include <vector>

#include "model/model_registry.h"

namespace llmserve {

// How a config names its sliding-window layers.
enum class SlidingStyle { kNone, kAllLayers, kQwen };

// Which MoE config fields an architecture reads (model_config.cc's parse_moe).
enum class MoeStyle { kNone, kMixtral, kQwen2Moe, kQwen3Moe, kDeepseekV3 };

// Per-architecture defaults and flag meanings for parse_model_config.
struct ArchitectureConfigDefaults {
  int64_t max_position_embeddings = 2048;
  bool qkv_bias_always = false;      // Qwen2
  bool attention_bias_flag = false;  // `attention_bias` adds q/k/v/o biases
  bool mlp_bias_flag = false;        // `mlp_bias` adds gate/up/down biases
  bool qk_norm = false;              // per-head q/k RMSNorm (Qwen3)
  SlidingStyle sliding = SlidingStyle::kNone;
  MoeStyle moe = MoeStyle::kNone;
};

struct Architecture {
  const char* name;        // HF `architectures[0]`
  const char* model_type;  // HF `model_type`, used when `architectures` is absent
  ArchitectureConfigDefaults config;
  ModelFactory factory;
};

// Every supported architecture, in table order.
const std::vector<Architecture>& architectures();
// The row named `name`, or nullptr.
const Architecture* find_architecture(std::string_view name);

}  // namespace llmserve

// The architecture table (see architectures.h).
#include "model/architectures.h"

#include "model/deepseek_v3.h"
#include "model/llama.h"

namespace llmserve {

const std::vector<Architecture>& architectures() {
  static const std::vector<Architecture> table = {
      // name, model_type, {max_position_embeddings, qkv_bias_always, attention_bias_flag, mlp_bias_flag, qk_norm,
      //                    sliding, moe}, factory
      {"LlamaForCausalLM", "llama", {2048, false, true, true, false, SlidingStyle::kNone}, create_llama_family_model},
      {"MistralForCausalLM",
       "mistral",
       {4096 * 32, false, false, false, false, SlidingStyle::kAllLayers},
       create_llama_family_model},
      {"Qwen2ForCausalLM", "qwen2", {32768, true, false, false, false, SlidingStyle::kQwen}, create_llama_family_model},
      {"Qwen3ForCausalLM", "qwen3", {32768, false, true, false, true, SlidingStyle::kQwen}, create_llama_family_model},
      // Mixture of experts: the same decoder with a FusedMoE block in place of the MLP (layers/fused_moe.h).
      {"MixtralForCausalLM",
       "mixtral",
       {4096 * 32, false, false, false, false, SlidingStyle::kAllLayers, MoeStyle::kMixtral},
       create_llama_family_model},
      {"Qwen2MoeForCausalLM",
       "qwen2_moe",
       {32768, true, false, false, false, SlidingStyle::kQwen, MoeStyle::kQwen2Moe},
       create_llama_family_model},
      {"Qwen3MoeForCausalLM",
       "qwen3_moe",
       {32768, false, true, false, true, SlidingStyle::kQwen, MoeStyle::kQwen3Moe},
       create_llama_family_model},
      // Multi-head latent attention over a latent KV cache + group-limited sigmoid MoE (deepseek_v3.h).
      {"DeepseekV3ForCausalLM",
       "deepseek_v3",
       {4096, false, false, false, false, SlidingStyle::kNone, MoeStyle::kDeepseekV3},
       create_deepseek_v3_model},
  };
  return table;
}

const Architecture* find_architecture(std::string_view name) {
  for (const Architecture& a : architectures()) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

}  // namespace llmserve

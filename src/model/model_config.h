// ModelConfig (from a HF config.json) and GenerationConfig (from generation_config.json). A ModelConfig that
// parsed OK is validated: positive sizes, heads divisible by kv heads, an even head_dim, a supported
// architecture, activation and RoPE type — so model code may rely on it without re-checking.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/quantization_config.h"

namespace llmserve {

enum class RopeType : uint8_t { kDefault, kLinear, kLlama3, kYarn };
std::string_view rope_type_name(RopeType type);

// RoPE frequency scaling, as HF's `rope_scaling` (transformers 4) / `rope_parameters` (transformers 5).
// YaRN: an explicit `factor` wins, as in transformers 5 and vLLM (transformers 4.4x-4.5x replaced it by
// max_position_embeddings / original_max_position_embeddings whenever the latter was given); without a factor
// that ratio is used.
struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1.0;                           // linear, llama3, yarn
  int64_t original_max_position_embeddings = 0;  // llama3, yarn (defaults to max_position_embeddings)
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3
  double beta_fast = 32.0;                       // yarn
  double beta_slow = 1.0;                        // yarn
  std::optional<double> mscale;                  // yarn
  std::optional<double> mscale_all_dim;          // yarn
  std::optional<double> attention_factor;        // yarn: multiplies cos and sin; derived from factor when unset
  bool truncate = true;                          // yarn: floor/ceil the correction range
};

// Mixture-of-experts feed-forward (Mixtral, Qwen2-MoE, Qwen3-MoE): which layers are sparse and how tokens are routed.
struct MoeConfig {
  int64_t num_experts = 0;                      // num_local_experts (Mixtral) / num_experts (Qwen)
  int64_t num_experts_per_tok = 0;              // top-k
  int64_t moe_intermediate_size = 0;            // each expert's intermediate size
  bool norm_topk_prob = false;                  // renormalise the top-k softmax weights to sum 1 (always for Mixtral)
  int64_t shared_expert_intermediate_size = 0;  // 0: no shared expert (Qwen2-MoE has one, behind a sigmoid gate)
  int64_t decoder_sparse_step = 1;              // layer i is sparse iff (i + 1) % step == 0 ...
  std::vector<int64_t> mlp_only_layers;         // ... and i is not listed here (those run the dense MLP) ...
  int64_t first_k_dense_replace = 0;            // ... and i >= this (DeepSeek: the first k layers are dense)
  // DeepSeek-V3's router (scoring_func sigmoid, topk_method noaux_tc): sigmoid scores, the experts' n_group groups
  // limited to the topk_group best (each scored by its two best biased scores), e_score_correction_bias for choosing
  // only, the chosen weights times routed_scaling_factor. Its shared experts are one ungated MLP of
  // shared_expert_intermediate_size = n_shared_experts * moe_intermediate_size.
  bool grouped_routing = false;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;
  bool is_sparse_layer(int64_t layer) const;
};

// Multi-head latent attention (DeepSeek-V2 / V3; model/layers/mla_attention.h): queries through an optional LoRA
// (q_lora_rank), keys and values compressed into one latent of kv_lora_rank per token plus a shared rope key of
// qk_rope_head_dim; the KV cache holds that latent row (kv_lora_rank + qk_rope_head_dim values per token and layer).
struct MlaConfig {
  int64_t q_lora_rank = 0;  // 0: q_proj directly (config null)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;  // also ModelConfig::head_dim (transformers' rule: the rotary tables' size)
  int64_t v_head_dim = 0;
  bool rope_interleave = true;  // rotate pairs (x[2i], x[2i+1]) instead of rotate-half
  bool attention_bias = false;  // q_a_proj (or nothing), kv_a_proj_with_mqa and o_proj have biases
  int64_t latent_size() const { return kv_lora_rank + qk_rope_head_dim; }  // one cache row
};

struct ModelConfig {
  std::string architecture;  // "LlamaForCausalLM", ...
  std::string model_type;    // "llama", ... (may be empty)
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // defaults to num_attention_heads
  int64_t head_dim = 0;             // explicit, else hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_qkv_bias = false;          // q/k/v projections have a bias (Qwen2 always; Llama attention_bias)
  bool attention_out_bias = false;          // o_proj has a bias (Llama and Qwen3 attention_bias)
  bool mlp_bias = false;                    // gate/up/down have a bias (Llama mlp_bias)
  bool qk_norm = false;                     // RMSNorm over each q and k head before RoPE (Qwen3)
  std::optional<int64_t> sliding_window;    // window in tokens, when any layer uses one
  std::vector<bool> sliding_window_layers;  // [num_hidden_layers]: layer i uses sliding_window
  DType dtype = DType::kF32;                // torch_dtype / dtype: the checkpoint's weight dtype
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // eos_token_id, an int or a list
  std::string hidden_act = "silu";
  std::optional<QuantizationConfig> quantization;  // quantization_config; unset: unquantized weights
  std::optional<MoeConfig> moe;                    // set for MoE architectures
  std::optional<MlaConfig> mla;                    // set for multi-head latent attention (DeepSeek-V3)

  // The window for layer i, or nullopt for full attention.
  std::optional<int64_t> sliding_window_for_layer(int64_t layer) const;
  int64_t q_size() const { return num_attention_heads * head_dim; }
  int64_t kv_size() const { return num_key_value_heads * head_dim; }
};

// The architectures parse_model_config accepts.
const std::vector<std::string>& supported_architectures();

// Parses and validates an in-memory config.json. InvalidArgument names the field at fault and, for an unsupported
// architecture or value, lists what is supported. Never throws.
StatusOr<ModelConfig> parse_model_config(const nlohmann::json& config);
// Reads `dir`/config.json (or `dir` itself when it is a file); errors name the file.
StatusOr<ModelConfig> load_model_config(const std::string& dir);

// Decoding defaults from generation_config.json; absent fields stay unset.
struct GenerationConfig {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;
  std::optional<int64_t> max_length;
  std::optional<bool> do_sample;
  std::optional<int64_t> bos_token_id;
  std::optional<std::vector<int64_t>> eos_token_ids;  // eos_token_id, an int or a list
  std::optional<int64_t> pad_token_id;
};

StatusOr<GenerationConfig> parse_generation_config(const nlohmann::json& config);
// Reads `dir`/generation_config.json; a missing file gives an all-unset GenerationConfig.
StatusOr<GenerationConfig> load_generation_config(const std::string& dir);

}  // namespace llmserve

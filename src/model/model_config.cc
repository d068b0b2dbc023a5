// config.json / generation_config.json parsing. Field reads check the JSON type first, so nlohmann never throws
// from here; the JSON text itself is parsed inside a try block whose error carries the byte position.
#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/architectures.h"

namespace llmserve {

namespace {

using json = nlohmann::json;

std::string field_error_text(const std::string& key, const json& v, const char* want) {
  return "field '" + key + "' must be " + want + ", got " + v.dump();
}

// Each getter leaves `out` untouched when the key is absent or null.
Status get_int(const json& j, const std::string& key, std::optional<int64_t>* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return ok_status();
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return invalid_argument(field_error_text(key, *it, "an integer that fits in 64 bits"));
  }
  if (it->is_number_integer()) {
    *out = it->get<int64_t>();
    return ok_status();
  }
  if (it->is_number_float()) {  // "4096.0" appears in some hand-written configs
    double d = it->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) {
      *out = static_cast<int64_t>(d);
      return ok_status();
    }
  }
  return invalid_argument(field_error_text(key, *it, "an integer"));
}

Status get_double(const json& j, const std::string& key, std::optional<double>* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return ok_status();
  if (!it->is_number()) return invalid_argument(field_error_text(key, *it, "a number"));
  *out = it->get<double>();
  if (!std::isfinite(**out)) return invalid_argument(field_error_text(key, *it, "a finite number"));
  return ok_status();
}

Status get_bool(const json& j, const std::string& key, std::optional<bool>* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return ok_status();
  if (!it->is_boolean()) return invalid_argument(field_error_text(key, *it, "true or false"));
  *out = it->get<bool>();
  return ok_status();
}

Status get_string(const json& j, const std::string& key, std::optional<std::string>* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return ok_status();
  if (!it->is_string()) return invalid_argument(field_error_text(key, *it, "a string"));
  *out = it->get<std::string>();
  return ok_status();
}

// An id or a list of ids (eos_token_id).
Status get_id_list(const json& j, const std::string& key, std::optional<std::vector<int64_t>>* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return ok_status();
  std::vector<int64_t> ids;
  json list = it->is_array() ? *it : json::array({*it});
  for (const json& v : list) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return invalid_argument(field_error_text(key, *it, "a token id or a list of token ids"));
    }
    ids.push_back(v.get<int64_t>());
  }
  *out = std::move(ids);
  return ok_status();
}

// Reads `key` into `*out`; absent keeps the default already in *out.
template <typename T>
Status read_or_keep(const json& j, const std::string& key, T* out) {
  if constexpr (std::is_same_v<T, int64_t>) {
    std::optional<int64_t> v;
    RETURN_IF_ERROR(get_int(j, key, &v));
    if (v) *out = *v;
  } else if constexpr (std::is_same_v<T, double>) {
    std::optional<double> v;
    RETURN_IF_ERROR(get_double(j, key, &v));
    if (v) *out = *v;
  } else {
    std::optional<bool> v;
    RETURN_IF_ERROR(get_bool(j, key, &v));
    if (v) *out = *v;
  }
  return ok_status();
}

Status require_int(const json& j, const std::string& key, int64_t* out) {
  std::optional<int64_t> v;
  RETURN_IF_ERROR(get_int(j, key, &v));
  if (!v) return invalid_argument("required field '" + key + "' is missing");
  *out = *v;
  return ok_status();
}

// Sanity bounds that keep a corrupt config from asking for absurd allocations (every real model is far below).
constexpr int64_t kMaxSize = int64_t{1} << 31;
constexpr int64_t kMaxHeadDim = 4096;

// Per-architecture defaults come from the one architecture table (architectures.h).
using ArchSpec = ArchitectureConfigDefaults;

std::string supported_architecture_list() {
  std::string out;
  for (const std::string& a : supported_architectures()) out += (out.empty() ? "" : ", ") + a;
  return out;
}

StatusOr<const Architecture*> find_arch(const json& config, ModelConfig* cfg) {
  std::optional<std::string> model_type;
  RETURN_IF_ERROR(get_string(config, "model_type", &model_type));
  cfg->model_type = model_type.value_or("");
  auto it = config.find("architectures");
  if (it != config.end() && !it->is_null()) {
    if (!it->is_array() || it->empty() || !(*it)[0].is_string()) {
      return invalid_argument(field_error_text("architectures", *it, "a non-empty list of strings"));
    }
    cfg->architecture = (*it)[0].get<std::string>();
  } else {
    for (const Architecture& a : architectures()) {
      if (cfg->model_type == a.model_type) cfg->architecture = a.name;
    }
    if (cfg->architecture.empty()) {
      return invalid_argument("no 'architectures' field and model_type '" + cfg->model_type +
                              "' is not supported (supported: " + supported_architecture_list() + ")");
    }
  }
  if (const Architecture* a = find_architecture(cfg->architecture)) return a;
  return invalid_argument("architecture '" + cfg->architecture +
                          "' is not supported (supported: " + supported_architecture_list() + ")");
}

// The rope parameter object: transformers 5's `rope_parameters`, else 4's `rope_scaling`; nullptr when neither.
StatusOr<const json*> rope_object(const json& config) {
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) continue;
    if (!it->is_object()) return invalid_argument(field_error_text(key, *it, "an object"));
    for (const char* layer_type : {"full_attention", "sliding_attention"}) {
      if (it->contains(layer_type)) {
        return invalid_argument(std::string("field '") + key + "' has per-layer-type RoPE parameters, which are " +
                                "not supported");
      }
    }
    return &*it;
  }
  return static_cast<const json*>(nullptr);
}

Status parse_rope(const json& config, ModelConfig* cfg) {
  ASSIGN_OR_RETURN(const json* rp, rope_object(config));
  // transformers 5 keeps rope_theta inside rope_parameters, and that one wins over a top-level rope_theta.
  std::optional<double> theta;
  if (rp != nullptr) RETURN_IF_ERROR(get_double(*rp, "rope_theta", &theta).with_context("rope_scaling"));
  if (!theta) RETURN_IF_ERROR(get_double(config, "rope_theta", &theta));
  if (theta) cfg->rope_theta = *theta;
  if (!(cfg->rope_theta >= 1)) return invalid_argument("field 'rope_theta' must be at least 1");
  std::optional<double> partial;
  RETURN_IF_ERROR(get_double(config, "partial_rotary_factor", &partial));
  if (rp != nullptr && !partial) RETURN_IF_ERROR(get_double(*rp, "partial_rotary_factor", &partial));
  if (partial && *partial != 1.0) return invalid_argument("partial_rotary_factor != 1 is not supported");
  if (rp == nullptr) return ok_status();

  RopeScaling& rs = cfg->rope_scaling;
  const json& r = *rp;
  auto ctx = [](Status s) { return s.with_context("rope_scaling"); };
  std::optional<std::string> type;
  RETURN_IF_ERROR(ctx(get_string(r, "rope_type", &type)));
  if (!type) RETURN_IF_ERROR(ctx(get_string(r, "type", &type)));
  const std::string t = type.value_or("default");
  if (t == "default")
    rs.type = RopeType::kDefault;
  else if (t == "linear")
    rs.type = RopeType::kLinear;
  else if (t == "llama3")
    rs.type = RopeType::kLlama3;
  else if (t == "yarn")
    rs.type = RopeType::kYarn;
  else
    return invalid_argument("rope_scaling type '" + t +
                            "' is not supported (supported: default, linear, llama3, yarn)");
  if (rs.type == RopeType::kDefault) return ok_status();

  std::optional<double> factor;
  RETURN_IF_ERROR(ctx(get_double(r, "factor", &factor)));
  std::optional<int64_t> orig;
  RETURN_IF_ERROR(ctx(get_int(r, "original_max_position_embeddings", &orig)));
  if (!orig) RETURN_IF_ERROR(get_int(config, "original_max_position_embeddings", &orig));
  rs.original_max_position_embeddings = orig.value_or(cfg->max_position_embeddings);
  if (rs.original_max_position_embeddings <= 0) {
    return invalid_argument("rope_scaling: original_max_position_embeddings must be positive");
  }
  // YaRN without a factor derives it from the context extension (transformers 5 rule).
  if (!factor && rs.type == RopeType::kYarn) {
    factor =
        static_cast<double>(cfg->max_position_embeddings) / static_cast<double>(rs.original_max_position_embeddings);
  }
  if (!factor) return invalid_argument("rope_scaling type '" + t + "' needs field 'factor'");
  if (!(*factor > 0)) return invalid_argument("rope_scaling: field 'factor' must be positive");
  rs.factor = *factor;

  if (rs.type == RopeType::kLlama3) {
    std::optional<double> low, high;
    RETURN_IF_ERROR(ctx(get_double(r, "low_freq_factor", &low)));
    RETURN_IF_ERROR(ctx(get_double(r, "high_freq_factor", &high)));
    if (!low || !high) return invalid_argument("rope_scaling type 'llama3' needs low_freq_factor and high_freq_factor");
    if (!(*high > *low) || !(*low > 0)) {
      return invalid_argument("rope_scaling: need 0 < low_freq_factor < high_freq_factor");
    }
    rs.low_freq_factor = *low;
    rs.high_freq_factor = *high;
  } else if (rs.type == RopeType::kYarn) {
    std::optional<double> beta_fast, beta_slow;
    std::optional<bool> truncate;
    RETURN_IF_ERROR(ctx(get_double(r, "beta_fast", &beta_fast)));
    RETURN_IF_ERROR(ctx(get_double(r, "beta_slow", &beta_slow)));
    RETURN_IF_ERROR(ctx(get_double(r, "mscale", &rs.mscale)));
    RETURN_IF_ERROR(ctx(get_double(r, "mscale_all_dim", &rs.mscale_all_dim)));
    RETURN_IF_ERROR(ctx(get_double(r, "attention_factor", &rs.attention_factor)));
    RETURN_IF_ERROR(ctx(get_bool(r, "truncate", &truncate)));
    // HF reads these as `x or default`: 0 and null both mean the default.
    if (beta_fast && *beta_fast != 0) rs.beta_fast = *beta_fast;
    if (beta_slow && *beta_slow != 0) rs.beta_slow = *beta_slow;
    if (!(rs.beta_fast > 0) || !(rs.beta_slow > 0))
      return invalid_argument("rope_scaling: beta_fast/beta_slow must be positive");
    if (rs.attention_factor && !(*rs.attention_factor > 0)) {
      return invalid_argument("rope_scaling: attention_factor must be positive");
    }
    rs.truncate = truncate.value_or(true);
  }
  return ok_status();
}

Status parse_sliding_window(const json& config, const ArchSpec& spec, ModelConfig* cfg) {
  cfg->sliding_window_layers.assign(static_cast<size_t>(cfg->num_hidden_layers), false);
  if (spec.sliding == SlidingStyle::kNone) return ok_status();
  std::optional<int64_t> window;
  RETURN_IF_ERROR(get_int(config, "sliding_window", &window));
  if (spec.sliding == SlidingStyle::kQwen) {
    std::optional<bool> use;
    RETURN_IF_ERROR(get_bool(config, "use_sliding_window", &use));
    if (!use.value_or(false)) window.reset();  // Qwen2/3 ignore sliding_window unless use_sliding_window
  }
  if (!window) return ok_status();
  if (*window <= 0) return invalid_argument("field 'sliding_window' must be positive");
  cfg->sliding_window = window;
  auto lt = config.find("layer_types");
  if (lt != config.end() && !lt->is_null()) {
    if (!lt->is_array() || static_cast<int64_t>(lt->size()) != cfg->num_hidden_layers) {
      return invalid_argument(field_error_text("layer_types", *lt, "a list with one entry per layer"));
    }
    for (size_t i = 0; i < lt->size(); ++i) {
      const json& v = (*lt)[i];
      if (v == "sliding_attention")
        cfg->sliding_window_layers[i] = true;
      else if (v != "full_attention") {
        return invalid_argument(field_error_text("layer_types", v, "\"full_attention\" or \"sliding_attention\""));
      }
    }
    return ok_status();
  }
  int64_t first_sliding = 0;
  if (spec.sliding == SlidingStyle::kQwen) {
    first_sliding = 28;  // Qwen2Config's default max_window_layers
    RETURN_IF_ERROR(read_or_keep(config, "max_window_layers", &first_sliding));
  }
  for (int64_t i = std::max<int64_t>(first_sliding, 0); i < cfg->num_hidden_layers; ++i) {
    cfg->sliding_window_layers[static_cast<size_t>(i)] = true;
  }
  return ok_status();
}

Status parse_sizes(const json& config, const ArchSpec& spec, ModelConfig* cfg) {
  RETURN_IF_ERROR(require_int(config, "vocab_size", &cfg->vocab_size));
  RETURN_IF_ERROR(require_int(config, "hidden_size", &cfg->hidden_size));
  RETURN_IF_ERROR(require_int(config, "intermediate_size", &cfg->intermediate_size));
  RETURN_IF_ERROR(require_int(config, "num_hidden_layers", &cfg->num_hidden_layers));
  RETURN_IF_ERROR(require_int(config, "num_attention_heads", &cfg->num_attention_heads));
  cfg->max_position_embeddings = spec.max_position_embeddings;
  RETURN_IF_ERROR(read_or_keep(config, "max_position_embeddings", &cfg->max_position_embeddings));
  for (auto [name, v] : {std::pair<const char*, int64_t>{"vocab_size", cfg->vocab_size},
                         {"hidden_size", cfg->hidden_size},
                         {"intermediate_size", cfg->intermediate_size},
                         {"num_hidden_layers", cfg->num_hidden_layers},
                         {"num_attention_heads", cfg->num_attention_heads},
                         {"max_position_embeddings", cfg->max_position_embeddings}}) {
    if (v <= 0) return invalid_argument(std::string("field '") + name + "' must be positive, got " + std::to_string(v));
    if (v > kMaxSize) {
      return invalid_argument(std::string("field '") + name + "' is implausibly large: " + std::to_string(v));
    }
  }
  cfg->num_key_value_heads = cfg->num_attention_heads;
  RETURN_IF_ERROR(read_or_keep(config, "num_key_value_heads", &cfg->num_key_value_heads));
  if (cfg->num_key_value_heads <= 0 || cfg->num_attention_heads % cfg->num_key_value_heads != 0) {
    return invalid_argument("num_attention_heads (" + std::to_string(cfg->num_attention_heads) +
                            ") must be a positive multiple of num_key_value_heads (" +
                            std::to_string(cfg->num_key_value_heads) + ")");
  }
  std::optional<int64_t> head_dim;
  RETURN_IF_ERROR(get_int(config, "head_dim", &head_dim));
  if (!head_dim) {
    if (cfg->hidden_size % cfg->num_attention_heads != 0) {
      return invalid_argument("hidden_size (" + std::to_string(cfg->hidden_size) +
                              ") is not divisible by num_attention_heads (" + std::to_string(cfg->num_attention_heads) +
                              ") and no head_dim is given");
    }
    head_dim = cfg->hidden_size / cfg->num_attention_heads;
  }
  if (*head_dim <= 0 || *head_dim % 2 != 0 || *head_dim > kMaxHeadDim) {
    return invalid_argument("head_dim must be positive, even (RoPE) and at most " + std::to_string(kMaxHeadDim) +
                            ", got " + std::to_string(*head_dim));
  }
  cfg->head_dim = *head_dim;
  return ok_status();
}

Status parse_flags(const json& config, const ArchSpec& spec, ModelConfig* cfg) {
  RETURN_IF_ERROR(read_or_keep(config, "rms_norm_eps", &cfg->rms_norm_eps));
  if (!(cfg->rms_norm_eps > 0)) return invalid_argument("field 'rms_norm_eps' must be positive");
  RETURN_IF_ERROR(read_or_keep(config, "tie_word_embeddings", &cfg->tie_word_embeddings));
  bool attention_bias = false, mlp_bias = false;
  RETURN_IF_ERROR(read_or_keep(config, "attention_bias", &attention_bias));
  RETURN_IF_ERROR(read_or_keep(config, "mlp_bias", &mlp_bias));
  cfg->attention_qkv_bias = spec.qkv_bias_always || (spec.attention_bias_flag && attention_bias);
  cfg->attention_out_bias = spec.attention_bias_flag && attention_bias;
  cfg->mlp_bias = spec.mlp_bias_flag && mlp_bias;
  cfg->qk_norm = spec.qk_norm;

  std::optional<std::string> act;
  RETURN_IF_ERROR(get_string(config, "hidden_act", &act));
  if (act && *act != "silu" && *act != "swish") {
    return invalid_argument("hidden_act '" + *act + "' is not supported (supported: silu)");
  }
  std::optional<std::string> dtype;
  RETURN_IF_ERROR(get_string(config, "dtype", &dtype));  // transformers >= 4.56 writes `dtype`
  if (!dtype) RETURN_IF_ERROR(get_string(config, "torch_dtype", &dtype));
  if (dtype && (!parse_dtype(*dtype, &cfg->dtype) || !dtype_is_float(cfg->dtype) || cfg->dtype == DType::kFP8E4M3)) {
    return invalid_argument("dtype '" + *dtype + "' is not supported (supported: float32, float16, bfloat16)");
  }
  auto quant = config.find("quantization_config");
  if (quant != config.end() && !quant->is_null()) {
    ASSIGN_OR_RETURN(cfg->quantization, parse_quantization_config(*quant));
  }
  std::optional<int64_t> bos;
  RETURN_IF_ERROR(get_int(config, "bos_token_id", &bos));
  if (bos && *bos < 0) return invalid_argument("field 'bos_token_id' must be non-negative");
  cfg->bos_token_id = bos;
  std::optional<std::vector<int64_t>> eos;
  RETURN_IF_ERROR(get_id_list(config, "eos_token_id", &eos));
  cfg->eos_token_ids = eos.value_or(std::vector<int64_t>{});
  return ok_status();
}

// Largest expert count and top-k the MoE ops take (kernels/ops.h: kMaxMoeExperts, kMaxMoeTopK).
constexpr int64_t kMaxExperts = 1024, kMaxTopK = 32;

Status check_moe_sizes(const MoeConfig& moe);

Status positive_field(const char* name, int64_t v, int64_t max = kMaxSize) {
  if (v <= 0 || v > max) {
    return invalid_argument(std::string("field '") + name + "' must be in [1, " + std::to_string(max) + "], got " +
                            std::to_string(v));
  }
  return ok_status();
}

// A string field that must be absent (null) or `want`: values we do not implement are refused, naming the field.
Status expect_string(const json& config, const char* key, const char* want) {
  std::optional<std::string> v;
  RETURN_IF_ERROR(get_string(config, key, &v));
  if (v && *v != want) {
    return invalid_argument(std::string("field '") + key + "' is '" + *v + "'; only '" + want + "' is supported");
  }
  return ok_status();
}

// DeepSeek-V3: multi-head latent attention and the group-limited sigmoid router, with DeepseekV3Config's defaults
// for absent fields (transformers' configuration_deepseek_v3.py). vLLM's moe_layer_freq rule (sparse iff
// i >= first_k_dense_replace and i % moe_layer_freq == 0) differs from transformers' for freq > 1: only 1 is taken.
// MTP layers (num_nextn_predict_layers, checkpoint layers past num_hidden_layers) are never loaded, as in vLLM.
Status parse_deepseek_v3(const json& config, ModelConfig* cfg) {
  MlaConfig mla;
  mla.q_lora_rank = 1536;
  mla.kv_lora_rank = 512;
  mla.qk_nope_head_dim = 128;
  mla.qk_rope_head_dim = 64;
  mla.v_head_dim = 128;
  {
    auto it = config.find("q_lora_rank");
    if (it != config.end() && it->is_null()) {
      mla.q_lora_rank = 0;  // null: q_proj without the LoRA
    } else {
      RETURN_IF_ERROR(read_or_keep(config, "q_lora_rank", &mla.q_lora_rank));
      RETURN_IF_ERROR(positive_field("q_lora_rank", mla.q_lora_rank));
    }
  }
  RETURN_IF_ERROR(read_or_keep(config, "kv_lora_rank", &mla.kv_lora_rank));
  RETURN_IF_ERROR(read_or_keep(config, "qk_nope_head_dim", &mla.qk_nope_head_dim));
  RETURN_IF_ERROR(read_or_keep(config, "qk_rope_head_dim", &mla.qk_rope_head_dim));
  RETURN_IF_ERROR(read_or_keep(config, "v_head_dim", &mla.v_head_dim));
  RETURN_IF_ERROR(read_or_keep(config, "rope_interleave", &mla.rope_interleave));
  RETURN_IF_ERROR(read_or_keep(config, "attention_bias", &mla.attention_bias));
  RETURN_IF_ERROR(positive_field("kv_lora_rank", mla.kv_lora_rank, kMaxHeadDim));
  RETURN_IF_ERROR(positive_field("qk_nope_head_dim", mla.qk_nope_head_dim, kMaxHeadDim));
  RETURN_IF_ERROR(positive_field("qk_rope_head_dim", mla.qk_rope_head_dim, kMaxHeadDim));
  RETURN_IF_ERROR(positive_field("v_head_dim", mla.v_head_dim, kMaxHeadDim));
  if (mla.qk_rope_head_dim % 2 != 0) return invalid_argument("field 'qk_rope_head_dim' must be even (RoPE pairs)");
  if (cfg->num_key_value_heads != cfg->num_attention_heads) {
    return invalid_argument("field 'num_key_value_heads' (" + std::to_string(cfg->num_key_value_heads) +
                            ") must equal num_attention_heads for multi-head latent attention");
  }
  if (cfg->quantization) {
    return invalid_argument("field 'quantization_config': quantized " + cfg->architecture +
                            " checkpoints are not supported (bf16 / f32 weights only)");
  }
  // transformers (yarn_apply_mscale) scales the softmax by mscale_all_dim for every non-default rope type, not only
  // yarn (whose parse already read it).
  if (cfg->rope_scaling.type != RopeType::kDefault && !cfg->rope_scaling.mscale_all_dim) {
    ASSIGN_OR_RETURN(const json* rp, rope_object(config));
    if (rp != nullptr) {
      RETURN_IF_ERROR(
          get_double(*rp, "mscale_all_dim", &cfg->rope_scaling.mscale_all_dim).with_context("rope_scaling"));
    }
  }
  cfg->head_dim = mla.qk_rope_head_dim;  // transformers' DeepseekV3Config: head_dim = qk_rope_head_dim (rotary)
  cfg->attention_qkv_bias = cfg->attention_out_bias = false;  // MLA's biases are mla.attention_bias
  cfg->mla = mla;

  MoeConfig moe;
  moe.num_experts = 256;
  moe.num_experts_per_tok = 8;
  moe.moe_intermediate_size = 2048;
  moe.norm_topk_prob = true;
  moe.first_k_dense_replace = 3;
  moe.grouped_routing = true;
  moe.n_group = 8;
  moe.topk_group = 4;
  moe.routed_scaling_factor = 2.5;
  int64_t n_shared_experts = 1, moe_layer_freq = 1, ep_size = 1, mtp_layers = 0;
  RETURN_IF_ERROR(read_or_keep(config, "n_routed_experts", &moe.num_experts));
  RETURN_IF_ERROR(read_or_keep(config, "num_experts_per_tok", &moe.num_experts_per_tok));
  RETURN_IF_ERROR(read_or_keep(config, "moe_intermediate_size", &moe.moe_intermediate_size));
  RETURN_IF_ERROR(read_or_keep(config, "norm_topk_prob", &moe.norm_topk_prob));
  RETURN_IF_ERROR(read_or_keep(config, "first_k_dense_replace", &moe.first_k_dense_replace));
  RETURN_IF_ERROR(read_or_keep(config, "n_group", &moe.n_group));
  RETURN_IF_ERROR(read_or_keep(config, "topk_group", &moe.topk_group));
  RETURN_IF_ERROR(read_or_keep(config, "routed_scaling_factor", &moe.routed_scaling_factor));
  RETURN_IF_ERROR(read_or_keep(config, "n_shared_experts", &n_shared_experts));
  RETURN_IF_ERROR(read_or_keep(config, "moe_layer_freq", &moe_layer_freq));
  RETURN_IF_ERROR(read_or_keep(config, "ep_size", &ep_size));
  RETURN_IF_ERROR(read_or_keep(config, "num_nextn_predict_layers", &mtp_layers));
  RETURN_IF_ERROR(expect_string(config, "scoring_func", "sigmoid"));
  RETURN_IF_ERROR(expect_string(config, "topk_method", "noaux_tc"));
  if (moe_layer_freq != 1) {
    return invalid_argument("field 'moe_layer_freq' is " + std::to_string(moe_layer_freq) + "; only 1 is supported");
  }
  if (ep_size != 1) {
    return invalid_argument("field 'ep_size' is " + std::to_string(ep_size) +
                            "; expert parallelism is not implemented (only 1 is supported)");
  }
  if (mtp_layers < 0) return invalid_argument("field 'num_nextn_predict_layers' must be non-negative");
  if (moe.first_k_dense_replace < 0) {  // >= num_hidden_layers: every layer dense, as in transformers
    return invalid_argument("field 'first_k_dense_replace' must be non-negative, got " +
                            std::to_string(moe.first_k_dense_replace));
  }
  if (n_shared_experts < 0 || n_shared_experts > 64) {
    return invalid_argument("field 'n_shared_experts' must be in [0, 64], got " + std::to_string(n_shared_experts));
  }
  moe.shared_expert_intermediate_size = n_shared_experts * moe.moe_intermediate_size;
  if (!(moe.routed_scaling_factor > 0)) return invalid_argument("field 'routed_scaling_factor' must be positive");
  RETURN_IF_ERROR(check_moe_sizes(moe));
  // ops::moe_route_grouped's limits: at most 32 groups of >= 2 experts, top-k within the kept groups' experts.
  if (moe.n_group < 1 || moe.n_group > 32 || moe.num_experts % moe.n_group != 0 || moe.num_experts / moe.n_group < 2) {
    return invalid_argument("field 'n_group' (" + std::to_string(moe.n_group) + ") must divide n_routed_experts (" +
                            std::to_string(moe.num_experts) + ") into at most 32 groups of at least 2 experts");
  }
  if (moe.topk_group < 1 || moe.topk_group > moe.n_group) {
    return invalid_argument("field 'topk_group' must be in [1, n_group = " + std::to_string(moe.n_group) + "], got " +
                            std::to_string(moe.topk_group));
  }
  if (moe.num_experts_per_tok > moe.topk_group * (moe.num_experts / moe.n_group)) {
    return invalid_argument("field 'num_experts_per_tok' (" + std::to_string(moe.num_experts_per_tok) +
                            ") exceeds the experts of the topk_group kept groups (" +
                            std::to_string(moe.topk_group * (moe.num_experts / moe.n_group)) + ")");
  }
  cfg->moe = std::move(moe);
  return ok_status();
}

// The MoE fields of Mixtral / Qwen2-MoE / Qwen3-MoE configs, with transformers' defaults for absent ones.
Status parse_moe(const json& config, const ArchSpec& spec, ModelConfig* cfg) {
  if (spec.moe == MoeStyle::kNone) return ok_status();
  if (spec.moe == MoeStyle::kDeepseekV3) {
    return parse_deepseek_v3(config, cfg);
  }
  MoeConfig moe;
  if (spec.moe == MoeStyle::kMixtral) {
    moe.num_experts = 8;
    moe.num_experts_per_tok = 2;
    RETURN_IF_ERROR(read_or_keep(config, "num_local_experts", &moe.num_experts));
    RETURN_IF_ERROR(read_or_keep(config, "num_experts_per_tok", &moe.num_experts_per_tok));
    moe.moe_intermediate_size = cfg->intermediate_size;  // Mixtral's experts are its MLPs
    moe.norm_topk_prob = true;                           // MixtralTopKRouter always renormalises
  } else {
    const bool qwen2 = spec.moe == MoeStyle::kQwen2Moe;
    moe.num_experts = qwen2 ? 60 : 128;
    moe.num_experts_per_tok = qwen2 ? 4 : 8;
    moe.moe_intermediate_size = qwen2 ? 1408 : 768;
    // transformers 5 writes Qwen3-MoE's count as num_local_experts (an attribute alias); hub configs num_experts.
    RETURN_IF_ERROR(read_or_keep(config, "num_local_experts", &moe.num_experts));
    RETURN_IF_ERROR(read_or_keep(config, "num_experts", &moe.num_experts));
    RETURN_IF_ERROR(read_or_keep(config, "num_experts_per_tok", &moe.num_experts_per_tok));
    RETURN_IF_ERROR(read_or_keep(config, "moe_intermediate_size", &moe.moe_intermediate_size));
    RETURN_IF_ERROR(read_or_keep(config, "norm_topk_prob", &moe.norm_topk_prob));
    RETURN_IF_ERROR(read_or_keep(config, "decoder_sparse_step", &moe.decoder_sparse_step));
    if (qwen2) {
      moe.shared_expert_intermediate_size = 5632;
      RETURN_IF_ERROR(read_or_keep(config, "shared_expert_intermediate_size", &moe.shared_expert_intermediate_size));
      bool qkv_bias = true;  // Qwen2MoeConfig.qkv_bias
      RETURN_IF_ERROR(read_or_keep(config, "qkv_bias", &qkv_bias));
      cfg->attention_qkv_bias = qkv_bias;
    } else {
      // Qwen3-MoE slides every layer when use_sliding_window (no max_window_layers): not the Qwen2 rule here.
      std::optional<bool> sliding;
      RETURN_IF_ERROR(get_bool(config, "use_sliding_window", &sliding));
      if (sliding.value_or(false)) return invalid_argument("Qwen3-MoE with use_sliding_window true is not supported");
    }
    auto it = config.find("mlp_only_layers");
    if (it != config.end() && !it->is_null()) {
      if (!it->is_array()) return invalid_argument(field_error_text("mlp_only_layers", *it, "a list of layer indices"));
      for (const json& v : *it) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= cfg->num_hidden_layers) {
          return invalid_argument(field_error_text("mlp_only_layers", *it, "a list of layer indices"));
        }
        moe.mlp_only_layers.push_back(v.get<int64_t>());
      }
    }
  }
  RETURN_IF_ERROR(check_moe_sizes(moe));
  cfg->moe = std::move(moe);
  return ok_status();
}

// The limits every MoE config must fit (the MoE ops').
Status check_moe_sizes(const MoeConfig& moe) {
  if (moe.num_experts <= 0 || moe.num_experts > kMaxExperts) {
    return invalid_argument("the number of experts must be in [1, " + std::to_string(kMaxExperts) + "], got " +
                            std::to_string(moe.num_experts));
  }
  if (moe.num_experts_per_tok <= 0 || moe.num_experts_per_tok > std::min(moe.num_experts, kMaxTopK)) {
    return invalid_argument("field 'num_experts_per_tok' must be in [1, min(num_experts, " + std::to_string(kMaxTopK) +
                            ")], got " + std::to_string(moe.num_experts_per_tok));
  }
  if (moe.moe_intermediate_size <= 0 || moe.moe_intermediate_size > kMaxSize) {
    return invalid_argument("field 'moe_intermediate_size' must be positive, got " +
                            std::to_string(moe.moe_intermediate_size));
  }
  if (moe.shared_expert_intermediate_size < 0 || moe.shared_expert_intermediate_size > kMaxSize) {
    return invalid_argument("field 'shared_expert_intermediate_size' must be non-negative");
  }
  if (moe.decoder_sparse_step <= 0) return invalid_argument("field 'decoder_sparse_step' must be positive");
  return ok_status();
}

StatusOr<json> read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path + ": cannot read");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    return invalid_argument(path + ": not valid JSON: " + e.what());
  }
}

}  // namespace

std::string_view rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::kDefault:
      return "default";
    case RopeType::kLinear:
      return "linear";
    case RopeType::kLlama3:
      return "llama3";
    case RopeType::kYarn:
      return "yarn";
  }
  return "?";
}

bool MoeConfig::is_sparse_layer(int64_t layer) const {
  for (int64_t dense : mlp_only_layers) {
    if (dense == layer) return false;
  }
  return layer >= first_k_dense_replace && (layer + 1) % decoder_sparse_step == 0;
}

std::optional<int64_t> ModelConfig::sliding_window_for_layer(int64_t layer) const {
  if (!sliding_window || layer < 0 || layer >= static_cast<int64_t>(sliding_window_layers.size())) return {};
  return sliding_window_layers[static_cast<size_t>(layer)] ? sliding_window : std::nullopt;
}

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> v;
    for (const Architecture& a : architectures()) v.emplace_back(a.name);
    return v;
  }();
  return kNames;
}

StatusOr<ModelConfig> parse_model_config(const nlohmann::json& config) {
  if (!config.is_object()) return invalid_argument("config is not a JSON object");
  try {
    ModelConfig cfg;
    ASSIGN_OR_RETURN(const Architecture* arch, find_arch(config, &cfg));
    const ArchSpec* spec = &arch->config;
    RETURN_IF_ERROR(parse_sizes(config, *spec, &cfg));
    RETURN_IF_ERROR(parse_flags(config, *spec, &cfg));
    RETURN_IF_ERROR(parse_rope(config, &cfg));
    RETURN_IF_ERROR(parse_sliding_window(config, *spec, &cfg));
    RETURN_IF_ERROR(parse_moe(config, *spec, &cfg));
    return cfg;
  } catch (const json::exception& e) {  // a safety net: every read above checks types first
    return invalid_argument(std::string("config: ") + e.what());
  }
}

StatusOr<ModelConfig> load_model_config(const std::string& dir) {
  std::error_code ec;
  const std::string path = std::filesystem::is_regular_file(dir, ec) ? dir : dir + "/config.json";
  ASSIGN_OR_RETURN(json j, read_json_file(path));
  StatusOr<ModelConfig> cfg = parse_model_config(j);
  if (!cfg.ok()) return cfg.status().with_context(path);
  return cfg;
}

StatusOr<GenerationConfig> parse_generation_config(const nlohmann::json& config) {
  if (!config.is_object()) return invalid_argument("generation config is not a JSON object");
  try {
    GenerationConfig g;
    RETURN_IF_ERROR(get_double(config, "temperature", &g.temperature));
    RETURN_IF_ERROR(get_double(config, "top_p", &g.top_p));
    RETURN_IF_ERROR(get_int(config, "top_k", &g.top_k));
    RETURN_IF_ERROR(get_double(config, "min_p", &g.min_p));
    RETURN_IF_ERROR(get_double(config, "repetition_penalty", &g.repetition_penalty));
    RETURN_IF_ERROR(get_int(config, "max_new_tokens", &g.max_new_tokens));
    RETURN_IF_ERROR(get_int(config, "max_length", &g.max_length));
    RETURN_IF_ERROR(get_bool(config, "do_sample", &g.do_sample));
    RETURN_IF_ERROR(get_int(config, "bos_token_id", &g.bos_token_id));
    RETURN_IF_ERROR(get_id_list(config, "eos_token_id", &g.eos_token_ids));
    RETURN_IF_ERROR(get_int(config, "pad_token_id", &g.pad_token_id));
    return g;
  } catch (const json::exception& e) {
    return invalid_argument(std::string("generation config: ") + e.what());
  }
}

StatusOr<GenerationConfig> load_generation_config(const std::string& dir) {
  const std::string path = dir + "/generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return GenerationConfig{};
  ASSIGN_OR_RETURN(json j, read_json_file(path));
  StatusOr<GenerationConfig> g = parse_generation_config(j);
  if (!g.ok()) return g.status().with_context(path);
  return g;
}

}  // namespace llmserve

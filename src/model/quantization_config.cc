// quantization_config parsing (see quantization_config.h). Each format reads the fields vLLM reads; a field that
// would change the numerics and that we do not implement is refused naming it, calibration-only fields (damp_percent,
// true_sequential, ...) are not numerics and are passed over, as vLLM does.
#include "model/quantization_config.h"

#include <nlohmann/json.hpp>

namespace llmserve {
namespace {

using json = nlohmann::json;

Status field_error(const std::string& field, const json& value, const std::string& want) {
  return invalid_argument("quantization_config." + field + " " + value.dump() + ": " + want);
}

const json* find(const json& j, const std::string& key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// The first present key of `keys` as an integer (AWQ spells bits "w_bit" and group_size "q_group_size").
Status get_int(const json& j, std::initializer_list<const char*> keys, const std::string& prefix, int64_t* out,
               bool required) {
  for (const char* key : keys) {
    const json* v = find(j, key);
    if (v == nullptr) continue;
    if (!v->is_number_integer()) return field_error(prefix + key, *v, "expected an integer");
    *out = v->get<int64_t>();
    return ok_status();
  }
  if (required) return invalid_argument("quantization_config." + prefix + *keys.begin() + " is missing");
  return ok_status();
}

Status get_bool(const json& j, const char* key, const std::string& prefix, bool* out) {
  const json* v = find(j, key);
  if (v == nullptr) return ok_status();
  if (!v->is_boolean()) return field_error(prefix + key, *v, "expected true or false");
  *out = v->get<bool>();
  return ok_status();
}

Status get_string(const json& j, const char* key, const std::string& prefix, std::string* out) {
  const json* v = find(j, key);
  if (v == nullptr) return ok_status();
  if (!v->is_string()) return field_error(prefix + key, *v, "expected a string");
  *out = v->get<std::string>();
  return ok_status();
}

// Lists of modules left unquantized: only the lm_head (which llmserve never quantizes) may be named.
Status check_only_lm_head(const json& j, const char* key, const std::string& prefix) {
  const json* v = find(j, key);
  if (v == nullptr) return ok_status();
  if (!v->is_array()) return field_error(prefix + key, *v, "expected a list of module names");
  for (const json& name : *v) {
    if (!name.is_string() || (name != "lm_head" && name != "re:.*lm_head")) {
      return field_error(prefix + key, *v, "leaving modules other than lm_head unquantized is not supported");
    }
  }
  return ok_status();
}

StatusOr<QuantizationConfig> parse_fp8(const json& q) {
  QuantizationConfig c;
  c.scheme = QuantScheme::kFp8;
  std::string fmt = "e4m3", scheme = "dynamic";
  RETURN_IF_ERROR(get_string(q, "fmt", "", &fmt));
  if (fmt != "e4m3") return field_error("fmt", q["fmt"], "only e4m3 is supported");
  RETURN_IF_ERROR(get_string(q, "activation_scheme", "", &scheme));
  if (scheme != "static" && scheme != "dynamic") {
    return field_error("activation_scheme", q["activation_scheme"], "expected static or dynamic");
  }
  RETURN_IF_ERROR(check_only_lm_head(q, "ignored_layers", ""));
  RETURN_IF_ERROR(check_only_lm_head(q, "modules_to_not_convert", ""));
  c.activation = scheme == "static" ? ActivationScaleKind::kStaticTensor : ActivationScaleKind::kDynamicToken;
  c.weight_scale = WeightScaleKind::kTensor;
  if (const json* block = find(q, "weight_block_size")) {
    if (!block->is_array() || block->size() != 2 || (*block)[0] != 128 || (*block)[1] != 128) {
      return field_error("weight_block_size", *block, "only [128, 128] is supported");
    }
    if (scheme != "dynamic") {
      return field_error("activation_scheme", q["activation_scheme"], "block-wise fp8 needs dynamic activations");
    }
    c.weight_scale = WeightScaleKind::kBlock;
    c.activation = ActivationScaleKind::kDynamicGroup;
    c.weight_scale_name = "weight_scale_inv";
  }
  return c;
}

// compressed-tensors QuantizationArgs of weights or input_activations.
struct CtArgs {
  int64_t num_bits = 0;
  std::string type, strategy;
  bool symmetric = true, dynamic = false;
  std::optional<int64_t> group_size;
  const json* block_structure = nullptr;
};

Status parse_ct_args(const json& a, const std::string& prefix, CtArgs* out) {
  if (!a.is_object()) return field_error(prefix.substr(0, prefix.size() - 1), a, "expected an object");
  RETURN_IF_ERROR(get_int(a, {"num_bits"}, prefix, &out->num_bits, /*required=*/true));
  RETURN_IF_ERROR(get_string(a, "type", prefix, &out->type));
  RETURN_IF_ERROR(get_string(a, "strategy", prefix, &out->strategy));
  RETURN_IF_ERROR(get_bool(a, "symmetric", prefix, &out->symmetric));
  RETURN_IF_ERROR(get_bool(a, "dynamic", prefix, &out->dynamic));
  int64_t group = 0;
  if (find(a, "group_size") != nullptr) {
    RETURN_IF_ERROR(get_int(a, {"group_size"}, prefix, &group, true));
    out->group_size = group;
  }
  out->block_structure = find(a, "block_structure");
  if (const json* v = find(a, "actorder")) return field_error(prefix + "actorder", *v, "not supported");
  if (!out->symmetric) return field_error(prefix + "symmetric", a["symmetric"], "only symmetric is supported");
  return ok_status();
}

StatusOr<QuantizationConfig> parse_compressed_tensors(const json& q) {
  QuantizationConfig c;
  std::string format;
  RETURN_IF_ERROR(get_string(q, "format", "", &format));
  if (format != "float-quantized" && format != "int-quantized" && format != "naive-quantized") {
    return field_error("format", q.contains("format") ? q["format"] : json(),
                       "supported: float-quantized, int-quantized, naive-quantized");
  }
  if (const json* v = find(q, "kv_cache_scheme")) return field_error("kv_cache_scheme", *v, "not supported");
  if (const json* v = find(q, "sparsity_config"); v != nullptr && !v->empty()) {
    return field_error("sparsity_config", *v, "not supported");
  }
  RETURN_IF_ERROR(check_only_lm_head(q, "ignore", ""));
  const json* groups = find(q, "config_groups");
  if (groups == nullptr || !groups->is_object() || groups->size() != 1) {
    return field_error("config_groups", groups ? *groups : json(), "expected exactly one group");
  }
  const std::string name = groups->begin().key();
  const json& g = groups->begin().value();
  const std::string prefix = "config_groups." + name + ".";
  const json* targets = g.is_object() ? find(g, "targets") : nullptr;
  if (targets == nullptr || *targets != json::array({"Linear"})) {
    return field_error(prefix + "targets", targets ? *targets : json(), "expected [\"Linear\"]");
  }
  if (const json* v = find(g, "output_activations"))
    return field_error(prefix + "output_activations", *v, "not supported");
  const json* wj = find(g, "weights");
  const json* aj = find(g, "input_activations");
  if (wj == nullptr) return invalid_argument("quantization_config." + prefix + "weights is missing");
  if (aj == nullptr) {
    return invalid_argument("quantization_config." + prefix +
                            "input_activations is missing: weight-only (W8A16 / WNA16) schemes are not supported");
  }
  CtArgs w, a;
  RETURN_IF_ERROR(parse_ct_args(*wj, prefix + "weights.", &w));
  RETURN_IF_ERROR(parse_ct_args(*aj, prefix + "input_activations.", &a));
  if (w.num_bits != 8) return field_error(prefix + "weights.num_bits", (*wj)["num_bits"], "only 8 is supported");
  if (a.num_bits != 8) {
    return field_error(prefix + "input_activations.num_bits", (*aj)["num_bits"], "only 8 is supported");
  }
  if (w.type != "float" && w.type != "int") return field_error(prefix + "weights.type", (*wj)["type"], "float or int");
  if (a.type != w.type) {
    return field_error(prefix + "input_activations.type", (*aj)["type"], "must equal weights.type");
  }
  if (w.dynamic) return field_error(prefix + "weights.dynamic", (*wj)["dynamic"], "weights must be static");
  c.scheme = w.type == "float" ? QuantScheme::kFp8 : QuantScheme::kInt8;
  if (w.strategy == "tensor") {
    c.weight_scale = WeightScaleKind::kTensor;
  } else if (w.strategy == "channel") {
    c.weight_scale = WeightScaleKind::kChannel;
  } else if (w.strategy == "block" && c.scheme == QuantScheme::kFp8) {
    if (w.block_structure == nullptr || *w.block_structure != json::array({128, 128})) {
      return field_error(prefix + "weights.block_structure", w.block_structure ? *w.block_structure : json(),
                         "only [128, 128] is supported");
    }
    c.weight_scale = WeightScaleKind::kBlock;
  } else {
    return field_error(prefix + "weights.strategy", (*wj)["strategy"],
                       c.scheme == QuantScheme::kFp8 ? "supported: tensor, channel, block" : "supported: channel");
  }
  if (c.scheme == QuantScheme::kInt8 && c.weight_scale != WeightScaleKind::kChannel) {
    return field_error(prefix + "weights.strategy", (*wj)["strategy"], "int8 supports channel only");
  }
  if (a.dynamic && a.strategy == "token") {
    c.activation = ActivationScaleKind::kDynamicToken;
  } else if (a.dynamic && a.strategy == "group" && a.group_size == 128 && c.weight_scale == WeightScaleKind::kBlock) {
    c.activation = ActivationScaleKind::kDynamicGroup;
  } else if (!a.dynamic && a.strategy == "tensor" && c.scheme == QuantScheme::kFp8 &&
             c.weight_scale != WeightScaleKind::kBlock) {
    c.activation = ActivationScaleKind::kStaticTensor;
  } else {
    return field_error(prefix + "input_activations", *aj,
                       "supported: dynamic per-token; static per-tensor (fp8); dynamic group 128 (fp8 block)");
  }
  if (c.weight_scale == WeightScaleKind::kBlock && c.activation != ActivationScaleKind::kDynamicGroup) {
    return field_error(prefix + "input_activations", *aj, "block weights need dynamic group-128 activations");
  }
  return c;
}

StatusOr<QuantizationConfig> parse_gptq(const json& q) {
  QuantizationConfig c;
  c.scheme = QuantScheme::kGptq;
  RETURN_IF_ERROR(get_int(q, {"bits"}, "", &c.bits, /*required=*/true));
  if (c.bits != 4) return field_error("bits", q["bits"], "only 4-bit is supported");
  RETURN_IF_ERROR(get_int(q, {"group_size"}, "", &c.group_size, /*required=*/true));
  if (c.group_size != 128 && c.group_size != -1) {
    return field_error("group_size", q["group_size"], "supported: 128, -1 (per channel)");
  }
  RETURN_IF_ERROR(get_bool(q, "desc_act", "", &c.desc_act));
  bool sym = true;
  RETURN_IF_ERROR(get_bool(q, "sym", "", &sym));
  if (!sym) return field_error("sym", q["sym"], "only symmetric GPTQ is supported");
  std::string format = "gptq";
  RETURN_IF_ERROR(get_string(q, "checkpoint_format", "", &format));
  if (format != "gptq") return field_error("checkpoint_format", q["checkpoint_format"], "only gptq (v1) is supported");
  bool flag = false;
  RETURN_IF_ERROR(get_bool(q, "lm_head", "", &flag));
  if (flag) return field_error("lm_head", q["lm_head"], "a quantized lm_head is not supported");
  RETURN_IF_ERROR(get_bool(q, "static_groups", "", &flag));
  if (flag) return field_error("static_groups", q["static_groups"], "not supported");
  if (const json* v = find(q, "dynamic"); v != nullptr && !v->empty()) {
    return field_error("dynamic", *v, "per-module overrides are not supported");
  }
  if (const json* v = find(q, "modules_in_block_to_quantize")) {
    return field_error("modules_in_block_to_quantize", *v, "not supported");
  }
  return c;
}

StatusOr<QuantizationConfig> parse_awq(const json& q) {
  QuantizationConfig c;
  c.scheme = QuantScheme::kAwq;
  RETURN_IF_ERROR(get_int(q, {"bits", "w_bit"}, "", &c.bits, /*required=*/true));
  if (c.bits != 4)
    return field_error(q.contains("bits") ? "bits" : "w_bit", q.value("bits", q.value("w_bit", json())),
                       "only 4-bit is supported");
  RETURN_IF_ERROR(get_int(q, {"group_size", "q_group_size"}, "", &c.group_size, /*required=*/true));
  if (c.group_size != 128) {
    return field_error(q.contains("group_size") ? "group_size" : "q_group_size",
                       q.value("group_size", q.value("q_group_size", json())), "only 128 is supported");
  }
  bool zero_point = true;
  RETURN_IF_ERROR(get_bool(q, "zero_point", "", &zero_point));
  if (!zero_point) return field_error("zero_point", q["zero_point"], "only zero_point true is supported");
  std::string version = "gemm";
  RETURN_IF_ERROR(get_string(q, "version", "", &version));
  if (version != "gemm" && version != "GEMM") {
    return field_error("version", q["version"], "only the GEMM layout is supported");
  }
  RETURN_IF_ERROR(check_only_lm_head(q, "modules_to_not_convert", ""));
  return c;
}

}  // namespace

StatusOr<QuantizationConfig> parse_quantization_config(const json& q) {
  if (!q.is_object()) return invalid_argument("quantization_config " + q.dump() + ": expected an object");
  std::string method;
  RETURN_IF_ERROR(get_string(q, "quant_method", "", &method));
  StatusOr<QuantizationConfig> parsed = invalid_argument("");
  if (method == "fp8") {
    parsed = parse_fp8(q);
  } else if (method == "compressed-tensors") {
    parsed = parse_compressed_tensors(q);
  } else if (method == "gptq") {
    parsed = parse_gptq(q);
  } else if (method == "awq") {
    parsed = parse_awq(q);
  } else {
    return invalid_argument("quantization_config.quant_method '" + method +
                            "' is not supported (supported: fp8, compressed-tensors, gptq, awq)");
  }
  if (!parsed.ok()) return invalid_argument(parsed.status().message() + " (quant_method '" + method + "')");
  parsed->quant_method = method;
  return parsed;
}

const char* quantization_flag_values() { return "fp8, compressed-tensors, gptq, awq"; }

StatusOr<std::optional<QuantizationConfig>> resolve_quantization_flag(
    const std::optional<QuantizationConfig>& checkpoint, const std::string& flag, bool dummy_weights) {
  if (flag.empty()) return checkpoint;
  if (flag != "fp8" && flag != "compressed-tensors" && flag != "gptq" && flag != "awq") {
    return invalid_argument("--quantization " + flag + ": not supported (supported: " + quantization_flag_values() +
                            ")");
  }
  if (checkpoint) {
    if (checkpoint->quant_method != flag) {
      return invalid_argument("--quantization " + flag + ": the checkpoint's quantization_config.quant_method is '" +
                              checkpoint->quant_method + "'");
    }
    return checkpoint;
  }
  QuantizationConfig c;
  c.quant_method = flag;
  if (flag == "fp8") {  // vLLM's online fp8: per-channel weights made at load, dynamic per-token activations
    c.scheme = QuantScheme::kFp8;
    c.online = true;
    c.weight_scale = WeightScaleKind::kChannel;
    c.activation = ActivationScaleKind::kDynamicToken;
    return std::optional<QuantizationConfig>(c);
  }
  if (dummy_weights && (flag == "gptq" || flag == "awq")) {
    c.scheme = flag == "gptq" ? QuantScheme::kGptq : QuantScheme::kAwq;
    return std::optional<QuantizationConfig>(c);
  }
  return invalid_argument("--quantization " + flag +
                          ": the checkpoint has no quantization_config (only fp8 quantizes an unquantized checkpoint "
                          "at load; gptq / awq without one need --load-format dummy)");
}

}  // namespace llmserve

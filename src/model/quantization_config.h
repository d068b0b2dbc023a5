// QuantizationConfig: what config.json's `quantization_config` (or the --quantization flag) says about a checkpoint's
// linear weights, parsed as vLLM reads it (fp8, compressed-tensors, gptq, awq). A config that parsed OK names one
// scheme the linear methods implement; every other value is refused at parse time naming its field.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "core/status.h"

namespace llmserve {

enum class QuantScheme : uint8_t {
  kFp8,   // e4m3 weights (per-tensor, per-channel or block scales) x e4m3 activations
  kInt8,  // int8 weights (per-channel scales) x int8 activations (dynamic per token), compressed-tensors W8A8
  kGptq,  // 4-bit weights packed along the input dim, scales [groups, out], qzeros with v1's -1 offset, g_idx
  kAwq,   // 4-bit weights packed along the output dim in AWQ's interleaved order, qzeros, scales [groups, out]
};

// How the weight scales of a scaled-mm scheme are laid out.
enum class WeightScaleKind : uint8_t {
  kTensor,   // one scale per checkpoint tensor ([] or [1]); stacked shards keep one each
  kChannel,  // one per output row ([out] or [out, 1])
  kBlock,    // one per [block_n, block_k] tile ([ceil(out / block_n), ceil(in / block_k)])
};

// How activations are scaled before a scaled-mm.
enum class ActivationScaleKind : uint8_t {
  kStaticTensor,  // `input_scale` from the checkpoint ([] or [1]); stacked shards take the max (as vLLM)
  kDynamicToken,  // one scale per token row, amax / qmax, computed per call
  kDynamicGroup,  // one scale per token and group of group_size input columns (block fp8: 128)
};

struct QuantizationConfig {
  QuantScheme scheme = QuantScheme::kFp8;
  std::string quant_method;  // as config.json spells it ("fp8", "compressed-tensors", "gptq", "awq")
  bool online = false;       // --quantization fp8 on an unquantized checkpoint: per-channel fp8 made at load
  // kFp8 / kInt8
  WeightScaleKind weight_scale = WeightScaleKind::kTensor;
  ActivationScaleKind activation = ActivationScaleKind::kDynamicToken;
  int64_t block_n = 128, block_k = 128;            // kBlock
  std::string weight_scale_name = "weight_scale";  // "weight_scale_inv" for fp8 block checkpoints (DeepSeek-V3)
  // kGptq / kAwq
  int64_t bits = 4;
  int64_t group_size = 128;  // input columns per scale; -1 = one group over the whole input (per channel)
  bool desc_act = false;     // gptq act-order: g_idx permutes the input columns (permuted once at load)
};

// Parses `quantization_config`. InvalidArgument names the field (as "quantization_config.<field>") for an unknown
// quant_method, an unsupported bit width / group size / strategy, or a value llmserve would otherwise ignore.
StatusOr<QuantizationConfig> parse_quantization_config(const nlohmann::json& quantization_config);

// Resolves --quantization (empty: none) against the checkpoint's parsed config. A checkpoint config wins and the
// flag must name its method; "fp8" on an unquantized checkpoint is vLLM's online fp8; "gptq" / "awq" without a
// checkpoint config are accepted only with dummy weights (a benchmark of the format's default layout: 4-bit,
// group 128, desc_act false). Anything else is InvalidArgument naming --quantization.
StatusOr<std::optional<QuantizationConfig>> resolve_quantization_flag(
    const std::optional<QuantizationConfig>& checkpoint, const std::string& flag, bool dummy_weights);

// The names --quantization accepts.
const char* quantization_flag_values();

}  // namespace llmserve

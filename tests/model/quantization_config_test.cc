// parse_quantization_config on configs shaped as each format's tooling writes them (AutoFP8 / DeepSeek-V3 / Qwen3-FP8
// fp8, llm-compressor compressed-tensors, AutoGPTQ, AutoAWQ), and resolve_quantization_flag's rules for
// --quantization. Refusals name the field (tests/cli/test_quantized_models.py checks more of them end to end).
#include "model/quantization_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace llmserve {
namespace {

using json = nlohmann::json;

TEST(QuantizationConfigTest, Fp8PerTensorStaticAndBlock) {
  StatusOr<QuantizationConfig> c = parse_quantization_config(
      json{{"quant_method", "fp8"}, {"activation_scheme", "static"}, {"ignored_layers", {"lm_head"}}});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->scheme, QuantScheme::kFp8);
  EXPECT_EQ(c->weight_scale, WeightScaleKind::kTensor);
  EXPECT_EQ(c->activation, ActivationScaleKind::kStaticTensor);
  c = parse_quantization_config(json{
      {"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 128}}});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->weight_scale, WeightScaleKind::kBlock);
  EXPECT_EQ(c->activation, ActivationScaleKind::kDynamicGroup);
  EXPECT_EQ(c->weight_scale_name, "weight_scale_inv");
}

json ct(const std::string& type, const std::string& strategy, json activations) {
  return {{"quant_method", "compressed-tensors"},
          {"format", type + "-quantized"},
          {"ignore", {"lm_head"}},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights", {{"num_bits", 8}, {"type", type}, {"symmetric", true}, {"strategy", strategy}}},
              {"input_activations", activations}}}}}};
}

TEST(QuantizationConfigTest, CompressedTensorsFp8AndInt8) {
  const json token = {{"num_bits", 8}, {"type", "int"}, {"strategy", "token"}, {"dynamic", true}};
  StatusOr<QuantizationConfig> c = parse_quantization_config(ct("int", "channel", token));
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->scheme, QuantScheme::kInt8);
  EXPECT_EQ(c->weight_scale, WeightScaleKind::kChannel);
  EXPECT_EQ(c->activation, ActivationScaleKind::kDynamicToken);
  json fp8_token = token;
  fp8_token["type"] = "float";
  c = parse_quantization_config(ct("float", "tensor", fp8_token));
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->scheme, QuantScheme::kFp8);
  EXPECT_EQ(c->weight_scale, WeightScaleKind::kTensor);
  // int8 per-tensor weights, asymmetric activations, weight-only: refused naming the field.
  c = parse_quantization_config(ct("int", "tensor", token));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("weights.strategy"), std::string::npos) << c.status().message();
  json asym = token;
  asym["symmetric"] = false;
  c = parse_quantization_config(ct("int", "channel", asym));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("input_activations.symmetric"), std::string::npos) << c.status().message();
  c = parse_quantization_config(ct("int", "channel", nullptr));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("input_activations is missing"), std::string::npos) << c.status().message();
}

TEST(QuantizationConfigTest, GptqAndAwq) {
  StatusOr<QuantizationConfig> c = parse_quantization_config(
      json{{"quant_method", "gptq"}, {"bits", 4}, {"group_size", -1}, {"desc_act", true}, {"sym", true}});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->scheme, QuantScheme::kGptq);
  EXPECT_EQ(c->group_size, -1);
  EXPECT_TRUE(c->desc_act);
  c = parse_quantization_config(
      json{{"quant_method", "awq"}, {"w_bit", 4}, {"q_group_size", 128}, {"zero_point", true}, {"version", "GEMM"}});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->scheme, QuantScheme::kAwq);
  c = parse_quantization_config(json{{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}, {"zero_point", false}});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("quantization_config.zero_point"), std::string::npos);
}

TEST(QuantizationConfigTest, QuantizationFlag) {
  StatusOr<std::optional<QuantizationConfig>> r = resolve_quantization_flag(std::nullopt, "fp8", false);
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_TRUE((*r)->online);
  EXPECT_EQ((*r)->weight_scale, WeightScaleKind::kChannel);
  r = resolve_quantization_flag(std::nullopt, "gptq", /*dummy_weights=*/true);
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ((*r)->scheme, QuantScheme::kGptq);
  r = resolve_quantization_flag(std::nullopt, "gptq", /*dummy_weights=*/false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--quantization gptq"), std::string::npos);
  r = resolve_quantization_flag(std::nullopt, "marlin", false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--quantization marlin"), std::string::npos);
  r = resolve_quantization_flag(std::nullopt, "", false);
  ASSERT_TRUE(r.ok() && !r->has_value());
}

}  // namespace
}  // namespace llmserve

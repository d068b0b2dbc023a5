// The run floor the bench commands print (bench_floors.h), against the arithmetic done by hand on a small config:
// prefill FLOPs per distinct prompt length (LM head on one row per request), the weight-read bound, ceil(decode
// tokens / concurrency) weight reads, and each decode token's KV context.
#include "cli/bench_floors.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace llmserve::cli {
namespace {

ModelConfig small_config() {
  StatusOr<ModelConfig> c = parse_model_config(nlohmann::json{{"architectures", {"LlamaForCausalLM"}},
                                                              {"hidden_size", 64},
                                                              {"intermediate_size", 128},
                                                              {"num_attention_heads", 4},
                                                              {"num_key_value_heads", 2},
                                                              {"num_hidden_layers", 2},
                                                              {"vocab_size", 100},
                                                              {"max_position_embeddings", 256},
                                                              {"rms_norm_eps", 1e-5}});
  EXPECT_TRUE(c.ok()) << c.status().message();
  return *c;
}

// Projections of one layer: q and o 64 x 64, k and v 64 x 32 (2 kv heads of 16), gate, up and down 64 x 128.
constexpr double kLayerParams = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128;
constexpr double kLmHeadParams = 100 * 64;

// One request's prefill by hand: every projection on every token, QK^T and PV over positions 1..len (2 layers,
// q_dim 64), the LM head on one row.
double prefill_by_hand(int len) {
  return 2 * 2 * kLayerParams * len + 2 * 4.0 * 64 * (len * (len + 1) / 2) + 2 * kLmHeadParams;
}

TEST(RunFloor, PrefillDecodeAndKvTermsAddUp) {
  const ModelConfig c = small_config();
  MeasuredRates rates;
  rates.bandwidth = 1e9;
  rates.gemm_rate = 1e9;  // slow enough that the prefill is FLOP-bound here
  const RunWork work{{8, 8, 16}, 13, 2};
  const RunFloor f = run_floor(c, DType::kF32, DType::kF32, rates, work);

  const double weight_bytes = (2 * kLayerParams + kLmHeadParams) * 4;
  EXPECT_DOUBLE_EQ(f.weight_bytes, weight_bytes);
  const double flops = 2 * prefill_by_hand(8) + prefill_by_hand(16);
  EXPECT_NEAR(f.prefill.compute_s, flops / 1e9, 1e-12);
  EXPECT_NEAR(f.prefill.weight_read_s, weight_bytes / 1e9, 1e-12);
  EXPECT_DOUBLE_EQ(f.prefill.seconds, std::max(f.prefill.compute_s, f.prefill.weight_read_s));
  EXPECT_STREQ(f.prefill.bound, "FLOPs at the GEMM rate");
  // 13 output tokens, 3 of them from the prefills: 10 decode tokens, 2 per step.
  EXPECT_EQ(f.decode_steps, 5);
  const double kv_per_token = 2.0 * 2 * 2 * 16 * 4;  // K and V, 2 layers, 2 kv heads, head_dim 16, f32
  const double kv_read = 10 * (32.0 / 3 + 13.0 / 3 / 2) * kv_per_token;
  EXPECT_NEAR(f.kv_read_bytes, kv_read, 1e-6);
  EXPECT_NEAR(f.decode_s, (5 * weight_bytes + kv_read) / 1e9, 1e-12);
  EXPECT_DOUBLE_EQ(f.seconds, f.prefill.seconds + f.decode_s);

  const std::string line = describe_run_floor(f, work, /*cpu=*/true, 2 * f.seconds);
  EXPECT_NE(line.find("LM head on 3 rows"), std::string::npos) << line;
  EXPECT_NE(line.find("5 steps"), std::string::npos) << line;
  EXPECT_NE(line.find("50.0% of the floor's speed"), std::string::npos) << line;
}

TEST(RunFloor, SmallPrefillIsBoundByOneWeightRead) {
  MeasuredRates rates;
  rates.bandwidth = 1e6;  // slow memory: reading the weights once outlasts the FLOPs
  rates.gemm_rate = 1e15;
  const RunFloor f = run_floor(small_config(), DType::kBF16, DType::kBF16, rates, RunWork{{4}, 1, 1});
  EXPECT_STREQ(f.prefill.bound, "one read of the weights");
  EXPECT_DOUBLE_EQ(f.prefill.seconds, f.weight_bytes / 1e6);
  EXPECT_EQ(f.decode_steps, 0);  // the only output token came from the prefill
  EXPECT_EQ(f.decode_s, 0);
}

// DeepSeek-V3's shape at the fixture's sizes (hidden 64, 4 heads, q_lora 32, L 64, R 16, P 32, V 32; 3 layers, the
// first dense; 8 experts of 32, top-2, one shared expert): the latent cache, MLA's projections, the experts a token
// reads, and the absorbed attention's FLOPs, by hand.
TEST(RunFloor, LatentAttentionAndGroupedMoeCountWhatTheEngineReads) {
  StatusOr<ModelConfig> c = parse_model_config(nlohmann::json{{"architectures", {"DeepseekV3ForCausalLM"}},
                                                              {"hidden_size", 64},
                                                              {"intermediate_size", 128},
                                                              {"num_attention_heads", 4},
                                                              {"num_key_value_heads", 4},
                                                              {"num_hidden_layers", 3},
                                                              {"vocab_size", 256},
                                                              {"q_lora_rank", 32},
                                                              {"kv_lora_rank", 64},
                                                              {"qk_rope_head_dim", 16},
                                                              {"qk_nope_head_dim", 32},
                                                              {"v_head_dim", 32},
                                                              {"n_routed_experts", 8},
                                                              {"num_experts_per_tok", 2},
                                                              {"n_group", 4},
                                                              {"topk_group", 2},
                                                              {"n_shared_experts", 1},
                                                              {"moe_intermediate_size", 32},
                                                              {"first_k_dense_replace", 1}});
  ASSERT_TRUE(c.ok()) << c.status().message();
  // One latent row of L + R per layer: no per-head keys, no values.
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(*c, DType::kBF16), 3 * (64 + 16) * 2);
  // q_a 64 x 32 + q_b 32 x 4 (32 + 16); kv_a 64 x 80; kv_b 4 (32 + 32) x 64; o 4 x 32 x 64.
  constexpr double kAttention = 64 * 32 + 32 * 4 * 48 + 64 * 80 + 4 * 64 * 64 + 4 * 32 * 64;
  constexpr double kDense = 3 * 64 * 128;
  // Router 8 x 64, two experts 3 x 64 x 32 each, the ungated shared expert 3 x 64 x 32.
  constexpr double kSparseOneToken = 8 * 64 + 2 * 3 * 64 * 32 + 3 * 64 * 32;
  constexpr double kLayers = 3 * kAttention + kDense + 2 * kSparseOneToken;
  EXPECT_DOUBLE_EQ(layer_matmul_params(*c), kLayers);
  EXPECT_DOUBLE_EQ(step_weight_bytes(*c, DType::kBF16, 1), (kLayers + 256 * 64) * 2);
  // Attention: each head scores the L + R row and sums its L columns: 2 x 4 x (80 + 64) FLOPs per (query, key).
  const int64_t n = 10;
  const double attended = 3.0 * n * (n + 1) / 2;
  EXPECT_DOUBLE_EQ(prefill_flops(*c, 1, n, 1), 2 * kLayers * n + 2.0 * 4 * (80 + 64) * attended + 2 * 256 * 64);
}

TEST(RunFloor, NoCompletedRequestIsAZeroFloor) {
  MeasuredRates rates;
  rates.bandwidth = rates.gemm_rate = 1;
  const RunFloor f = run_floor(small_config(), DType::kF32, DType::kF32, rates, RunWork{});
  EXPECT_EQ(f.seconds, 0);
}

}  // namespace
}  // namespace llmserve::cli

namespace llmserve::cli {
namespace {

// An MoE config (Qwen2-MoE shaped: 8 experts, top-2, a gated shared expert, layer 1 dense): active parameters count
// the router, k experts and the shared expert; a step over B tokens reads E (1 - (1 - k/E)^B) experts per MoE layer.
TEST(RunFloor, MoeCountsActiveExpertsAndTheExpertsTouched) {
  StatusOr<ModelConfig> c = parse_model_config(nlohmann::json{{"architectures", {"Qwen2MoeForCausalLM"}},
                                                              {"hidden_size", 64},
                                                              {"intermediate_size", 128},
                                                              {"num_attention_heads", 4},
                                                              {"num_key_value_heads", 2},
                                                              {"num_hidden_layers", 2},
                                                              {"vocab_size", 100},
                                                              {"max_position_embeddings", 256},
                                                              {"num_experts", 8},
                                                              {"num_experts_per_tok", 2},
                                                              {"moe_intermediate_size", 32},
                                                              {"shared_expert_intermediate_size", 48},
                                                              {"mlp_only_layers", {1}}});
  ASSERT_TRUE(c.ok()) << c.status().message();
  const double attention = 64 * 64 + 2 * 64 * 32 + 64 * 64;
  const double dense_mlp = 3 * 64 * 128, router = 64 * 8, expert = 3 * 64 * 32, shared = 3 * 64 * 48 + 64;
  EXPECT_DOUBLE_EQ(layer_matmul_params(*c), 2 * attention + dense_mlp + router + 2 * expert + shared);
  EXPECT_DOUBLE_EQ(expected_experts_touched(*c->moe, 1), 2.0);
  EXPECT_NEAR(expected_experts_touched(*c->moe, 3), 8 * (1 - 0.75 * 0.75 * 0.75), 1e-12);
  EXPECT_NEAR(expected_experts_touched(*c->moe, 1000), 8.0, 1e-9);
  EXPECT_DOUBLE_EQ(step_read_params(*c, 1), matmul_params(*c));  // batch 1: exactly the active parameters
  EXPECT_NEAR(step_read_params(*c, 1000), 2 * attention + dense_mlp + router + 8 * expert + shared + 100 * 64, 1e-6);
  // A measured average of experts per MoE layer (bench latency's count) in place of the expectation.
  EXPECT_DOUBLE_EQ(step_read_params_with_experts(*c, 2.0), step_read_params(*c, 1));
  EXPECT_NEAR(step_read_params_with_experts(*c, 5.5),
              2 * attention + dense_mlp + router + 5.5 * expert + shared + 100 * 64, 1e-6);
  EXPECT_EQ(moe_layer_count(*c), 1);  // layer 1 is dense (mlp_only_layers)
  EXPECT_EQ(moe_layer_count(small_config()), 0);
}

}  // namespace
}  // namespace llmserve::cli

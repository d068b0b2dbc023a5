// ModelConfig / GenerationConfig parsing: the real TinyLlama, Mistral and GPT-2 files from the test data, inline
// Qwen2 / Qwen3 / Llama-3.1 configs (their public config.json fields), every RoPE type, and error cases.
#include "model/model_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "model/deepseek_v3.h"
#include "model_test_util.h"

namespace llmserve {
namespace {

using nlohmann::json;
using testing::TempDir;
using testing::write_bytes;

std::string tokenizers_dir() { return testing::testdata_dir() + "/tokenizers"; }

bool has(const Status& s, const std::string& frag) { return s.message().find(frag) != std::string::npos; }

json llama_base() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "hidden_act": "silu",
    "torch_dtype": "bfloat16", "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
    "tie_word_embeddings": false, "attention_bias": false, "mlp_bias": false
  })");
}

TEST(ModelConfig, TinyLlamaFromTestData) {
  StatusOr<ModelConfig> cfg = load_model_config(tokenizers_dir() + "/tinyllama-1.1b-chat-v1.0");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_EQ(cfg->architecture, "LlamaForCausalLM");
  EXPECT_EQ(cfg->model_type, "llama");
  EXPECT_EQ(cfg->vocab_size, 32000);
  EXPECT_EQ(cfg->hidden_size, 2048);
  EXPECT_EQ(cfg->intermediate_size, 5632);
  EXPECT_EQ(cfg->num_hidden_layers, 22);
  EXPECT_EQ(cfg->num_attention_heads, 32);
  EXPECT_EQ(cfg->num_key_value_heads, 4);
  EXPECT_EQ(cfg->head_dim, 64);
  EXPECT_EQ(cfg->max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(cfg->rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(cfg->rope_theta, 10000.0);
  EXPECT_EQ(cfg->rope_scaling.type, RopeType::kDefault);
  EXPECT_FALSE(cfg->tie_word_embeddings);
  EXPECT_FALSE(cfg->attention_qkv_bias || cfg->attention_out_bias || cfg->mlp_bias || cfg->qk_norm);
  EXPECT_FALSE(cfg->sliding_window.has_value());
  EXPECT_EQ(cfg->sliding_window_layers.size(), 22u);
  EXPECT_EQ(cfg->dtype, DType::kF32);  // this copy was re-saved with "dtype": "float32"
  EXPECT_EQ(cfg->bos_token_id, 1);
  EXPECT_EQ(cfg->eos_token_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(cfg->q_size(), 2048);
  EXPECT_EQ(cfg->kv_size(), 256);

  StatusOr<GenerationConfig> gen = load_generation_config(tokenizers_dir() + "/tinyllama-1.1b-chat-v1.0");
  ASSERT_TRUE(gen.ok()) << gen.status().to_string();
  EXPECT_EQ(gen->bos_token_id, 1);
  EXPECT_EQ(gen->eos_token_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(gen->max_length, 2048);
  EXPECT_EQ(gen->pad_token_id, 0);
  EXPECT_FALSE(gen->temperature.has_value());
  EXPECT_FALSE(gen->top_p.has_value());
  EXPECT_FALSE(gen->do_sample.has_value());
}

TEST(ModelConfig, MistralFromTestData) {
  const std::string dir = tokenizers_dir() + "/mistral-7b-instruct-v0.3";
  StatusOr<ModelConfig> cfg = load_model_config(dir + "/config.json");  // the file itself also works
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_EQ(cfg->architecture, "MistralForCausalLM");
  EXPECT_EQ(cfg->vocab_size, 32768);
  EXPECT_EQ(cfg->num_key_value_heads, 8);
  EXPECT_EQ(cfg->head_dim, 128);
  EXPECT_EQ(cfg->intermediate_size, 14336);
  EXPECT_EQ(cfg->max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(cfg->rope_theta, 1e6);
  EXPECT_EQ(cfg->dtype, DType::kBF16);
  EXPECT_FALSE(cfg->sliding_window.has_value());  // "sliding_window": null
  StatusOr<GenerationConfig> gen = load_generation_config(dir);
  ASSERT_TRUE(gen.ok());
  EXPECT_EQ(gen->eos_token_ids, (std::vector<int64_t>{2}));
}

TEST(ModelConfig, Gpt2IsUnsupportedWithClearError) {
  StatusOr<ModelConfig> cfg = load_model_config(tokenizers_dir() + "/gpt2");
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(has(cfg.status(), "GPT2LMHeadModel")) << cfg.status().message();
  EXPECT_TRUE(has(cfg.status(), "gpt2/config.json"));
  for (const std::string& arch : supported_architectures()) EXPECT_TRUE(has(cfg.status(), arch)) << arch;
}

TEST(ModelConfig, MistralV01SlidingWindowOnEveryLayer) {
  json j = json::parse(R"({
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 32000, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "hidden_act": "silu", "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2,
    "tie_word_embeddings": false
  })");
  StatusOr<ModelConfig> cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_EQ(cfg->sliding_window, 4096);
  for (int64_t i = 0; i < 32; ++i) EXPECT_EQ(cfg->sliding_window_for_layer(i), 4096) << i;
  EXPECT_FALSE(cfg->attention_qkv_bias);
}

TEST(ModelConfig, Qwen2HasQkvBiasAndOptionalSlidingWindow) {
  // Qwen2.5-0.5B-Instruct's config.json.
  json j = json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 21, "model_type": "qwen2",
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.1", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936
  })");
  StatusOr<ModelConfig> cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_EQ(cfg->head_dim, 64);
  EXPECT_TRUE(cfg->attention_qkv_bias);
  EXPECT_FALSE(cfg->attention_out_bias);
  EXPECT_TRUE(cfg->tie_word_embeddings);
  EXPECT_FALSE(cfg->sliding_window.has_value());  // use_sliding_window is false
  EXPECT_FALSE(cfg->qk_norm);
  EXPECT_EQ(cfg->eos_token_ids, (std::vector<int64_t>{151645}));

  j["use_sliding_window"] = true;
  j["sliding_window"] = 4096;
  cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ(cfg->sliding_window, 4096);
  EXPECT_FALSE(cfg->sliding_window_for_layer(20).has_value());  // below max_window_layers: full attention
  EXPECT_EQ(cfg->sliding_window_for_layer(21), 4096);
  EXPECT_EQ(cfg->sliding_window_for_layer(23), 4096);

  json lt = json::array();
  for (int i = 0; i < 24; ++i) lt.push_back(i % 2 ? "sliding_attention" : "full_attention");
  j["layer_types"] = lt;
  cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok());
  EXPECT_FALSE(cfg->sliding_window_for_layer(0).has_value());
  EXPECT_EQ(cfg->sliding_window_for_layer(1), 4096);
  j["layer_types"] = json::array({"full_attention"});
  EXPECT_FALSE(parse_model_config(j).ok());
}

TEST(ModelConfig, Qwen3HasExplicitHeadDimAndQkNorm) {
  // Qwen3-0.6B's config.json: head_dim (128) is not hidden_size / heads (64).
  json j = json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
    "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 40960,
    "max_window_layers": 28, "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
    "sliding_window": null, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936
  })");
  StatusOr<ModelConfig> cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_EQ(cfg->head_dim, 128);
  EXPECT_EQ(cfg->q_size(), 2048);
  EXPECT_EQ(cfg->kv_size(), 1024);
  EXPECT_TRUE(cfg->qk_norm);
  EXPECT_FALSE(cfg->attention_qkv_bias);
  EXPECT_DOUBLE_EQ(cfg->rope_theta, 1e6);
  EXPECT_EQ(cfg->max_position_embeddings, 40960);
  EXPECT_TRUE(cfg->tie_word_embeddings);
  j["attention_bias"] = true;
  cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok());
  EXPECT_TRUE(cfg->attention_qkv_bias && cfg->attention_out_bias);
}

// The public config.json fields of Qwen3-30B-A3B, Qwen1.5-MoE-A2.7B and Mixtral-8x7B.
TEST(ModelConfig, Qwen3MoeRoutingFields) {
  json j = json::parse(R"({
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "decoder_sparse_step": 1, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144, "max_position_embeddings": 40960,
    "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
    "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 48, "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_sliding_window": false,
    "vocab_size": 151936
  })");
  StatusOr<ModelConfig> cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  ASSERT_TRUE(cfg->moe.has_value());
  EXPECT_EQ(cfg->moe->num_experts, 128);
  EXPECT_EQ(cfg->moe->num_experts_per_tok, 8);
  EXPECT_EQ(cfg->moe->moe_intermediate_size, 768);
  EXPECT_TRUE(cfg->moe->norm_topk_prob);
  EXPECT_EQ(cfg->moe->shared_expert_intermediate_size, 0);
  EXPECT_TRUE(cfg->qk_norm);
  for (int64_t i = 0; i < 48; ++i) EXPECT_TRUE(cfg->moe->is_sparse_layer(i));
  j["use_sliding_window"] = true;
  EXPECT_TRUE(has(parse_model_config(j).status(), "use_sliding_window"));
  j["use_sliding_window"] = false;
  j["num_experts_per_tok"] = 129;
  EXPECT_TRUE(has(parse_model_config(j).status(), "num_experts_per_tok"));
  j["num_experts_per_tok"] = 8;
  j["num_experts"] = 0;
  EXPECT_TRUE(has(parse_model_config(j).status(), "number of experts"));
  j.erase("num_experts");
  j["num_local_experts"] = 16;  // transformers 5 writes the count under this name
  cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_EQ(cfg->moe->num_experts, 16);
  j["norm_topk_prob"] = nullptr;  // absent: transformers' default, false
  EXPECT_FALSE(parse_model_config(j)->moe->norm_topk_prob);
}

TEST(ModelConfig, Qwen2MoeSharedExpertAndDenseLayers) {
  json j = json::parse(R"({
    "architectures": ["Qwen2MoeForCausalLM"], "decoder_sparse_step": 2, "hidden_size": 2048,
    "intermediate_size": 5632, "max_position_embeddings": 8192, "max_window_layers": 21, "model_type": "qwen2_moe",
    "moe_intermediate_size": 1408, "norm_topk_prob": false, "num_attention_heads": 16, "num_experts": 60,
    "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 16, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "shared_expert_intermediate_size": 5632, "sliding_window": 32768,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_sliding_window": false, "vocab_size": 151936,
    "mlp_only_layers": [3]
  })");
  StatusOr<ModelConfig> cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_EQ(cfg->moe->num_experts, 60);
  EXPECT_EQ(cfg->moe->shared_expert_intermediate_size, 5632);
  EXPECT_FALSE(cfg->moe->norm_topk_prob);
  EXPECT_TRUE(cfg->attention_qkv_bias);        // Qwen2MoeConfig.qkv_bias defaults to true
  EXPECT_FALSE(cfg->moe->is_sparse_layer(0));  // (0 + 1) % 2 != 0
  EXPECT_TRUE(cfg->moe->is_sparse_layer(1));
  EXPECT_FALSE(cfg->moe->is_sparse_layer(3));  // listed in mlp_only_layers
  EXPECT_TRUE(cfg->moe->is_sparse_layer(5));
  j["qkv_bias"] = false;
  EXPECT_FALSE(parse_model_config(j)->attention_qkv_bias);
  j["mlp_only_layers"] = {24};
  EXPECT_TRUE(has(parse_model_config(j).status(), "mlp_only_layers"));
  j["mlp_only_layers"] = json::array();
  j["decoder_sparse_step"] = 0;
  EXPECT_TRUE(has(parse_model_config(j).status(), "decoder_sparse_step"));
}

TEST(ModelConfig, MixtralExpertsAreItsMlps) {
  json j = json::parse(R"({
    "architectures": ["MixtralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "sliding_window": null, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "vocab_size": 32000
  })");
  StatusOr<ModelConfig> cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_EQ(cfg->moe->num_experts, 8);
  EXPECT_EQ(cfg->moe->num_experts_per_tok, 2);
  EXPECT_EQ(cfg->moe->moe_intermediate_size, 14336);
  EXPECT_TRUE(cfg->moe->norm_topk_prob);  // Mixtral always renormalises
  EXPECT_FALSE(cfg->sliding_window.has_value());
  j["sliding_window"] = 4096;
  EXPECT_EQ(parse_model_config(j)->sliding_window_for_layer(5), 4096);
  EXPECT_FALSE(parse_model_config(llama_base())->moe.has_value());
}

// DeepSeek-V3's public config.json (its fp8 quantization_config aside): MLA sizes, the grouped sigmoid router, the
// dense first layers, head_dim taken from qk_rope_head_dim (transformers' rule) and the yarn softmax scale.
json deepseek_v3_base() {
  return json::parse(R"({
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false, "aux_loss_alpha": 0.001, "bos_token_id": 0,
    "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
    "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1,
    "norm_topk_prob": true, "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
    "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": true,
    "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
    "v_head_dim": 128, "vocab_size": 129280
  })");
}

TEST(ModelConfig, DeepseekV3LatentAttentionAndGroupedRouting) {
  StatusOr<ModelConfig> cfg = parse_model_config(deepseek_v3_base());
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  ASSERT_TRUE(cfg->mla.has_value() && cfg->moe.has_value());
  EXPECT_EQ(cfg->mla->q_lora_rank, 1536);
  EXPECT_EQ(cfg->mla->kv_lora_rank, 512);
  EXPECT_EQ(cfg->mla->qk_nope_head_dim, 128);
  EXPECT_EQ(cfg->mla->qk_rope_head_dim, 64);
  EXPECT_EQ(cfg->mla->v_head_dim, 128);
  EXPECT_EQ(cfg->mla->latent_size(), 576);
  EXPECT_TRUE(cfg->mla->rope_interleave);  // DeepseekV3Config's default
  EXPECT_EQ(cfg->head_dim, 64);
  EXPECT_EQ(cfg->rope_scaling.type, RopeType::kYarn);
  const MoeConfig& m = *cfg->moe;
  EXPECT_TRUE(m.grouped_routing);
  EXPECT_EQ(m.num_experts, 256);
  EXPECT_EQ(m.num_experts_per_tok, 8);
  EXPECT_EQ(m.n_group, 8);
  EXPECT_EQ(m.topk_group, 4);
  EXPECT_DOUBLE_EQ(m.routed_scaling_factor, 2.5);
  EXPECT_EQ(m.shared_expert_intermediate_size, 2048);
  for (int64_t i = 0; i < 61; ++i) EXPECT_EQ(m.is_sparse_layer(i), i >= 3) << i;
  // (128 + 64)^-0.5 * (0.1 * ln 40 + 1)^2, as DeepseekV3Attention.scaling.
  const double mscale = 0.1 * std::log(40.0) + 1.0;
  EXPECT_NEAR(mla_softmax_scale(*cfg), mscale * mscale / std::sqrt(192.0), 1e-7);

  json j = deepseek_v3_base();
  j["q_lora_rank"] = nullptr;  // DeepSeek-V2-Lite style: q_proj directly
  j.erase("rope_scaling");
  j["rope_interleave"] = false;
  cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_EQ(cfg->mla->q_lora_rank, 0);
  EXPECT_FALSE(cfg->mla->rope_interleave);
  EXPECT_NEAR(mla_softmax_scale(*cfg), 1.0 / std::sqrt(192.0), 1e-8);  // a float
  // Linear rope with mscale_all_dim: transformers scales the softmax for any non-default rope type.
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}, {"mscale_all_dim", 0.5}};
  cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  const double linear_mscale = 0.1 * 0.5 * std::log(4.0) + 1.0;
  EXPECT_NEAR(mla_softmax_scale(*cfg), linear_mscale * linear_mscale / std::sqrt(192.0), 1e-7);
}

// The bench shape (bench/configs/deepseek-v3-8l.json): DeepSeek-V3 cut to 8 layers, 3 dense then 5 MoE.
TEST(ModelConfig, DeepseekV3BenchConfigParses) {
  StatusOr<ModelConfig> cfg = load_model_config("bench/configs/deepseek-v3-8l.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_EQ(cfg->num_hidden_layers, 8);
  EXPECT_EQ(cfg->mla->latent_size(), 576);
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(cfg->moe->is_sparse_layer(i), i >= 3) << i;
  EXPECT_EQ(cfg->dtype, DType::kBF16);
}

TEST(ModelConfig, DeepseekV3RefusesWhatIsNotImplemented) {
  const std::vector<std::pair<std::function<void(json&)>, const char*>> cases = {
      {[](json& j) { j["scoring_func"] = "softmax"; }, "scoring_func"},
      {[](json& j) { j["topk_method"] = "greedy"; }, "topk_method"},
      {[](json& j) { j["n_group"] = 7; }, "n_group"},
      {[](json& j) { j["topk_group"] = 9; }, "topk_group"},
      {[](json& j) { j["topk_group"] = 1, j["num_experts_per_tok"] = 33; }, "num_experts_per_tok"},
      {[](json& j) { j["moe_layer_freq"] = 2; }, "moe_layer_freq"},
      {[](json& j) { j["ep_size"] = 8; }, "ep_size"},
      {[](json& j) { j["num_key_value_heads"] = 64; }, "num_key_value_heads"},
      {[](json& j) { j["kv_lora_rank"] = 0; }, "kv_lora_rank"},
      {[](json& j) { j["qk_rope_head_dim"] = 63; }, "qk_rope_head_dim"},
      {[](json& j) { j["first_k_dense_replace"] = -1; }, "first_k_dense_replace"},
      {[](json& j) { j["routed_scaling_factor"] = 0; }, "routed_scaling_factor"},
      {[](json& j) {
         j["quantization_config"] = {{"quant_method", "fp8"},
                                     {"activation_scheme", "dynamic"},
                                     {"fmt", "e4m3"},
                                     {"weight_block_size", {128, 128}}};
       },
       "quantization_config"},
  };
  for (const auto& [edit, field] : cases) {
    json j = deepseek_v3_base();
    edit(j);
    const Status s = parse_model_config(j).status();
    EXPECT_TRUE(has(s, field)) << field << ": " << s.to_string();
  }
}

TEST(ModelConfig, LlamaDefaultsAndFlags) {
  json j = llama_base();
  j.erase("num_key_value_heads");
  j.erase("max_position_embeddings");
  j.erase("rms_norm_eps");
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  StatusOr<ModelConfig> cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_EQ(cfg->num_key_value_heads, 32);
  EXPECT_EQ(cfg->max_position_embeddings, 2048);  // LlamaConfig's default
  EXPECT_DOUBLE_EQ(cfg->rms_norm_eps, 1e-6);
  EXPECT_TRUE(cfg->attention_qkv_bias && cfg->attention_out_bias && cfg->mlp_bias);
  EXPECT_EQ(cfg->eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(cfg->dtype, DType::kBF16);
  // No architectures: model_type decides.
  j.erase("architectures");
  cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ(cfg->architecture, "LlamaForCausalLM");
}

TEST(ModelConfig, RopeScalingTypes) {
  json j = llama_base();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  StatusOr<ModelConfig> cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_EQ(cfg->rope_scaling.type, RopeType::kLinear);
  EXPECT_DOUBLE_EQ(cfg->rope_scaling.factor, 2.0);

  // Llama 3.1's block.
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_EQ(cfg->rope_scaling.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(cfg->rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(cfg->rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(cfg->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(cfg->rope_scaling.original_max_position_embeddings, 8192);

  j["rope_scaling"] = {{"rope_type", "yarn"},   {"factor", 4.0},     {"original_max_position_embeddings", 32768},
                       {"beta_fast", 16},       {"beta_slow", 2},    {"mscale", 0.707},
                       {"mscale_all_dim", 0.5}, {"truncate", false}, {"attention_factor", 1.25}};
  cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  const RopeScaling& y = cfg->rope_scaling;
  EXPECT_EQ(y.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(y.factor, 4.0);
  EXPECT_EQ(y.original_max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(y.beta_fast, 16);
  EXPECT_DOUBLE_EQ(y.beta_slow, 2);
  EXPECT_DOUBLE_EQ(*y.mscale, 0.707);
  EXPECT_DOUBLE_EQ(*y.mscale_all_dim, 0.5);
  EXPECT_DOUBLE_EQ(*y.attention_factor, 1.25);
  EXPECT_FALSE(y.truncate);

  // YaRN defaults: beta 32/1, truncate, original = max_position_embeddings; no factor -> derived from the ratio.
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"beta_fast", nullptr}};
  cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_DOUBLE_EQ(cfg->rope_scaling.beta_fast, 32);
  EXPECT_DOUBLE_EQ(cfg->rope_scaling.beta_slow, 1);
  EXPECT_TRUE(cfg->rope_scaling.truncate);
  EXPECT_EQ(cfg->rope_scaling.original_max_position_embeddings, 131072);
  EXPECT_FALSE(cfg->rope_scaling.attention_factor.has_value());
  j["rope_scaling"] = {{"type", "yarn"}, {"original_max_position_embeddings", 32768}};
  cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_DOUBLE_EQ(cfg->rope_scaling.factor, 4.0);  // 131072 / 32768

  j["rope_scaling"] = {{"rope_type", "default"}};
  cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ(cfg->rope_scaling.type, RopeType::kDefault);
}

TEST(ModelConfig, Transformers5RopeParameters) {
  json j = llama_base();
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_theta", 500000.0},  {"rope_type", "llama3"},
                          {"factor", 32.0},          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  j["rope_scaling"] = nullptr;
  StatusOr<ModelConfig> cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_DOUBLE_EQ(cfg->rope_theta, 500000.0);
  EXPECT_EQ(cfg->rope_scaling.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(cfg->rope_scaling.factor, 32.0);

  json k = llama_base();
  k.erase("rope_theta");
  k["rope_scaling"] = {{"rope_theta", 250000.0}, {"rope_type", "default"}};
  cfg = parse_model_config(k);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_DOUBLE_EQ(cfg->rope_theta, 250000.0);

  // A stray top-level rope_theta loses to the one inside rope_parameters (transformers 5's rule).
  json both = llama_base();
  both["rope_parameters"] = {{"rope_theta", 1e6}, {"rope_type", "default"}};
  cfg = parse_model_config(both);
  ASSERT_TRUE(cfg.ok());
  EXPECT_DOUBLE_EQ(cfg->rope_theta, 1e6);

  k["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}}},
                          {"sliding_attention", {{"rope_type", "default"}}}};
  EXPECT_FALSE(parse_model_config(k).ok());
}

TEST(ModelConfig, InvalidConfigsNameTheField) {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    std::vector<const char*> fragments;
  };
  std::vector<Case> cases = {
      {"dynamic rope",
       [](json& j) {
         j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
       },
       {"dynamic", "default, linear, llama3, yarn"}},
      {"longrope",
       [](json& j) {
         j["rope_scaling"] = {{"rope_type", "longrope"}};
       },
       {"longrope", "supported"}},
      {"linear without factor",
       [](json& j) {
         j["rope_scaling"] = {{"type", "linear"}};
       },
       {"factor"}},
      {"llama3 without low",
       [](json& j) {
         j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"high_freq_factor", 4.0}};
       },
       {"low_freq_factor"}},
      {"llama3 high <= low",
       [](json& j) {
         j["rope_scaling"] = {
             {"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 4.0}, {"high_freq_factor", 4.0}};
       },
       {"high_freq_factor"}},
      {"factor string",
       [](json& j) {
         j["rope_scaling"] = {{"type", "linear"}, {"factor", "2"}};
       },
       {"factor"}},
      {"rope_scaling list", [](json& j) { j["rope_scaling"] = json::array({1}); }, {"rope_scaling"}},
      {"heads not divisible", [](json& j) { j["num_key_value_heads"] = 5; }, {"num_key_value_heads", "32"}},
      {"odd head_dim", [](json& j) { j["head_dim"] = 63; }, {"head_dim"}},
      {"hidden not divisible", [](json& j) { j["hidden_size"] = 4095; }, {"hidden_size"}},
      {"negative layers", [](json& j) { j["num_hidden_layers"] = -1; }, {"num_hidden_layers"}},
      {"zero vocab", [](json& j) { j["vocab_size"] = 0; }, {"vocab_size"}},
      {"missing vocab", [](json& j) { j.erase("vocab_size"); }, {"vocab_size", "missing"}},
      {"string size", [](json& j) { j["hidden_size"] = "big"; }, {"hidden_size", "integer"}},
      {"float size", [](json& j) { j["hidden_size"] = 4096.5; }, {"hidden_size"}},
      {"bool flag as int", [](json& j) { j["tie_word_embeddings"] = 1; }, {"tie_word_embeddings"}},
      {"gelu", [](json& j) { j["hidden_act"] = "gelu"; }, {"gelu", "silu"}},
      {"float64", [](json& j) { j["torch_dtype"] = "float64"; }, {"float64", "bfloat16"}},
      {"quantized",
       [](json& j) {
         j["quantization_config"] = {{"quant_method", "gptq"}};
       },
       {"gptq"}},
      {"eos wrong type", [](json& j) { j["eos_token_id"] = "2"; }, {"eos_token_id"}},
      {"eos negative",
       [](json& j) {
         j["eos_token_id"] = json::array({1, -2});
       },
       {"eos_token_id"}},
      {"architectures not list", [](json& j) { j["architectures"] = "LlamaForCausalLM"; }, {"architectures"}},
      {"unknown architecture",
       [](json& j) { j["architectures"] = json::array({"FalconForCausalLM"}); },
       {"FalconForCausalLM", "Qwen3ForCausalLM"}},
      {"partial rotary", [](json& j) { j["partial_rotary_factor"] = 0.5; }, {"partial_rotary_factor"}},
      {"zero eps", [](json& j) { j["rms_norm_eps"] = 0; }, {"rms_norm_eps"}},
      {"tiny theta", [](json& j) { j["rope_theta"] = 1e-300; }, {"rope_theta"}},
      {"huge head_dim", [](json& j) { j["head_dim"] = 1 << 20; }, {"head_dim"}},
      {"implausible vocab", [](json& j) { j["vocab_size"] = int64_t{1} << 40; }, {"vocab_size", "implausibly"}},
      {"huge int", [](json& j) { j["hidden_size"] = 18446744073709551615ull; }, {"hidden_size"}},
  };
  for (const Case& c : cases) {
    json j = llama_base();
    c.edit(j);
    StatusOr<ModelConfig> cfg = parse_model_config(j);
    ASSERT_FALSE(cfg.ok()) << c.what;
    EXPECT_EQ(cfg.status().code(), StatusCode::kInvalidArgument) << c.what;
    for (const char* frag : c.fragments)
      EXPECT_TRUE(has(cfg.status(), frag)) << c.what << ": " << cfg.status().message();
  }
  EXPECT_FALSE(parse_model_config(json::array()).ok());
  json no_arch = llama_base();
  no_arch.erase("architectures");
  no_arch["model_type"] = "falcon";
  EXPECT_FALSE(parse_model_config(no_arch).ok());
}

TEST(ModelConfig, FileErrorsNameTheFile) {
  TempDir dir;
  StatusOr<ModelConfig> missing = load_model_config(dir.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(has(missing.status(), dir.path() + "/config.json"));
  write_bytes(dir.file("config.json"), "{\"vocab_size\": 3,,}");
  StatusOr<ModelConfig> bad = load_model_config(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(has(bad.status(), "config.json"));
  EXPECT_TRUE(has(bad.status(), "JSON"));
  json j = llama_base();
  j["num_key_value_heads"] = 3;
  write_bytes(dir.file("config.json"), j.dump());
  bad = load_model_config(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(has(bad.status(), "config.json")) << bad.status().message();
  EXPECT_TRUE(has(bad.status(), "num_key_value_heads"));
}

TEST(GenerationConfig, FieldsAndErrors) {
  TempDir dir;
  StatusOr<GenerationConfig> absent = load_generation_config(dir.path());
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->temperature || absent->top_p || absent->top_k || absent->eos_token_ids || absent->do_sample);

  // Llama-3.1-8B-Instruct's generation_config.json.
  write_bytes(dir.file("generation_config.json"), R"({
    "bos_token_id": 128000, "do_sample": true, "eos_token_id": [128001, 128008, 128009], "temperature": 0.6,
    "top_p": 0.9, "transformers_version": "4.42.3"})");
  StatusOr<GenerationConfig> g = load_generation_config(dir.path());
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->bos_token_id, 128000);
  EXPECT_EQ(g->do_sample, true);
  EXPECT_EQ(g->eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_DOUBLE_EQ(*g->temperature, 0.6);
  EXPECT_DOUBLE_EQ(*g->top_p, 0.9);
  EXPECT_FALSE(g->top_k.has_value());
  EXPECT_FALSE(g->max_new_tokens.has_value());

  StatusOr<GenerationConfig> g2 = parse_generation_config(json::parse(
      R"({"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.05, "max_new_tokens": 128, "temperature": 1})"));
  ASSERT_TRUE(g2.ok());
  EXPECT_EQ(g2->top_k, 20);
  EXPECT_DOUBLE_EQ(*g2->min_p, 0.05);
  EXPECT_DOUBLE_EQ(*g2->repetition_penalty, 1.05);
  EXPECT_EQ(g2->max_new_tokens, 128);
  EXPECT_DOUBLE_EQ(*g2->temperature, 1.0);

  write_bytes(dir.file("generation_config.json"), R"({"temperature": "hot"})");
  StatusOr<GenerationConfig> bad = load_generation_config(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(has(bad.status(), "generation_config.json"));
  EXPECT_TRUE(has(bad.status(), "temperature"));
  EXPECT_FALSE(parse_generation_config(json::parse(R"({"do_sample": "yes"})")).ok());
  EXPECT_FALSE(parse_generation_config(json::parse(R"({"top_k": 2.5})")).ok());
}

}  // namespace
}  // namespace llmserve

// RoPE tables against (1) hand-derived values for small configs, pinned as literals (computed once by hand with
// Python's math module), including both sides of each llama3 band edge and the yarn ramp, and (2) a plain
// double-precision transcription of HF's formulas for realistic configs (Llama 3.1, Qwen yarn, DeepSeek mscale).
#include "model/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>

namespace llmserve {
namespace {

ModelConfig base_config(int64_t head_dim, double theta, int64_t max_pos = 4096) {
  ModelConfig cfg;
  cfg.architecture = "LlamaForCausalLM";
  cfg.head_dim = head_dim;
  cfg.rope_theta = theta;
  cfg.max_position_embeddings = max_pos;
  return cfg;
}

// Reference: HF's formulas written directly in double precision.
struct RefRope {
  std::vector<double> inv_freq;
  double attention_factor = 1.0;
};

RefRope reference(const ModelConfig& cfg) {
  const RopeScaling& rs = cfg.rope_scaling;
  const int64_t dim = cfg.head_dim;
  RefRope out;
  auto mscale = [](double s, double m) { return s <= 1 ? 1.0 : 0.1 * m * std::log(s) + 1.0; };
  double low = 0, high = 0;
  if (rs.type == RopeType::kYarn) {
    const double orig = static_cast<double>(rs.original_max_position_embeddings);
    auto corr = [&](double rot) {
      return dim * std::log(orig / (rot * 2 * std::numbers::pi)) / (2 * std::log(cfg.rope_theta));
    };
    low = corr(rs.beta_fast);
    high = corr(rs.beta_slow);
    if (rs.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1.0);
    if (low == high) high += 0.001;
    if (rs.attention_factor)
      out.attention_factor = *rs.attention_factor;
    else if (rs.mscale.value_or(0) && rs.mscale_all_dim.value_or(0))
      out.attention_factor = mscale(rs.factor, *rs.mscale) / mscale(rs.factor, *rs.mscale_all_dim);
    else
      out.attention_factor = mscale(rs.factor, 1.0);
  }
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double inv = std::pow(cfg.rope_theta, -2.0 * i / dim);
    double v = inv;
    if (rs.type == RopeType::kLinear) v = inv / rs.factor;
    if (rs.type == RopeType::kLlama3) {
      const double orig = static_cast<double>(rs.original_max_position_embeddings);
      const double wavelen = 2 * std::numbers::pi / inv;
      if (wavelen > orig / rs.low_freq_factor) {
        v = inv / rs.factor;
      } else if (wavelen >= orig / rs.high_freq_factor) {
        const double s = (orig / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        v = (1 - s) * inv / rs.factor + s * inv;
      }
    }
    if (rs.type == RopeType::kYarn) {
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      v = inv / rs.factor * ramp + inv * (1 - ramp);
    }
    out.inv_freq.push_back(v);
  }
  return out;
}

void expect_matches_reference(const ModelConfig& cfg, int64_t max_position) {
  StatusOr<RopeFrequencies> f = compute_rope_frequencies(cfg);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  RefRope ref = reference(cfg);
  ASSERT_EQ(f->inv_freq.size(), ref.inv_freq.size());
  for (size_t i = 0; i < ref.inv_freq.size(); ++i) {
    EXPECT_NEAR(f->inv_freq[i], ref.inv_freq[i], 1e-6 * ref.inv_freq[i]) << "inv_freq " << i;
  }
  EXPECT_NEAR(f->attention_factor, ref.attention_factor, 1e-6 * ref.attention_factor);
  StatusOr<Tensor> cache = build_rope_cos_sin_cache(cfg, max_position);
  ASSERT_TRUE(cache.ok()) << cache.status().to_string();
  ASSERT_EQ(cache->shape(), (Shape{max_position, cfg.head_dim}));
  const int64_t half = cfg.head_dim / 2;
  for (int64_t p : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{100}, int64_t{1000}, max_position - 1}) {
    if (p >= max_position) continue;
    const float* row = cache->data<float>() + p * cfg.head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * ref.inv_freq[i];
      // float32 inv_freq and angle carry ~1e-7 relative error: the tolerance grows with the angle, as HF's does.
      const double tol = 2e-6 + angle * 4e-7;
      ASSERT_NEAR(row[i], std::cos(angle) * ref.attention_factor, tol) << "cos p=" << p << " i=" << i;
      ASSERT_NEAR(row[half + i], std::sin(angle) * ref.attention_factor, tol) << "sin p=" << p << " i=" << i;
    }
  }
}

TEST(Rope, DefaultHandDerived) {
  ModelConfig cfg = base_config(8, 10000.0);  // inv_freq = 1, 0.1, 0.01, 0.001
  StatusOr<Tensor> cache = build_rope_cos_sin_cache(cfg, 4);
  ASSERT_TRUE(cache.ok()) << cache.status().to_string();
  const float* r0 = cache->data<float>();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(r0[i], 1.0f);
    EXPECT_EQ(r0[4 + i], 0.0f);
  }
  const float* r3 = cache->data<float>() + 3 * 8;
  EXPECT_NEAR(r3[0], -0.9899924966004454, 1e-6);  // cos(3)
  EXPECT_NEAR(r3[4], 0.1411200080598672, 1e-6);   // sin(3)
  EXPECT_NEAR(r3[1], 0.955336489125606, 1e-6);    // cos(0.3)
  EXPECT_NEAR(r3[5], 0.29552020666133955, 1e-6);  // sin(0.3)
  EXPECT_NEAR(r3[3], std::cos(0.003), 1e-6);
}

TEST(Rope, LinearDividesFrequencies) {
  ModelConfig cfg = base_config(8, 10000.0);
  cfg.rope_scaling.type = RopeType::kLinear;
  cfg.rope_scaling.factor = 4.0;
  StatusOr<RopeFrequencies> f = compute_rope_frequencies(cfg);
  ASSERT_TRUE(f.ok());
  EXPECT_FLOAT_EQ(f->inv_freq[0], 0.25f);
  EXPECT_FLOAT_EQ(f->inv_freq[1], 0.025f);
  StatusOr<Tensor> cache = build_rope_cos_sin_cache(cfg, 8);
  ASSERT_TRUE(cache.ok());
  EXPECT_NEAR(cache->data<float>()[4 * 8 + 0], std::cos(1.0), 1e-6);  // position 4 at a quarter speed
}

// head_dim 8, theta 100: inv_freq 1, 0.3162, 0.1, 0.03162 with wavelengths 6.28, 19.9, 62.8, 198.7. With
// factor 8, low 1, high 4 the band edges are original/1 and original/4.
TEST(Rope, Llama3BandEdgesHandDerived) {
  struct Case {
    int64_t original;
    float expect[4];
  };
  const Case cases[] = {
      // low edge 64: 62.8 is inside the blended band; 198.7 is above it (divided by 8); 6.28 below 16 (kept).
      {64, {1.0f, 0.24438459943539834f, 0.013042256043820465f, 0.003952847075210474f}},
      // low edge 62: 62.8 is now just above it, so it is divided by 8 exactly.
      {62, {1.0f, 0.23510056108837107f, 0.0125f, 0.003952847075210474f}},
      // high edge 6.5: 6.28 is just below it, kept.
      {26, {1.0f, 0.06798787084188097f, 0.0125f, 0.003952847075210474f}},
      // high edge 6.25: 6.28 is just above it, so blended.
      {25, {0.9938381267117369f, 0.06334585166836737f, 0.0125f, 0.003952847075210474f}},
  };
  for (const Case& c : cases) {
    ModelConfig cfg = base_config(8, 100.0);
    cfg.rope_scaling.type = RopeType::kLlama3;
    cfg.rope_scaling.factor = 8;
    cfg.rope_scaling.low_freq_factor = 1;
    cfg.rope_scaling.high_freq_factor = 4;
    cfg.rope_scaling.original_max_position_embeddings = c.original;
    StatusOr<RopeFrequencies> f = compute_rope_frequencies(cfg);
    ASSERT_TRUE(f.ok());
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(f->inv_freq[i], c.expect[i], 1e-6 * c.expect[i]) << c.original << " " << i;
    EXPECT_EQ(f->attention_factor, 1.0f);
  }
}

// head_dim 16, theta 1e4, original 2048, factor 4, beta 32/1: the correction range is [2.016, 5.026], truncated
// to [2, 6]; dims <= 2 keep their frequency, dims >= 6 are divided by 4, dims 3..5 are ramped.
TEST(Rope, YarnRampHandDerived) {
  ModelConfig cfg = base_config(16, 10000.0);
  cfg.rope_scaling.type = RopeType::kYarn;
  cfg.rope_scaling.factor = 4;
  cfg.rope_scaling.original_max_position_embeddings = 2048;
  const float truncated[8] = {1.0f,     0.31622776601683794f,  0.1f,     0.02569350598886808f,
                              0.00625f, 0.001383496476323666f, 0.00025f, 7.905694150420948e-05f};
  const float exact[8] = {
      1.0f,     0.31622776601683794f,  0.1f, 0.023870192321736323f, 0.005056971521129435f, 0.000811290381701431f,
      0.00025f, 7.905694150420948e-05f};
  for (bool truncate : {true, false}) {
    cfg.rope_scaling.truncate = truncate;
    StatusOr<RopeFrequencies> f = compute_rope_frequencies(cfg);
    ASSERT_TRUE(f.ok());
    for (int i = 0; i < 8; ++i) {
      float want = truncate ? truncated[i] : exact[i];
      EXPECT_NEAR(f->inv_freq[i], want, 1e-6 * want) << "truncate=" << truncate << " i=" << i;
    }
    EXPECT_NEAR(f->attention_factor, 1.138629436111989, 1e-6);  // 0.1 ln 4 + 1
  }
  // The attention factor scales both cos and sin: row 0 is [af x8, 0 x8].
  StatusOr<Tensor> cache = build_rope_cos_sin_cache(cfg, 2);
  ASSERT_TRUE(cache.ok());
  for (int i = 0; i < 8; ++i) {
    EXPECT_NEAR(cache->data<float>()[i], 1.138629436111989, 1e-6);
    EXPECT_EQ(cache->data<float>()[8 + i], 0.0f);
  }
  EXPECT_NEAR(cache->data<float>()[16 + 8], std::sin(1.0) * 1.138629436111989, 1e-6);

  // mscale / mscale_all_dim: ratio of the two mscales; an explicit attention_factor wins; zeros mean "unset".
  cfg.rope_scaling.mscale = 1.0;
  cfg.rope_scaling.mscale_all_dim = 0.5;
  EXPECT_NEAR(compute_rope_frequencies(cfg)->attention_factor, 1.0648216253695715, 1e-6);
  cfg.rope_scaling.mscale_all_dim = 0.0;
  EXPECT_NEAR(compute_rope_frequencies(cfg)->attention_factor, 1.138629436111989, 1e-6);
  cfg.rope_scaling.attention_factor = 0.5;
  EXPECT_FLOAT_EQ(compute_rope_frequencies(cfg)->attention_factor, 0.5f);
  cfg.rope_scaling.attention_factor.reset();
  cfg.rope_scaling.factor = 1.0;
  EXPECT_FLOAT_EQ(compute_rope_frequencies(cfg)->attention_factor, 1.0f);
}

TEST(Rope, RealisticConfigsMatchDoubleReference) {
  ModelConfig llama = base_config(128, 500000.0, 131072);  // Llama 3.1 8B
  llama.rope_scaling.type = RopeType::kLlama3;
  llama.rope_scaling.factor = 8;
  llama.rope_scaling.low_freq_factor = 1;
  llama.rope_scaling.high_freq_factor = 4;
  llama.rope_scaling.original_max_position_embeddings = 8192;
  expect_matches_reference(llama, 8192);

  ModelConfig plain = base_config(64, 10000.0, 2048);  // TinyLlama
  expect_matches_reference(plain, 2048);

  ModelConfig linear = base_config(128, 10000.0);
  linear.rope_scaling.type = RopeType::kLinear;
  linear.rope_scaling.factor = 2;
  expect_matches_reference(linear, 4096);

  ModelConfig qwen = base_config(128, 1000000.0, 131072);  // Qwen2.5 with the recommended yarn block
  qwen.rope_scaling.type = RopeType::kYarn;
  qwen.rope_scaling.factor = 4;
  qwen.rope_scaling.original_max_position_embeddings = 32768;
  expect_matches_reference(qwen, 4096);

  ModelConfig deepseek = base_config(64, 10000.0, 163840);  // DeepSeek-V2-Lite's yarn block
  deepseek.rope_scaling.type = RopeType::kYarn;
  deepseek.rope_scaling.factor = 40;
  deepseek.rope_scaling.original_max_position_embeddings = 4096;
  deepseek.rope_scaling.mscale = 0.707;
  deepseek.rope_scaling.mscale_all_dim = 0.707;
  deepseek.rope_scaling.truncate = false;
  expect_matches_reference(deepseek, 2048);
}

TEST(Rope, FromParsedConfig) {
  nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}},
                      {"vocab_size", 100},
                      {"hidden_size", 64},
                      {"intermediate_size", 128},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 4},
                      {"max_position_embeddings", 512},
                      {"rope_theta", 500000.0},
                      {"rope_scaling",
                       {{"rope_type", "llama3"},
                        {"factor", 8.0},
                        {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 64}}}};
  StatusOr<ModelConfig> cfg = parse_model_config(j);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  expect_matches_reference(*cfg, 512);
}

TEST(Rope, Errors) {
  ModelConfig cfg = base_config(8, 10000.0);
  EXPECT_FALSE(build_rope_cos_sin_cache(cfg, 0).ok());
  EXPECT_FALSE(build_rope_cos_sin_cache(cfg, -5).ok());
  cfg.head_dim = 7;
  EXPECT_FALSE(build_rope_cos_sin_cache(cfg, 4).ok());
  cfg.head_dim = 8;
  cfg.rope_scaling.type = RopeType::kLlama3;
  cfg.rope_scaling.low_freq_factor = cfg.rope_scaling.high_freq_factor = 2;
  cfg.rope_scaling.original_max_position_embeddings = 64;
  cfg.rope_scaling.factor = 8;
  EXPECT_FALSE(compute_rope_frequencies(cfg).ok());
  // Parameters that overflow float32 are refused rather than producing inf/NaN tables.
  cfg.rope_scaling = RopeScaling();
  cfg.rope_theta = 1e300;
  EXPECT_FALSE(compute_rope_frequencies(cfg).ok());
  cfg.rope_theta = 10000;
  cfg.rope_scaling.type = RopeType::kYarn;
  cfg.rope_scaling.factor = 1e-300;
  cfg.rope_scaling.original_max_position_embeddings = 64;
  EXPECT_FALSE(compute_rope_frequencies(cfg).ok());
  cfg.rope_scaling.factor = 2;
  cfg.head_dim = 4096;
  EXPECT_FALSE(build_rope_cos_sin_cache(cfg, 1 << 24).ok());  // 256 GiB
}

}  // namespace
}  // namespace llmserve

// Checks against files made by the reference implementations (tests/model/fixtures/make_hf_fixtures.py):
// a safetensors file written by the `safetensors` library itself, and HF transformers' rotary tables for several
// config.json rope blocks, parsed here with parse_model_config and rebuilt with build_rope_cos_sin_cache.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "model/model_config.h"
#include "model/rope.h"
#include "model/safetensors.h"
#include "model/weight_source.h"

namespace llmserve {
namespace {

const std::string kFixtures = "tests/model/fixtures/";  // ctest runs from the repository root

template <typename T>
std::vector<T> values_of(const SafetensorsFile& f, const std::string& name) {
  StatusOr<Tensor> t = f.view(name);
  EXPECT_TRUE(t.ok()) << name << ": " << t.status().to_string();
  if (!t.ok()) return {};
  return std::vector<T>(t->data<T>(), t->data<T>() + t->numel());
}

TEST(HfFixtures, ReadsReferenceWriterFile) {
  StatusOr<SafetensorsFile> f = SafetensorsFile::open(kFixtures + "reference_dtypes.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->info("f32")->shape, (Shape{2, 3}));
  EXPECT_EQ(values_of<float>(*f, "f32"), (std::vector<float>{1.5f, -2.25f, 3.0f, 0.1f, 1e-3f, -7.0f}));
  EXPECT_EQ(values_of<int64_t>(*f, "i64"), (std::vector<int64_t>{-1, int64_t{1} << 40, 3}));
  EXPECT_EQ(values_of<int32_t>(*f, "i32"), (std::vector<int32_t>{-7, 8}));
  EXPECT_EQ(values_of<uint8_t>(*f, "u8"), (std::vector<uint8_t>{0, 255, 7}));
  EXPECT_EQ(f->info("empty")->shape, (Shape{0, 3}));
  auto src = open_safetensors_checkpoint(kFixtures + "reference_dtypes.safetensors");
  ASSERT_TRUE(src.ok());
  const std::vector<float> halves = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f};
  for (const auto& [name, shape] : std::vector<std::pair<std::string, Shape>>{{"f16", {3, 2}}, {"bf16", {6}}}) {
    StatusOr<Tensor> t = (*src)->get(name, shape, DType::kF32);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(std::vector<float>(t->data<float>(), t->data<float>() + 6), halves) << name;
  }
  StatusOr<Tensor> fp8 = (*src)->get("f8_e4m3", {4}, DType::kF32);
  ASSERT_TRUE(fp8.ok());
  EXPECT_EQ(std::vector<float>(fp8->data<float>(), fp8->data<float>() + 4),
            (std::vector<float>{0.5f, -1.0f, 448.0f, 0.015625f}));
  // I8 loads as i8 (compressed-tensors INT8 weights); a float request of it is a refused integer conversion.
  ASSERT_NE(f->info("i8"), nullptr);
  EXPECT_TRUE(f->info("i8")->supported);
  EXPECT_TRUE(f->view("i8").ok());
  EXPECT_EQ(f->view("i8")->dtype(), DType::kI8);
  const std::pair<const char*, const char*> unsupported[] = {{"bool", "BOOL"}, {"i16", "I16"}, {"f64", "F64"},
                                                             {"f8_e5m2", "F8_E5M2"}, {"u16", "U16"}, {"u32", "U32"},
                                                             {"u64", "U64"}};
  for (const auto& [name, dtype] : unsupported) {
    const TensorInfo* info = f->info(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_FALSE(info->supported);
    EXPECT_EQ(safetensors_dtype_name(info->stored_dtype), dtype);
    StatusOr<Tensor> v = f->view(name);
    ASSERT_FALSE(v.ok());
    EXPECT_NE(v.status().message().find(dtype), std::string::npos) << v.status().message();
  }
}

TEST(HfFixtures, RopeMatchesTransformers) {
  StatusOr<SafetensorsFile> f = SafetensorsFile::open(kFixtures + "hf_rope.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const std::vector<int64_t> positions = values_of<int64_t>(*f, "positions");
  ASSERT_FALSE(positions.empty());
  const nlohmann::json cases = nlohmann::json::parse(f->metadata().at("cases"));
  ASSERT_GE(cases.size(), 8u);
  for (const auto& case_name : cases) {
    const std::string name = case_name.get<std::string>();
    SCOPED_TRACE(name);
    StatusOr<ModelConfig> cfg = parse_model_config(nlohmann::json::parse(f->metadata().at(name + ".config")));
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    StatusOr<RopeFrequencies> freq = compute_rope_frequencies(*cfg);
    ASSERT_TRUE(freq.ok());
    const std::vector<float> hf_inv = values_of<float>(*f, name + ".inv_freq");
    ASSERT_EQ(freq->inv_freq.size(), hf_inv.size());
    int exact = 0;
    for (size_t i = 0; i < hf_inv.size(); ++i) {
      EXPECT_NEAR(freq->inv_freq[i], hf_inv[i], 2e-7 * hf_inv[i]) << "inv_freq " << i;  // at most an ulp or so
      exact += freq->inv_freq[i] == hf_inv[i];
    }
    EXPECT_GE(exact, static_cast<int>(hf_inv.size()) * 9 / 10) << "inv_freq should mostly be bit-identical";
    EXPECT_FLOAT_EQ(freq->attention_factor, values_of<float>(*f, name + ".attention_scaling")[0]);

    StatusOr<Tensor> cache = build_rope_cos_sin_cache(*cfg, positions.back() + 1);
    ASSERT_TRUE(cache.ok());
    const std::vector<float> hf_cos = values_of<float>(*f, name + ".cos");
    const std::vector<float> hf_sin = values_of<float>(*f, name + ".sin");
    const int64_t half = cfg->head_dim / 2;
    ASSERT_EQ(hf_cos.size(), positions.size() * half);
    // The angles are HF's float32 angles, so what remains is cos/sin rounding -- except where HF's vectorised
    // float32 pow put an inv_freq one ulp away from the correctly rounded one: that difference, times the
    // position, is the only other slack allowed (HF on CUDA differs from HF on CPU in the same way).
    double max_err = 0;
    for (size_t k = 0; k < positions.size(); ++k) {
      const float* row = cache->data<float>() + positions[k] * cfg->head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const double delta = std::fabs(freq->inv_freq[i] - hf_inv[i]);
        const double angle = static_cast<double>(positions[k]) * hf_inv[i];
        // p * delta, plus one float32 ulp of the angle each side for the rounding of the product.
        const double slack = delta == 0 ? 0 : static_cast<double>(positions[k]) * delta + 2.5e-7 * angle;
        const double err_cos = std::fabs(row[i] - hf_cos[k * half + i]);
        const double err_sin = std::fabs(row[half + i] - hf_sin[k * half + i]);
        ASSERT_LE(err_cos, 2e-6 + slack) << "cos p=" << positions[k] << " i=" << i;
        ASSERT_LE(err_sin, 2e-6 + slack) << "sin p=" << positions[k] << " i=" << i;
        if (slack == 0) max_err = std::max({max_err, err_cos, err_sin});
      }
    }
    EXPECT_LT(max_err, 2e-6) << "where inv_freq is bit-identical, cos/sin agree to float rounding";
  }
}

}  // namespace
}  // namespace llmserve

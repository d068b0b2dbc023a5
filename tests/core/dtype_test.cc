// dtype conversions: exhaustive round trips for 8/16-bit types and known values from IEEE / OCP FP8 tables.
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

namespace llmserve {
namespace {

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kFP8E4M3), 1u);
  DType t;
  ASSERT_TRUE(parse_dtype("bfloat16", &t));
  EXPECT_EQ(t, DType::kBF16);
  ASSERT_TRUE(parse_dtype("float16", &t));
  EXPECT_EQ(t, DType::kF16);
  EXPECT_FALSE(parse_dtype("float128", &t));
}

TEST(DType, Bf16RoundTripEveryValue) {
  for (uint32_t b = 0; b < 65536; ++b) {
    bf16_t v{static_cast<uint16_t>(b)};
    float f = bf16_to_f32(v);
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_bf16(f).bits, v.bits) << b;
  }
  // Ties round to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)).bits, f32_to_bf16(1.0f).bits);
}

TEST(DType, F16RoundTripEveryValue) {
  for (uint32_t b = 0; b < 65536; ++b) {
    f16_t v{static_cast<uint16_t>(b)};
    float f = f16_to_f32(v);
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f).bits, v.bits) << b;
  }
  EXPECT_EQ(f16_to_f32(f16_t{0x3c00}), 1.0f);
  EXPECT_EQ(f16_to_f32(f16_t{0x7bff}), 65504.0f);
  EXPECT_EQ(f16_to_f32(f16_t{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_to_f16(1e6f).bits, 0x7c00);  // overflow to inf
}

TEST(DType, Fp8E4M3KnownValuesAndRoundTrip) {
  EXPECT_EQ(fp8_e4m3_to_f32(fp8_e4m3_t{0x7e}), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(fp8_e4m3_t{0x38}), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(fp8_e4m3_t{0x01}), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(fp8_e4m3_t{0x7f})));
  for (uint32_t b = 0; b < 256; ++b) {
    fp8_e4m3_t v{static_cast<uint8_t>(b)};
    float f = fp8_e4m3_to_f32(v);
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_fp8_e4m3(f).bits, v.bits) << b;
  }
  EXPECT_EQ(f32_to_fp8_e4m3(1000.0f).bits, 0x7e);   // saturates
  EXPECT_EQ(f32_to_fp8_e4m3(-1000.0f).bits, 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(1.0625f).bits, 0x38);   // halfway 1 and 1.125 -> even (1.0)
}

TEST(DType, ConvertElementsBetweenTypes) {
  float src[4] = {1.5f, -2.0f, 3.25f, 100.0f};
  bf16_t mid[4];
  float back[4];
  convert_elements(src, DType::kF32, mid, DType::kBF16, 4);
  convert_elements(mid, DType::kBF16, back, DType::kF32, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back[i], src[i]);
  int32_t ints[4];
  convert_elements(src, DType::kF32, ints, DType::kI32, 4);
  EXPECT_EQ(ints[0], 1);
  EXPECT_EQ(ints[1], -2);
}

}  // namespace
}  // namespace llmserve

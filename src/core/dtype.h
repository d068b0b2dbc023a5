// Element types a Tensor can hold and scalar conversions between them and float.
// Conversions round to nearest even; fp8 is e4m3fn (no infinities, saturating at +-448, NaN = 0x7f/0xff).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace llmserve {

enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8, kFP8E4M3, kI8 };

// Bytes per element.
size_t dtype_size(DType dtype);
// Short lowercase name: "f32", "bf16", "fp8_e4m3", ...
std::string_view dtype_name(DType dtype);
// Parses our names and the HF/torch names ("float32", "bfloat16", "float16", "half").
bool parse_dtype(std::string_view name, DType* dtype);
bool dtype_is_float(DType dtype);

// Storage types: plain 16/8-bit words, converted explicitly, never by implicit arithmetic.
struct bf16_t { uint16_t bits; };
struct f16_t { uint16_t bits; };
struct fp8_e4m3_t { uint8_t bits; };

inline float bf16_to_f32(bf16_t v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bf16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_t{static_cast<uint16_t>((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return bf16_t{static_cast<uint16_t>(u >> 16)};
}

float f16_to_f32(f16_t v);
f16_t f32_to_f16(float f);
float fp8_e4m3_to_f32(fp8_e4m3_t v);
fp8_e4m3_t f32_to_fp8_e4m3(float f);

// Converts n elements from `src` (of src_type) into `dst` (of dst_type); float <-> integer conversions
// truncate like a C cast. Any pair of the dtypes above is supported.
void convert_elements(const void* src, DType src_type, void* dst, DType dst_type, size_t n);

}  // namespace llmserve

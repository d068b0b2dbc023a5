// Scalar conversions for f16 and fp8-e4m3 (bit-exact with IEEE / OCP FP8 rounding) and bulk conversion.
#include "core/dtype.h"

#include <cmath>

#include "core/logging.h"

namespace llmserve {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
    case DType::kFP8E4M3: return 1;
    case DType::kI8: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
    case DType::kFP8E4M3: return "fp8_e4m3";
    case DType::kI8: return "i8";
  }
  return "?";
}

bool parse_dtype(std::string_view name, DType* dtype) {
  if (name == "f32" || name == "float32" || name == "float") *dtype = DType::kF32;
  else if (name == "f16" || name == "float16" || name == "half") *dtype = DType::kF16;
  else if (name == "bf16" || name == "bfloat16") *dtype = DType::kBF16;
  else if (name == "i32" || name == "int32") *dtype = DType::kI32;
  else if (name == "i64" || name == "int64") *dtype = DType::kI64;
  else if (name == "u8" || name == "uint8") *dtype = DType::kU8;
  else if (name == "i8" || name == "int8") *dtype = DType::kI8;
  else if (name == "fp8_e4m3" || name == "float8_e4m3fn") *dtype = DType::kFP8E4M3;
  else return false;
  return true;
}

bool dtype_is_float(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 || dtype == DType::kFP8E4M3;
}

float f16_to_f32(f16_t v) {
  uint32_t sign = (v.bits & 0x8000u) << 16;
  uint32_t exp = (v.bits >> 10) & 0x1f;
  uint32_t mant = v.bits & 0x3ff;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);  // inf / NaN
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    u = sign;
  } else {  // subnormal: value = mant * 2^-24
    float f = std::ldexp(static_cast<float>(mant), -24);
    std::memcpy(&u, &f, 4);
    u |= sign;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

f16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return f16_t{static_cast<uint16_t>(sign | 0x7e00)};
  if (abs >= 0x477ff000u) return f16_t{static_cast<uint16_t>(sign | 0x7c00)};  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {  // below the smallest normal f16 (2^-14): subnormal or zero
    float a;
    std::memcpy(&a, &abs, 4);
    float scaled = a * 16777216.0f;  // units of 2^-24, exact
    uint32_t m = static_cast<uint32_t>(std::nearbyint(scaled));  // default rounding mode: nearest even
    return f16_t{static_cast<uint16_t>(sign | m)};
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  uint16_t h = static_cast<uint16_t>(((rounded >> 13) - (112u << 10)));
  return f16_t{static_cast<uint16_t>(sign | h)};
}

float fp8_e4m3_to_f32(fp8_e4m3_t v) {
  uint32_t sign = v.bits & 0x80u;
  uint32_t exp = (v.bits >> 3) & 0xf;
  uint32_t mant = v.bits & 0x7;
  if (exp == 0xf && mant == 0x7) return std::nanf("");
  float value = exp == 0 ? std::ldexp(static_cast<float>(mant), -9)
                         : std::ldexp(static_cast<float>(8 + mant), static_cast<int>(exp) - 10);
  return sign ? -value : value;
}

fp8_e4m3_t f32_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return fp8_e4m3_t{0x7f};
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (a >= 448.0f) return fp8_e4m3_t{static_cast<uint8_t>(sign | 0x7e)};  // saturate (fn has no inf)
  int exp;
  std::frexp(a, &exp);  // a = m * 2^exp, m in [0.5, 1)
  int e = exp - 1;      // a = 1.xxx * 2^e
  if (e < -6) e = -6;   // subnormal range shares the 2^-9 quantum
  float quantum = std::ldexp(1.0f, e - 3);
  float q = std::nearbyint(a / quantum);  // integer in [0, 16]
  uint32_t units = static_cast<uint32_t>(q);
  if (units == 0) return fp8_e4m3_t{sign};
  if (e == -6 && units < 8) return fp8_e4m3_t{static_cast<uint8_t>(sign | units)};
  if (units == 16) {
    units = 8;
    ++e;
  }
  uint32_t biased = static_cast<uint32_t>(e + 7);
  uint8_t bits = static_cast<uint8_t>((biased << 3) | (units - 8));
  if (bits > 0x7e) bits = 0x7e;
  return fp8_e4m3_t{static_cast<uint8_t>(sign | bits)};
}

namespace {

double load_as_double(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kF16: return f16_to_f32(static_cast<const f16_t*>(p)[i]);
    case DType::kBF16: return bf16_to_f32(static_cast<const bf16_t*>(p)[i]);
    case DType::kI32: return static_cast<const int32_t*>(p)[i];
    case DType::kI64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::kU8: return static_cast<const uint8_t*>(p)[i];
    case DType::kFP8E4M3: return fp8_e4m3_to_f32(static_cast<const fp8_e4m3_t*>(p)[i]);
    case DType::kI8: return static_cast<const int8_t*>(p)[i];
  }
  return 0;
}

void store_from_double(void* p, DType t, size_t i, double v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::kF16: static_cast<f16_t*>(p)[i] = f32_to_f16(static_cast<float>(v)); break;
    case DType::kBF16: static_cast<bf16_t*>(p)[i] = f32_to_bf16(static_cast<float>(v)); break;
    case DType::kI32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::kI64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DType::kU8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DType::kFP8E4M3: static_cast<fp8_e4m3_t*>(p)[i] = f32_to_fp8_e4m3(static_cast<float>(v)); break;
    case DType::kI8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
  }
}

}  // namespace

void convert_elements(const void* src, DType src_type, void* dst, DType dst_type, size_t n) {
  if (src_type == dst_type) {
    std::memcpy(dst, src, n * dtype_size(src_type));
    return;
  }
  // The hot pairs (weight loading) get tight loops; the rest go through double.
  if (src_type == DType::kBF16 && dst_type == DType::kF32) {
    auto* s = static_cast<const bf16_t*>(src);
    auto* d = static_cast<float*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = bf16_to_f32(s[i]);
    return;
  }
  if (src_type == DType::kF32 && dst_type == DType::kBF16) {
    auto* s = static_cast<const float*>(src);
    auto* d = static_cast<bf16_t*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(s[i]);
    return;
  }
  if (src_type == DType::kF16 && dst_type == DType::kF32) {
    auto* s = static_cast<const f16_t*>(src);
    auto* d = static_cast<float*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = f16_to_f32(s[i]);
    return;
  }
  for (size_t i = 0; i < n; ++i) store_from_double(dst, dst_type, i, load_as_double(src, src_type, i));
}

}  // namespace llmserve

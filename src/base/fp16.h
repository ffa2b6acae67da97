// IEEE binary16 (fp16) and bfloat16 bits as float32, one value at a time: the scales
// of ggml's block kinds (src/kv/kinds/q8_0.cc, q4_0.cc) and the F16 and BF16 tensors
// of safetensors files (src/io/safetensors.cc). The vector conversions are
// src/simd's.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace mha::internal {

// IEEE binary16 of x, rounded to nearest even (F16C's and ggml's GGML_FP32_TO_FP16):
// overflow to infinity, subnormals kept, NaN a quiet NaN.
inline uint16_t Fp16FromFloat(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return sign | 0x7E00u;   // NaN
  if (magnitude >= 0x477FF000u) return sign | 0x7C00u;  // rounds past 65504
  if (magnitude < 0x38800000u) {                        // below 2^-14: subnormal
    const float scaled = std::fabs(x) * 16777216.0f;    // units of 2^-24, exact
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));  // ties to even
  }
  // Normal: drop 13 mantissa bits, rounding to nearest even.
  const uint32_t rounded = magnitude + 0xFFFu + ((magnitude >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

inline float FloatFromFp16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  float magnitude;
  if (exponent == 0x1F) {
    const uint32_t bits = 0x7F800000u | (mantissa << 13);
    std::memcpy(&magnitude, &bits, 4);
  } else {  // times 2^112 moves the exponent bias from 15 to 127, subnormals exactly
    const uint32_t bits = static_cast<uint32_t>(h & 0x7FFFu) << 13;
    std::memcpy(&magnitude, &bits, 4);
    magnitude *= 0x1p112f;
  }
  uint32_t bits;
  std::memcpy(&bits, &magnitude, 4);
  bits |= sign;
  float result;
  std::memcpy(&result, &bits, 4);
  return result;
}

// bfloat16 bits widened: exact (the upper half of a float).
inline float FloatFromBf16(uint16_t bits) {
  const uint32_t wide = uint32_t{bits} << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

}  // namespace mha::internal

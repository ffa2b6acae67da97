// The two 8-bit float formats of fp8 KV caches (OCP FP8, as PyTorch's
// float8_e4m3fn and float8_e5m2): their constants, and the scalar conversions the
// page writes and the references use. The kernel widens them a vector at a time
// (fp8_widen-inl.h) to the same values as DecodeFp8 below, without its multiply of a
// subnormal float (slow on Intel cores).
//
// A code's magnitude bits (all but the sign), shifted so that its exponent lands on
// the float's, are a float 2^(float bias - format bias) times too small: one exact
// multiply turns them into the value, subnormals included. Codes whose magnitude
// bits are all ones at kSpecialMask are NaN (e4m3fn: S.1111.111) or, for e5m2,
// infinities and NaNs as in IEEE half precision.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace mha::internal {

struct Fp8E4M3 {
  uint8_t bits;
  static constexpr int kMantissaBits = 3;
  static constexpr int kBias = 7;
  static constexpr float kMax = 448.0f;      // largest finite value
  static constexpr uint8_t kMaxCode = 0x7E;  // its magnitude bits
  static constexpr uint8_t kSpecialMask = 0x7F;
  static constexpr uint8_t kNaNCode = 0x7F;
  static constexpr float kWidened = 1.0f;  // the kernel's widened value / the value
};

// e4m3 pages written with per-token scales hold no NaN code (a row with no scaled
// form is zeros with a NaN scale), so the kernel may widen them without looking for
// one, to 2^-8 of their value (as halves: fp8_widen-inl.h); their pages store each
// scale times 2^8 to make up for it.
struct Fp8E4M3Finite : Fp8E4M3 {
  static constexpr float kWidened = 1.0f / 256.0f;
};

struct Fp8E5M2 {
  uint8_t bits;
  static constexpr int kMantissaBits = 2;
  static constexpr int kBias = 15;
  static constexpr float kMax = 57344.0f;
  static constexpr uint8_t kMaxCode = 0x7B;
  static constexpr uint8_t kSpecialMask = 0x7C;
  static constexpr uint8_t kNaNCode = 0x7E;
  static constexpr float kWidened = 1.0f;
};

// Shift from a code's magnitude bits to the float's exponent and mantissa, and the
// factor 2^(127 - bias) that makes those bits the value.
template <class Format>
constexpr int Fp8Shift() {
  return 23 - Format::kMantissaBits;
}
template <class Format>
constexpr float Fp8Rebias() {
  float factor = 1.0f;
  for (int i = 0; i < 127 - Format::kBias; ++i) factor *= 2.0f;
  return factor;
}

template <class Format>
inline float DecodeFp8(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80) << 24;
  uint32_t magnitude = static_cast<uint32_t>(code & 0x7F) << Fp8Shift<Format>();
  float value;
  if ((code & Format::kSpecialMask) == Format::kSpecialMask) {  // infinity or NaN
    magnitude |= 0x7F800000u;
    const uint32_t bits = sign | magnitude;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
  }
  std::memcpy(&value, &magnitude, sizeof(value));
  value *= Fp8Rebias<Format>();
  return sign ? -value : value;
}

// Round to nearest, ties to even; beyond the largest finite value, saturate to it
// (vLLM's and PyTorch's saturating casts). A NaN is the format's NaN; an infinity
// saturates too, except in e5m2, which has infinities.
template <class Format>
inline uint8_t EncodeFp8(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  if (std::isnan(value)) return sign | Format::kNaNCode;
  const float magnitude = std::fabs(value);
  if (std::isinf(value) && Format::kSpecialMask != Format::kNaNCode) {
    return sign | Format::kSpecialMask;  // e5m2's infinity
  }
  if (!(magnitude < Format::kMax)) return sign | Format::kMaxCode;
  constexpr int kShift = Fp8Shift<Format>();
  // Below the smallest normal, the code counts multiples of the subnormal step.
  const float smallest_normal = std::ldexp(1.0f, 1 - Format::kBias);
  if (magnitude < smallest_normal) {
    const float steps =
        std::nearbyint(std::ldexp(magnitude, Format::kBias - 1 + Format::kMantissaBits));
    return sign | static_cast<uint8_t>(steps);  // 2^kMantissaBits: the smallest normal
  }
  uint32_t m;
  std::memcpy(&m, &magnitude, sizeof(m));
  m += (1u << (kShift - 1)) - 1 + ((m >> kShift) & 1u);  // ties to even
  const uint32_t code = (m >> kShift) - ((127u - Format::kBias) << Format::kMantissaBits);
  return sign | static_cast<uint8_t>(code > Format::kMaxCode ? Format::kMaxCode : code);
}

}  // namespace mha::internal

// fp32 <-> bfloat16 conversion, dispatched to the best SIMD target. bfloat16 values are
// stored as uint16_t (the upper half of an IEEE float).
#pragma once

#include <cstddef>
#include <cstdint>

namespace mha::internal {

// One value: round to nearest, ties to even, on the float's bits. A NaN stays a
// (quiet) NaN of its sign: rounding its bits could carry into the exponent.
inline uint16_t RoundToBf16Bits(float value) {
  uint32_t bits;
  __builtin_memcpy(&bits, &value, sizeof(bits));
  if (value != value) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// Round to nearest, ties to even (Highway 1.0.3's DemoteTo truncates); NaN stays NaN.
void FloatToBf16(const float* in, size_t count, uint16_t* out);
void Bf16ToFloat(const uint16_t* in, size_t count, float* out);

}  // namespace mha::internal

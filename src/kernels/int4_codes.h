// int4 codes (KvStorage::kInt4): unsigned 4-bit codes with zero points, x ~ min +
// scale x code, two to a byte at the element offsets an int8 tile of the same shape
// would use (element i in byte i / 2, the low nibble first), so that unpacking a
// tile is one pass over its bytes (int4_unpack-inl.h). Scalar helpers for the code
// that writes, moves and reads back single tokens.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace mha::internal {

constexpr float kInt4Max = 15.0f;

inline uint8_t GetNibble(const uint8_t* codes, size_t i) {
  return static_cast<uint8_t>((codes[i / 2] >> (i % 2 * 4)) & 15);
}

inline void SetNibble(uint8_t* codes, size_t i, uint8_t code) {
  uint8_t& byte = codes[i / 2];
  byte = i % 2 ? static_cast<uint8_t>((byte & 0x0F) | (code << 4))
               : static_cast<uint8_t>((byte & 0xF0) | code);
}

// The scale and minimum of a range [min, max] of finite values: 15 steps of scale.
struct ZeroPointRange {
  float scale = 0.0f, min = 0.0f;

  ZeroPointRange() = default;
  // In double: high - low may overflow a float (and a float difference would
  // round once more).
  ZeroPointRange(float low, float high)
      : scale(static_cast<float>((double{high} - double{low}) / kInt4Max)),
        min(low),
        inverse_(scale > 0.0f ? 1.0f / scale : 0.0f) {}

  uint8_t Code(float x) const {
    return static_cast<uint8_t>(std::clamp(std::nearbyint((x - min) * inverse_), 0.0f, kInt4Max));
  }

 private:
  float inverse_ = 0.0f;
};

}  // namespace mha::internal

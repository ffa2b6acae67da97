// int4 codes (the int4 kind): unsigned 4-bit codes with zero points, x ~ min +
// scale x code, two rows of a column to a byte (Int4Offset, src/kv/kv_pages.h).
// Scalar helpers for the code that writes, moves and reads back single tokens.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "src/kv/kv_pages.h"

namespace mha::internal {

constexpr float kInt4Max = 15.0f;

// Element (row, col) of an int4 tile of `rows` rows.
inline uint8_t GetInt4(const uint8_t* tile, size_t row, size_t col, size_t rows) {
  return static_cast<uint8_t>((tile[Int4Offset(row, col, rows)] >> (row % 2 * 4)) & 15);
}

inline void SetInt4(uint8_t* tile, size_t row, size_t col, size_t rows, uint8_t code) {
  uint8_t& pair = tile[Int4Offset(row, col, rows)];
  pair = row % 2 ? static_cast<uint8_t>((pair & 0x0F) | (code << 4))
                 : static_cast<uint8_t>((pair & 0xF0) | code);
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
        inverse_(high > low ? kInt4Max / (double{high} - double{low}) : 0.0) {}

  uint8_t Code(float x) const {
    return static_cast<uint8_t>(
        std::clamp(std::nearbyint(static_cast<float>((double{x} - min) * inverse_)), 0.0f,
                   kInt4Max));
  }

 private:
  // In double: 1 / scale is infinite for ranges below about 4e-38, and a code of the
  // minimum would be 0 * inf = NaN.
  double inverse_ = 0.0;
};

}  // namespace mha::internal

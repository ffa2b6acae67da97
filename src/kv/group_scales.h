// Pages scaled per group of channels (ggml's q8_0 and q4_0 scales, ggml's "blocks"): each
// token's key and value in groups of kScaleGroup channels, one fp16 scale per (group,
// token), stored after a page's codes as [groups][page_size] (group b's at b x
// page_size). A scale is decoded as it loads (group_scales-inl.h); a group with a
// non-finite element has scale NaN, so every score or context it enters is NaN, as with
// float pages.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "src/base/fp16.h"
#include "src/kv/kv_pages.h"

namespace mha::internal {

constexpr int64_t kScaleGroup = 32;

// Groups of `channels` channels (the last may be partial).
inline int64_t ScaleGroups(int64_t channels) {
  return (channels + kScaleGroup - 1) / kScaleGroup;
}

// A K page ([head_dim, page_size] K^T) and a V page ([page_size, padded_value_head_dim])
// of T codes, their group scales after them.
template <typename T>
PageBytes GroupScaledKeyPage(int64_t page_size, int64_t head_dim) {
  const int64_t codes = TileBytes<T>(head_dim, page_size);
  return {codes, codes + ScaleGroups(head_dim) * page_size * 2};
}
template <typename T>
PageBytes GroupScaledValuePage(int64_t page_size, int64_t padded_value_head_dim) {
  const int64_t codes = TileBytes<T>(page_size, padded_value_head_dim);
  return {codes, codes + ScaleGroups(padded_value_head_dim) * page_size * 2};
}

inline uint16_t* KeyGroupScales(const KvPages& pages, int64_t page) {
  return reinterpret_cast<uint16_t*>(pages.KeyPage(page) + pages.key_codes_bytes);
}
inline uint16_t* ValueGroupScales(const KvPages& pages, int64_t page) {
  return reinterpret_cast<uint16_t*>(pages.ValuePage(page) + pages.value_codes_bytes);
}

// A group's scale as fp16 can hold it: past 65504 it saturates, so a huge finite
// element clamps to 65504 x the largest code instead of an infinite scale (whose
// zero codes make 0 x inf = NaN in every score and context of the sequence).
constexpr float kFp16Max = 65504.0f;
inline float SaturatedScale(float d) {
  return d > kFp16Max ? kFp16Max : d < -kFp16Max ? -kFp16Max : d;
}

// A token's group scales moved (keys' unless values in keys have none of their own,
// and values'), and a page's value group scales of tokens [first_row, end_row)
// zeroed: a cleared value reads as 0 whatever its codes hold.
inline void CopyGroupScales(const KvPages& pages, int64_t from, int64_t to) {
  const int64_t size = pages.page_size;
  const int64_t from_at = from % size, to_at = to % size;
  for (int64_t b = 0; b < ScaleGroups(pages.head_dim); ++b) {
    KeyGroupScales(pages, to / size)[b * size + to_at] =
        KeyGroupScales(pages, from / size)[b * size + from_at];
  }
  for (int64_t b = 0; b < ScaleGroups(pages.padded_value_head_dim); ++b) {
    ValueGroupScales(pages, to / size)[b * size + to_at] =
        ValueGroupScales(pages, from / size)[b * size + from_at];
  }
}
inline void ClearValueGroupScales(const KvPages& pages, int64_t page, int64_t first_row,
                                  int64_t end_row) {
  uint16_t* scales = ValueGroupScales(pages, page);
  for (int64_t b = 0; b < ScaleGroups(pages.padded_value_head_dim); ++b) {
    for (int64_t t = first_row; t < end_row; ++t) scales[b * pages.page_size + t] = 0;
  }
}

}  // namespace mha::internal

// Values quantised per token in groups of channels (the int4 kind): each
// kValueGroup channels of a token's value get their own int4 scale and minimum, so a
// large channel coarsens its group only. Scalar: run once per written token.
#pragma once

#include <cstdint>

#include "src/kv/kv_pages.h"
#include "src/kv/token_scales.h"

namespace mha::internal {

// A V page of values in groups: its codes, a scale per token (1 or NaN), then per
// group g of kValueGroup channels a scale per token (at g x page_size), then as many
// minimums.
template <typename T>
PageBytes GroupedValuePage(int64_t page_size, int64_t padded_value_head_dim) {
  const int64_t codes = TileBytes<T>(page_size, padded_value_head_dim);
  const int64_t floats = page_size * (1 + 2 * ValueGroups(padded_value_head_dim));
  return {codes, codes + floats * static_cast<int64_t>(sizeof(float))};
}
inline int64_t ValueGroupScalesAt(const KvPages& pages) {  // bytes from a V page's start
  return pages.value_codes_bytes + pages.page_size * static_cast<int64_t>(sizeof(float));
}
inline float* ValueGroupScales(const KvPages& pages, int64_t page) {
  return reinterpret_cast<float*>(pages.ValuePage(page) + ValueGroupScalesAt(pages));
}
inline float* ValueGroupMins(const KvPages& pages, int64_t page) {
  return ValueGroupScales(pages, page) +
         ValueGroups(pages.padded_value_head_dim) * pages.page_size;
}

// Token `position`'s value (value_head_dim floats) into its page: codes, the token scale
// (1, or NaN with zero codes and group scales for a value with a non-finite
// element: every context it enters is NaN, as with float pages) and the groups'.
void QuantizeValueGroups(const KvPages& pages, int64_t position, const float* value,
                         int64_t value_head_dim);

}  // namespace mha::internal

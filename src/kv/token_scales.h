// Page formats a kind builds from: codes alone (float, bfloat16, scale-free fp8), or
// codes and one fp32 scale per token after them (int8, fp8; keys per channel and
// int4 keep theirs too: 1, or NaN for a row with a non-finite element). The kernel
// multiplies a key's scores by its key scale and a value's probability by its value
// scale: q . (s_j k_j) = s_j (q . k_j), p_j (s_j v_j) = (p_j s_j) v_j.
#pragma once

#include <cstdint>

#include "src/kv/kv_pages.h"

namespace mha::internal {

// A K page ([head_dim, page_size] K^T) and a V page ([page_size, padded_value_head_dim]).
template <typename T>
PageBytes CodesKeyPage(int64_t page_size, int64_t head_dim) {
  const int64_t codes = TileBytes<T>(head_dim, page_size);
  return {codes, codes};
}
template <typename T>
PageBytes CodesValuePage(int64_t page_size, int64_t padded_value_head_dim) {
  const int64_t codes = TileBytes<T>(page_size, padded_value_head_dim);
  return {codes, codes};
}
template <typename T>
PageBytes TokenScaledKeyPage(int64_t page_size, int64_t head_dim) {
  const int64_t codes = TileBytes<T>(head_dim, page_size);
  return {codes, codes + page_size * static_cast<int64_t>(sizeof(float))};
}
template <typename T>
PageBytes TokenScaledValuePage(int64_t page_size, int64_t padded_value_head_dim) {
  const int64_t codes = TileBytes<T>(page_size, padded_value_head_dim);
  return {codes, codes + page_size * static_cast<int64_t>(sizeof(float))};
}

// A page's token scales (values in keys: the keys').
inline float* KeyTokenScales(const KvPages& pages, int64_t page) {
  return reinterpret_cast<float*>(pages.KeyPage(page) + pages.key_codes_bytes);
}
inline float* ValueTokenScales(const KvPages& pages, int64_t page) {
  return reinterpret_cast<float*>(pages.ValuePage(page) + pages.value_codes_bytes);
}

}  // namespace mha::internal

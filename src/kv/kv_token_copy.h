// A token's codes and scales moved from one position of a KV head's pages to another
// (speculative decoding's accepted path compacted into place:
// PagedKvCache::KeepTokens), and value rows cleared for reuse: the pieces each kind's
// copy_token and clear_values (src/kv/kv_kind.h) are made of. Element by element
// through the tiles' offsets (the K^T tile's column and the V tile's row), so every
// layout, paired bf16 rows and int4 pairs included, is moved without converting a
// value. Values in keys (MLA's latent) move with them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "src/kv/kv_pages.h"
#include "src/kv/token_scales.h"

namespace mha::internal {

// The codes of token `from` into token `to`: keys too unless `keys` is false (keys
// per channel, which the cache requantises: channel_keys.h).
template <typename T>
void CopyCodes(const KvPages& pages, int64_t from, int64_t to, bool keys = true) {
  const size_t page_size = static_cast<size_t>(pages.page_size);
  const int64_t from_page = from / pages.page_size, to_page = to / pages.page_size;
  const size_t from_slot = static_cast<size_t>(from % pages.page_size);
  const size_t to_slot = static_cast<size_t>(to % pages.page_size);
  const T* key_from = reinterpret_cast<const T*>(pages.KeyPage(from_page));
  T* key_to = reinterpret_cast<T*>(pages.KeyPage(to_page));
  const T* value_from = reinterpret_cast<const T*>(pages.ValuePage(from_page));
  T* value_to = reinterpret_cast<T*>(pages.ValuePage(to_page));
  const size_t dims = static_cast<size_t>(pages.head_dim);
  for (size_t k = 0; keys && k < dims; ++k) {
    key_to[TileOffset<T>(k, to_slot, dims)] = key_from[TileOffset<T>(k, from_slot, dims)];
  }
  if (pages.values_in_keys) return;  // the values moved with the keys
  for (size_t k = 0; k < static_cast<size_t>(pages.padded_value_head_dim); ++k) {
    value_to[TileOffset<T>(to_slot, k, page_size)] =
        value_from[TileOffset<T>(from_slot, k, page_size)];
  }
}

// A token's scales: the key's unless `keys` is false, and the value's.
inline void CopyTokenScales(const KvPages& pages, int64_t from, int64_t to,
                            bool keys = true) {
  const int64_t size = pages.page_size;
  if (keys) {
    KeyTokenScales(pages, to / size)[to % size] =
        KeyTokenScales(pages, from / size)[from % size];
  }
  if (!pages.values_in_keys) {
    ValueTokenScales(pages, to / size)[to % size] =
        ValueTokenScales(pages, from / size)[from % size];
  }
}

// Value rows [first_row, end_row) of page `page` zeroed (zero bits are 0 in every
// code); values in keys have no rows of their own.
template <typename T>
void ClearValueCodes(const KvPages& pages, int64_t page, int64_t first_row,
                     int64_t end_row) {
  if (pages.values_in_keys) return;
  ZeroTileRows<T>(pages.ValuePage(page), static_cast<size_t>(pages.page_size),
                  static_cast<size_t>(pages.padded_value_head_dim),
                  static_cast<size_t>(first_row), static_cast<size_t>(end_row));
}

// Their value scales zeroed: a NaN one would poison 0 x.
inline void ClearValueTokenScales(const KvPages& pages, int64_t page, int64_t first_row,
                                  int64_t end_row) {
  float* scales = ValueTokenScales(pages, page);
  std::fill(scales + first_row, scales + end_row, 0.0f);
}

// copy_token and clear_values of codes alone, and of codes with token scales.
template <typename T>
void CopyTokenCodes(const KvPages& pages, int64_t from, int64_t to) {
  if (from != to) CopyCodes<T>(pages, from, to);
}
template <typename T>
void CopyScaledToken(const KvPages& pages, int64_t from, int64_t to) {
  if (from == to) return;
  CopyCodes<T>(pages, from, to);
  CopyTokenScales(pages, from, to);
}
template <typename T>
void ClearScaledValues(const KvPages& pages, int64_t page, int64_t first_row,
                       int64_t end_row) {
  ClearValueCodes<T>(pages, page, first_row, end_row);
  ClearValueTokenScales(pages, page, first_row, end_row);
}

}  // namespace mha::internal

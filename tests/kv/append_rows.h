// Test helper: appends new key and value rows of one KV head to its pages through
// AppendToPages, as the caches' writer does, without rotation or norms.
#pragma once

#include <cstdint>

#include "src/kv/kv_append.h"

namespace mha::testing {

// Rows [first, end) of a [tokens, head_dim] sequence: keys and values point at row
// `first`; float pages are zeroed up to `end` only.
inline void AppendRows(const internal::KvPages& pages, const float* keys,
                       const float* values, int64_t head_dim, int64_t first,
                       int64_t end) {
  internal::PanelAppend append;
  append.keys = keys;
  append.values = values;
  append.key_stride = append.value_stride = head_dim;
  append.rows = end - first;
  append.head_dim = head_dim;
  append.pages = &pages;
  append.first = first;
  append.pad_to = end;
  internal::AppendToPages(append);
}

}  // namespace mha::testing

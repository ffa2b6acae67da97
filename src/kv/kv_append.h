// AppendToPages: writes new key and value rows of one KV head into a KV cache's pages
// (K^T columns and V rows, coded as the pages' storage kind codes them),
// dispatched to the best SIMD target.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mha/rotary.hpp"
#include "src/kv/kv_pages.h"
#include "src/simd/head_norm.h"

namespace mha::internal {

struct PanelAppend {
  // `rows` new rows of one head: row r at keys + r * key_stride and values + r *
  // value_stride, head_dim and value_head_dim (0: head_dim) floats. Pages with
  // values_in_keys take no values.
  const float* keys = nullptr;
  const float* values = nullptr;
  int64_t key_stride = 0, value_stride = 0, rows = 0, head_dim = 0, value_head_dim = 0;
  // Destination: the head's pages, which must already exist; row r lands at token
  // position first + r. Float and bfloat16 pages: rows from first + rows to pad_to
  // (in the same page) are zeroed.
  const KvPages* pages = nullptr;
  int64_t first = 0, pad_to = 0;
  // Rotary layers: new key r is rotated to position positions[r] on its way in,
  // rotation_rows keys at a time through rotation_scratch (rotation_rows * head_dim
  // floats, or value_head_dim if more), after QK-norm when key_norm is enabled (which
  // needs the scratch too).
  const RotaryEmbedding* rotary = nullptr;
  HeadNorm key_norm;
  HeadNorm value_norm;  // Gemma 3n's v_norm (through the same scratch)
  const int64_t* positions = nullptr;
  float* rotation_scratch = nullptr;
  size_t rotation_rows = 0;
};

// Through the pages' kind (src/kv/kinds/), which codes them its way.
inline void AppendToPages(const PanelAppend& append) {
  KindOf(append.pages->storage).append(append);
}

}  // namespace mha::internal

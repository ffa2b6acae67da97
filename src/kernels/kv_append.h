// AppendToPages: writes new key and value rows of one KV head into a KV cache's pages
// (K^T columns and V rows; int8 caches quantise each row with its own scale),
// dispatched to the best SIMD target.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mha/rotary.hpp"
#include "src/cache/kv_pages.h"

namespace mha::internal {

struct PanelAppend {
  // `rows` new rows of one head: row r at keys/values + r * stride, head_dim floats.
  const float* keys = nullptr;
  const float* values = nullptr;
  int64_t stride = 0, rows = 0, head_dim = 0;
  // Destination: the head's pages (V rows padded_head_dim wide); row r lands at
  // token position first + r. The pages must already exist.
  const KvPages* pages = nullptr;
  int64_t padded_head_dim = 0, first = 0;
  // Rotary layers: new key r is rotated to position positions[r] on its way in,
  // rotation_rows keys at a time through rotation_scratch (rotation_rows * head_dim
  // floats).
  const RotaryEmbedding* rotary = nullptr;
  const int64_t* positions = nullptr;
  float* rotation_scratch = nullptr;
  size_t rotation_rows = 0;
};

void AppendToPages(const PanelAppend& append);

}  // namespace mha::internal

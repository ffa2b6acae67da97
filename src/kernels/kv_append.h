// AppendToPanels: writes new key and value rows of one KV head into a KV cache's
// panels (K^T columns and V rows), dispatched to the best SIMD target.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mha/rotary.hpp"

namespace mha::internal {

struct PanelAppend {
  // `rows` new rows of one head: row r at keys/values + r * stride, head_dim floats.
  const float* keys = nullptr;
  const float* values = nullptr;
  int64_t stride = 0, rows = 0, head_dim = 0;
  // Destination: a key-blocked K^T panel (blocks of key_block keys, see
  // head_layout-inl.h) and a V panel [.., value_panel_stride], of float or (bf16)
  // bfloat16; the new rows land at position `first`.
  void* key_panel = nullptr;
  void* value_panel = nullptr;
  int64_t key_block = 0, value_panel_stride = 0, first = 0;
  bool bf16 = false;
  // Rotary layers: new key r is rotated to position positions[r] on its way in,
  // rotation_rows keys at a time through rotation_scratch (rotation_rows * head_dim
  // floats).
  const RotaryEmbedding* rotary = nullptr;
  const int64_t* positions = nullptr;
  float* rotation_scratch = nullptr;
  size_t rotation_rows = 0;
};

void AppendToPanels(const PanelAppend& append);

}  // namespace mha::internal

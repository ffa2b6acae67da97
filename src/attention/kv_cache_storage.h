// KvCache::Impl: the cache's panels, laid out as AttendHead reads them, so decoding
// attends over the cache without copying it: per (sequence, KV head) a key-blocked
// K^T panel (blocks of HeadScratch::kKeyBlock keys) and a V panel [capacity, padded
// head_dim], both zero-padded.
#pragma once

#include <cstdint>
#include <vector>

#include "mha/kv_cache.hpp"

namespace mha {

struct KvCache::Impl {
  Impl(const AttentionConfig& config, int64_t batch, int64_t seq_len, DType storage);

  // Panels hold floats, or bfloat16 bits (uint16_t) when bf16.
  void* KeyPanel(int64_t sequence, int64_t kv_head) {
    return Element(keys, (sequence * num_kv_heads + kv_head) * head_dim * capacity);
  }
  void* ValuePanel(int64_t sequence, int64_t kv_head) {
    return Element(values,
                   (sequence * num_kv_heads + kv_head) * capacity * padded_head_dim);
  }
  void* Element(std::vector<uint8_t>& panels, int64_t index) const {
    return panels.data() + index * (bf16 ? 2 : 4);
  }

  int64_t num_kv_heads, head_dim, max_batch, max_seq_len;
  int64_t capacity;         // max_seq_len padded to whole key blocks
  int64_t padded_head_dim;  // V row stride
  bool bf16;                // storage type of the panels
  std::vector<int64_t> lengths;
  std::vector<uint8_t> keys, values;
};

}  // namespace mha

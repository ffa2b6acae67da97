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
  Impl(const AttentionConfig& config, int64_t batch, int64_t seq_len);

  float* KeyPanel(int64_t sequence, int64_t kv_head) {
    return keys.data() + (sequence * num_kv_heads + kv_head) * head_dim * capacity;
  }
  float* ValuePanel(int64_t sequence, int64_t kv_head) {
    return values.data() +
           (sequence * num_kv_heads + kv_head) * capacity * padded_head_dim;
  }

  int64_t num_kv_heads, head_dim, max_batch, max_seq_len;
  int64_t capacity;         // max_seq_len padded to whole key blocks
  int64_t padded_head_dim;  // V row stride
  std::vector<int64_t> lengths;
  std::vector<float> keys, values;
};

}  // namespace mha

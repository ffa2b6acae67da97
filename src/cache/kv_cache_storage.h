// KvCache::Impl: the contiguous cache's storage, laid out as AttendHead reads it, so
// decoding attends over the cache without copying it: per (sequence, KV head) a run
// of pages of kKeyBlock tokens (see kv_pages.h), zero-padded.
#pragma once

#include <cstdint>
#include <vector>

#include "mha/kv_cache.hpp"
#include "src/cache/kv_pages.h"

namespace mha::internal {
// The storage type of a cache's pages for a public dtype (checked by the caller).
KvStorage KvStorageFor(DType storage);
DType DTypeOf(KvStorage storage);
// Bytes one token of one KV head takes in a cache: K, V padded to whole panels, and
// the int8 scales; -1 when that overflows int64.
int64_t KvTokenBytes(int64_t head_dim, KvStorage storage);
}  // namespace mha::internal

namespace mha {

struct KvCache::Impl {
  Impl(const AttentionConfig& config, int64_t batch, int64_t seq_len, DType storage);

  internal::KvPages Pages(int64_t sequence, int64_t kv_head);
  // Drops tokens from `length` on (unchecked), zeroing their values.
  void Truncate(int64_t sequence, int64_t length);

  int64_t num_kv_heads, head_dim, max_batch, max_seq_len;
  int64_t capacity;         // max_seq_len padded to whole pages
  int64_t page_size;        // tokens per page
  int64_t padded_head_dim;  // V row stride
  internal::KvStorage storage;
  std::vector<int64_t> lengths;
  // [sequence, KV head, capacity, head_dim] of K^T pages, [.., capacity, padded
  // head_dim] of V rows, in bytes; int8: [sequence, KV head, capacity] scales each.
  std::vector<uint8_t> keys, values;
  std::vector<float> key_scales, value_scales;
};

}  // namespace mha

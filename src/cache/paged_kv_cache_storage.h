// PagedKvCache::Impl: the block pool's storage and the sequences' block tables. A
// block holds block_size tokens of every layer and KV head, each (layer, block, KV
// head) one page as the kernel reads it (see kv_pages.h).
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "mha/paged_kv_cache.hpp"
#include "src/cache/block_pool.h"
#include "src/cache/kv_pages.h"

namespace mha {

struct PagedKvCache::Impl {
  Impl(const AttentionConfig& config, const PagedKvCacheOptions& options);

  struct Sequence {
    bool active = false;
    int64_t length = 0;
    // Block of page p (token p * block_size on) is pages[p - first_page]; pages
    // before first_page were released by the sliding window.
    int64_t first_page = 0;
    std::vector<int32_t> pages;
    int64_t end_page() const { return first_page + static_cast<int64_t>(pages.size()); }
  };

  // The pages of one sequence's layer and KV head. The block table must not change
  // while they are used (the caller owns the sequence).
  internal::KvPages Pages(int64_t sequence, int64_t layer, int64_t kv_head);

  // Requires the mutex. Checks `sequence` names an active sequence.
  Sequence& Active(const char* what, int64_t sequence);
  // Blocks that AppendSlots of `count` tokens needs from the pool, and blocks it
  // gives back (the window's), for one sequence.
  void CountBlocks(const Sequence& sequence, int64_t count, int64_t& needed,
                   int64_t& released) const;
  void Grow(Sequence& sequence, int64_t count);
  void ReleaseWindow(Sequence& sequence, int64_t next_position);
  // Makes page `index` of the table private (a copy when shared).
  void Unshare(Sequence& sequence, int64_t page);
  void CopyBlock(int32_t from, int32_t to);
  // Zeroes V rows [first_row, block_size) of a block in every layer and KV head:
  // values past a sequence's length are multiplied by 0, so they must be finite.
  void ZeroValueRows(int32_t block, int64_t first_row);

  PagedKvCacheOptions options;
  int64_t num_kv_heads, head_dim, padded_head_dim;
  internal::KvStorage storage;
  // Bytes of one page, and of one layer's whole block (all KV heads).
  int64_t key_page_bytes, value_page_bytes, block_key_bytes, block_value_bytes;
  int64_t layer_keys_bytes, layer_values_bytes;  // one layer's storage
  std::vector<uint8_t> keys, values;             // [layer, block, KV head, page]
  std::vector<float> key_scales, value_scales;   // int8: [layer, block, KV head, token]
  internal::BlockPool pool;
  std::vector<Sequence> sequences;  // by id
  int64_t active_sequences = 0;
  mutable std::mutex mutex;  // guards pool, block tables and lengths
};

}  // namespace mha

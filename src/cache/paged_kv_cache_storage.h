// PagedKvCache::Impl: the block pool's storage and the sequences' block tables. A
// block holds block_size tokens of every layer and KV head, each (layer, block, KV
// head) one page as the kernel reads it (see kv_pages.h). A cache of multi-head
// latent attention layers has one "KV head" of [rotary part, latent] keys whose
// latent is the values (values in keys): no V pages.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "mha/paged_kv_cache.hpp"
#include "src/base/aligned_vector.h"
#include "src/cache/block_pool.h"
#include "src/cache/sequence_table.h"
#include "src/kv/kv_pages.h"

namespace mha {

struct PagedKvCache::Impl {
  // `layout`: one layer's block (its block_size is options.block_size).
  Impl(const internal::BlockLayout& layout, const PagedKvCacheOptions& options);

  struct Sequence {
    bool active = false;
    int64_t length = 0;
    // Block of page p (token p * block_size on) is pages[p - first_page]; pages
    // before first_page were released by the sliding window.
    int64_t first_page = 0;
    std::vector<int32_t> pages;
    // Tokens from here on had their slots made by the last AppendSlots (in private
    // blocks): the only ones ForwardPacked may write.
    int64_t appended_from = 0;
    // Keys per channel: [layer, KV head, block_size, head_dim], the keys of the
    // partial last block in fp32 (channel_keys.h); held while the sequence exists.
    std::vector<float> key_residual;
    uint64_t stamp = 0;  // the CheckDistinct that saw this id last
    // Changes with every change of the sequence (Touch): a PackedStep planned at
    // another version is stale.
    uint64_t version = 0;
    int64_t end_page() const { return first_page + static_cast<int64_t>(pages.size()); }
  };

  // The pages of one sequence's layer and KV head. The block table must not change
  // while they are used (the caller owns the sequence).
  internal::KvPages Pages(int64_t sequence, int64_t layer, int64_t kv_head);

  // Requires the mutex. A new version for a sequence whose slots or length change.
  void Touch(Sequence& sequence) { sequence.version = ++versions; }
  // Requires the mutex. Checks `sequence` names an active sequence.
  Sequence& Active(const char* what, int64_t sequence);
  // Requires the mutex. The sequence of an id, or null when the id is outside [0,
  // max_sequences) or not active.
  Sequence* Find(int64_t sequence) const;
  // Requires the mutex. Fails if ids[i] repeats an earlier id of the list (O(N):
  // stamps per sequence, no allocation); the ids are active sequences.
  void CheckDistinct(const char* what, const int64_t* ids, int64_t count) const;
  // What AppendSlots of `count` tokens takes from the pool for one sequence: new
  // blocks (added to `needed`), the blocks its window gives back (`released`) and its
  // partial last block, copied when shared (`copied`).
  void CountBlocks(const Sequence& sequence, int64_t count, int64_t& needed,
                   std::vector<int32_t>& released, std::vector<int32_t>& copied) const;
  // Of a call's window releases, the blocks that return to the pool: those every
  // holder releases.
  int64_t FreedBlocks(std::vector<int32_t>& released) const;
  // Of a call's writes into partial blocks, the copies made: a block shared by r
  // sequences is copied by its first r - 1 writers.
  int64_t CopiedBlocks(std::vector<int32_t>& copied) const;
  void Grow(Sequence& sequence, int64_t count);
  // The first position a token at `position` may see: its sliding window's and its
  // attention chunk's start (0 without either).
  int64_t FirstVisible(int64_t position) const;
  // The shortest length a sequence whose blocks before kept_from are gone may be
  // truncated to: its next token must not see a released key.
  int64_t ShortestKeeping(int64_t kept_from) const;
  void ReleaseWindow(Sequence& sequence, int64_t next_position);
  // Makes page `index` of the table private (a copy when shared).
  void Unshare(Sequence& sequence, int64_t page);
  void CopyBlock(int32_t from, int32_t to);
  // Requires the mutex. Fails (naming `what`) unless `s` may be truncated to
  // `length`; Truncate then cannot fail.
  void CheckTruncate(const char* what, const Sequence& s, int64_t length) const;
  void Truncate(Sequence& s, int64_t length);
  // Zeroes a block's K pages, scales included, in every layer: all-zero bytes are key
  // 0 in every storage, so a kv_shared layer that reads slots its source layer has
  // not written yet sees zeros, never an earlier request's keys.
  void ZeroKeys(int32_t block);
  // Zeroes V rows [first_row, block_size) of a block in every layer and KV head:
  // values past a sequence's length are multiplied by 0, so they must be finite
  // (values in keys: their int8 scales).
  void ZeroValueRows(int32_t block, int64_t first_row);
  // Keys per channel: s's residual made to hold the partial last block of `length`
  // tokens, down from `old_length` (RestoreKeyResidual).
  void RestoreKeyResiduals(int64_t sequence, int64_t old_length, int64_t length);
  // Keys per channel: KeepTokens' moves of keys (dequantised, then requantised).
  void KeepKeys(int64_t sequence, int64_t first, const int64_t* kept, int64_t count);
  int64_t ResidualFloats() const {
    return residual_keys
               ? options.num_layers * num_kv_heads * options.block_size * head_dim
               : 0;
  }

  PagedKvCacheOptions options;
  internal::BlockLayout layout;  // of one layer's block
  int64_t num_kv_heads, head_dim, padded_value_head_dim;
  internal::KvStorage storage;
  bool latent;  // layout.values_in_keys: a multi-head latent attention cache
  const internal::ResidualKeys* residual_keys;   // keys per channel, else null
  int64_t layer_keys_bytes, layer_values_bytes;  // one layer's storage
  // [layer, block, KV head, page]; scaled kinds end each page with its scales.
  // Allocated first: a pool too big for memory fails before any bookkeeping.
  internal::AlignedVector<uint8_t> keys, values;
  internal::BlockPool pool;
  internal::SequenceTable<Sequence> sequences;  // by id, made on first use
  mutable uint64_t id_stamp = 0;
  uint64_t versions = 0;                                  // the last version Touch gave
  std::vector<int32_t> released_scratch, copied_scratch;  // AppendSlots' counts
  std::vector<float> keep_scratch;                        // KeepKeys' rows
  int64_t active_sequences = 0;
  mutable std::mutex mutex;  // guards pool, block tables and lengths
};

}  // namespace mha

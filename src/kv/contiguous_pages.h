// ContiguousPages: runs of blocks, one run of `capacity` tokens per sequence, block
// p of a sequence following block p - 1 (an identity block table). The storage of
// the contiguous KvCache, and of the pages a forward without a cache writes its
// projected keys and values into, so that the kernel reads K/V one way only.
#pragma once

#include <cstdint>
#include <vector>

#include "src/base/aligned_vector.h"
#include "src/kv/kv_pages.h"

namespace mha::internal {

class ContiguousPages {
 public:
  // Room for `sequences` runs of `capacity` tokens (rounded up to whole blocks). Grows
  // and never shrinks; new memory reads as zero, reused memory keeps what it held.
  // With values_at, sequence s's V pages are at values_at + s * sequence_value_bytes
  // instead: memory the caller owns (e.g. an output buffer not yet written), and
  // none is kept here for them.
  void Reset(const BlockLayout& layout, int64_t sequences, int64_t capacity,
             uint8_t* values_at = nullptr, int64_t sequence_value_bytes = 0);

  // Sequence s's pages of one KV head: a PageSource lookup.
  KvPages operator()(int64_t sequence, int64_t kv_head) const;
  // Bytes one sequence's run of V pages takes.
  int64_t run_value_bytes() const { return blocks_ * layout_.block_value_bytes(); }
  const BlockLayout& layout() const { return layout_; }
  int64_t capacity() const { return blocks_ * layout_.page_size; }
  size_t bytes() const;

 private:
  BlockLayout layout_;
  int64_t blocks_ = 0;  // per sequence
  AlignedVector<uint8_t> key_storage_, value_storage_;
  // Where the pages are: the storage above, or the V pages at Reset's values_at.
  uint8_t* keys_ = nullptr;
  uint8_t* values_ = nullptr;
  int64_t sequence_value_bytes_ = 0;
};

}  // namespace mha::internal

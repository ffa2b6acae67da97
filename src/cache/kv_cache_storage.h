// KvCache::Impl: the contiguous cache: per sequence a run of blocks of kKeyStep
// tokens (contiguous_pages.h), laid out as AttendHead reads them, zero-padded.
#pragma once

#include <cstdint>
#include <vector>

#include "mha/kv_cache.hpp"
#include "src/base/aligned_vector.h"
#include "src/kv/contiguous_pages.h"
#include "src/kv/kv_pages.h"

namespace mha {

struct KvCache::Impl {
  // Blocks of `layout` (num_kv_heads pages each) for `batch` sequences of seq_len.
  Impl(const internal::BlockLayout& layout, int64_t batch, int64_t seq_len);

  internal::KvPages Pages(int64_t sequence, int64_t kv_head) const {
    internal::KvPages result = pages(sequence, kv_head);
    if (!key_residuals.empty()) {
      result.key_residual = key_residuals.data() +
                            (sequence * num_kv_heads + kv_head) * page_size * head_dim;
    }
    return result;
  }
  // Drops tokens from `length` on (unchecked), zeroing their values.
  void Truncate(int64_t sequence, int64_t length);

  int64_t num_kv_heads, head_dim, max_batch, max_seq_len;
  int64_t capacity;   // max_seq_len padded to whole pages
  int64_t page_size;  // tokens per page
  internal::KvStorage storage;
  // An MLA layer's cache: one "KV head" whose keys are [rotary part, latent] rows and
  // whose values are the latent inside them (BlockLayout's values_in_keys).
  bool latent = false;
  std::vector<int64_t> lengths;
  internal::ContiguousPages pages;
  // Keys per channel: [batch, KV head, page_size, head_dim], each sequence's partial
  // last page in fp32 (channel_keys.h). Written through Pages, as the pages are.
  mutable internal::AlignedVector<float> key_residuals;
};

}  // namespace mha

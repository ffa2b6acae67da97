// LatentKvCache::Impl: an MLA layer's contiguous cache. One "KV head" whose keys are
// [rotary part, latent] rows and whose values are the latent inside them
// (BlockLayout's values_in_keys): per sequence a run of blocks of kKeyBlock tokens
// (contiguous_pages.h), zero-filled.
#pragma once

#include <cstdint>
#include <vector>

#include "mha/latent_attention.hpp"
#include "src/cache/contiguous_pages.h"
#include "src/kernels/kv_pages.h"

namespace mha {

struct LatentKvCache::Impl {
  Impl(const LatentAttentionConfig& config, int64_t batch, int64_t seq_len,
       internal::KvStorage storage);

  // Drops tokens from `length` on (unchecked); scaled kinds zero their scales (a NaN
  // scale of a dropped row would make its zero probability NaN).
  void Truncate(int64_t sequence, int64_t length);

  int64_t rope_dim, latent_dim, key_dim;  // key_dim = rope_dim + latent_dim
  int64_t max_batch, max_seq_len;
  int64_t capacity;   // max_seq_len padded to whole pages
  int64_t page_size;  // tokens per page
  internal::KvStorage storage;
  std::vector<int64_t> lengths;
  internal::ContiguousPages pages;
};

}  // namespace mha

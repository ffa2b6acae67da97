// KvCache::Impl: the contiguous cache: per sequence a run of blocks of kKeyStep
// tokens (contiguous_pages.h), laid out as AttendHead reads them, zero-padded.
#pragma once

#include <cstdint>
#include <vector>

#include "mha/kv_cache.hpp"
#include "src/base/aligned_vector.h"
#include "src/cache/contiguous_pages.h"
#include "src/kernels/kv_pages.h"

namespace mha::internal {
// The storage of the pages a forward writes its own K/V into for a compute dtype
// (checked by the caller): bf16 only where bf16 dot products run. Elsewhere the
// kernel would widen bf16 back to fp32, slower than fp32 pages (AVX2, Zen 4: the
// bf16 core 1.27x slower) and less accurate.
KvStorage AttentionStorage(DType compute_dtype);
// Bytes one token of one KV head takes in a cache of `page_size`-token pages: K, V
// padded to whole panels, and the scales (a page's per-channel ones shared by its
// tokens, rounded up).
// Values in keys (a latent cache): K alone.
int64_t KvTokenBytes(int64_t head_dim, KvStorage storage, int64_t page_size,
                     bool values_in_keys = false);
// Fails, naming `owner`, for a kind that cannot hold a latent cache (its keys are
// its values).
void CheckLatentKind(const char* owner, KvStorage storage);
}  // namespace mha::internal

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

// KvCache: allocation, lengths and resets.
#include "mha/kv_cache.hpp"
#include "mha/latent_attention.hpp"

#include <algorithm>
#include <cstring>

#include "src/base/check.h"
#include "src/base/isa_cap.h"
#include "src/cache/kv_cache_storage.h"
#include "src/kv/channel_keys.h"
#include "src/kv/kv_kind.h"
#include "src/kv/kv_storage.h"
#include "src/kv/tile_sizes.h"
#include "src/validation/latent_config.h"
#include "src/validation/problem.h"

namespace mha {
KvCache::Impl::Impl(const internal::BlockLayout& layout, int64_t batch, int64_t seq_len)
    : num_kv_heads(layout.num_kv_heads),
      head_dim(layout.head_dim),
      max_batch(batch),
      max_seq_len(seq_len),
      capacity(static_cast<int64_t>(
          internal::RoundUp(static_cast<size_t>(seq_len), internal::kKeyStep))),
      page_size(layout.page_size),
      storage(layout.storage),
      latent(layout.values_in_keys),
      lengths(batch, 0) {
  // Zero-filled: padded rows and columns must read as 0 (a 0 weight times a NaN
  // left over in memory would still be NaN).
  pages.Reset(layout, batch, capacity);
  if (internal::KindOf(storage).residual_keys) {
    key_residuals.assign(static_cast<size_t>(batch * num_kv_heads * page_size * head_dim),
                         0.0f);
  }
}

void KvCache::Impl::Truncate(int64_t sequence, int64_t length) {
  // Values past a sequence's length are multiplied by 0: their kind clears them.
  const internal::KvKind& kind = internal::KindOf(storage);
  for (int64_t kv_head = 0; kv_head < num_kv_heads; ++kv_head) {
    const internal::KvPages pages = Pages(sequence, kv_head);
    if (kind.residual_keys) {
      kind.residual_keys->restore(pages, lengths[sequence], length, head_dim);
    }
    for (int64_t first = length; first < lengths[sequence];) {
      const int64_t page = first / page_size, row = first % page_size;
      const int64_t end = std::min(page_size, row + lengths[sequence] - first);
      kind.clear_values(pages, page, row, end);
      first += end - row;
    }
  }
  lengths[sequence] = length;
}

namespace {

// The cache's bytes, checked before anything is allocated: a size no process could
// map is an error naming max_batch and max_seq_len.
void CheckCacheBytes(const internal::BlockLayout& layout, int64_t max_batch,
                     int64_t max_seq_len) {
  const int64_t page = layout.page_size;
  const int64_t pages = max_seq_len / page + (max_seq_len % page != 0);
  const int64_t block_bytes = layout.block_key_bytes() + layout.block_value_bytes();
  int64_t bytes = 0;
  if (!internal::AddressableProduct({max_batch, pages, block_bytes}, &bytes)) {
    internal::Fail("KvCache: max_batch ", max_batch, " x max_seq_len ", max_seq_len,
                   " needs more than 2^47 bytes (", layout.num_kv_heads, " KV heads of ",
                   (block_bytes / layout.num_kv_heads + page - 1) / page,
                   " bytes per token)");
  }
}

void CheckSizes(int64_t max_batch, int64_t max_seq_len) {
  if (max_batch < 1) internal::Fail("KvCache: max_batch must be >= 1, got ", max_batch);
  if (max_seq_len < 1) {
    internal::Fail("KvCache: max_seq_len must be >= 1, got ", max_seq_len);
  }
}

}  // namespace

KvCache::KvCache(const AttentionConfig& config, int64_t max_batch, int64_t max_seq_len,
                 DType storage, KvScales scales) {
  internal::ValidateConfig(config);
  const internal::KvStorage kind = internal::KvStorageFor("KvCache", storage, scales);
  CheckSizes(max_batch, max_seq_len);
  const internal::BlockLayout layout(internal::kKeyStep, config.resolved_num_kv_heads(),
                                     config.head_dim, kind);
  CheckCacheBytes(layout, max_batch, max_seq_len);
  impl_ = std::make_unique<Impl>(layout, max_batch, max_seq_len);
}

KvCache::KvCache(const LatentAttentionConfig& config, int64_t max_batch,
                 int64_t max_seq_len, DType storage, KvScales scales) {
  internal::ValidateLatentConfig(config);
  const internal::KvStorage kind = internal::KvStorageFor("KvCache", storage, scales);
  internal::CheckLatentKind("KvCache", kind);
  CheckSizes(max_batch, max_seq_len);
  const internal::BlockLayout layout(internal::kKeyStep, 1,
                                     internal::LatentKeyDim(config), kind,
                                     config.kv_lora_rank, /*values_in_keys=*/true);
  CheckCacheBytes(layout, max_batch, max_seq_len);
  impl_ = std::make_unique<Impl>(layout, max_batch, max_seq_len);
}

KvCache::~KvCache() = default;
KvCache::KvCache(KvCache&&) noexcept = default;
KvCache& KvCache::operator=(KvCache&&) noexcept = default;

int64_t KvCache::max_batch() const { return impl_->max_batch; }
int64_t KvCache::max_seq_len() const { return impl_->max_seq_len; }
DType KvCache::storage() const { return internal::DTypeOf(impl_->storage); }
KvScales KvCache::scales() const { return internal::ScalesOf(impl_->storage); }
int64_t KvCache::bytes_per_token() const {
  return impl_->num_kv_heads * internal::KvTokenBytes(impl_->head_dim, impl_->storage,
                                                      impl_->page_size, impl_->latent);
}

int64_t KvCache::length(int64_t sequence) const {
  if (sequence < 0 || sequence >= impl_->max_batch) {
    internal::Fail("KvCache::length: sequence must be in [0, ", impl_->max_batch,
                   "), got ", sequence);
  }
  return impl_->lengths[sequence];
}

void KvCache::Reset() {
  for (int64_t sequence = 0; sequence < impl_->max_batch; ++sequence) Reset(sequence);
}

void KvCache::Reset(int64_t sequence) {
  if (sequence < 0 || sequence >= impl_->max_batch) {
    internal::Fail("KvCache::Reset: sequence must be in [0, ", impl_->max_batch,
                   "), got ", sequence);
  }
  Truncate(sequence, 0);
}

void KvCache::Truncate(int64_t sequence, int64_t length) {
  if (sequence < 0 || sequence >= impl_->max_batch) {
    internal::Fail("KvCache::Truncate: sequence must be in [0, ", impl_->max_batch,
                   "), got ", sequence);
  }
  const int64_t current = impl_->lengths[sequence];
  if (length < 0 || length > current) {
    internal::Fail("KvCache::Truncate: length must be in [0, ", current, "], got ",
                   length);
  }
  impl_->Truncate(sequence, length);
}

}  // namespace mha

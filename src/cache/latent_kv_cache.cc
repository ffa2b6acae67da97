// LatentKvCache: allocation, lengths, resets and truncation.
#include <algorithm>

#include "mha/latent_attention.hpp"
#include "src/base/check.h"
#include "src/cache/kv_cache_storage.h"
#include "src/cache/latent_kv_cache_storage.h"
#include "src/kernels/tile_sizes.h"
#include "src/validation/latent_config.h"

namespace mha {
namespace {

int64_t TokenBytes(int64_t key_dim, internal::KvStorage storage) {
  return internal::KvTokenBytes(key_dim, storage, internal::kKeyBlock,
                                /*values_in_keys=*/true);
}

}  // namespace

LatentKvCache::Impl::Impl(const LatentAttentionConfig& config, int64_t batch,
                          int64_t seq_len, internal::KvStorage kind)
    : rope_dim(config.qk_rope_head_dim),
      latent_dim(config.kv_lora_rank),
      key_dim(internal::LatentKeyDim(config)),
      max_batch(batch),
      max_seq_len(seq_len),
      capacity(static_cast<int64_t>(
          internal::RoundUp(static_cast<size_t>(seq_len), internal::kKeyBlock))),
      page_size(internal::kKeyBlock),
      storage(kind),
      lengths(batch, 0) {
  pages.Reset(internal::BlockLayout(page_size, 1, key_dim, storage, latent_dim,
                                    /*values_in_keys=*/true),
              batch, capacity);
}

void LatentKvCache::Impl::Truncate(int64_t sequence, int64_t length) {
  // The values are the keys: their scales cleared.
  const internal::KvPages p = pages(sequence, 0);
  for (int64_t first = length; first < lengths[sequence];) {
    const int64_t page = first / page_size, row = first % page_size;
    const int64_t end = std::min(page_size, row + lengths[sequence] - first);
    internal::KindOf(storage).clear_values(p, page, row, end);
    first += end - row;
  }
  lengths[sequence] = length;
}

LatentKvCache::LatentKvCache(const LatentAttentionConfig& config, int64_t max_batch,
                             int64_t max_seq_len, DType storage, KvScales scales) {
  internal::ValidateLatentConfig(config);
  const internal::KvStorage kind =
      internal::KvStorageFor("LatentKvCache", storage, scales);
  internal::CheckLatentKind("LatentKvCache", kind);
  if (max_batch < 1) {
    internal::Fail("LatentKvCache: max_batch must be >= 1, got ", max_batch);
  }
  if (max_seq_len < 1) {
    internal::Fail("LatentKvCache: max_seq_len must be >= 1, got ", max_seq_len);
  }
  const int64_t page = internal::kKeyBlock;
  const int64_t token_bytes = TokenBytes(internal::LatentKeyDim(config), kind);
  int64_t bytes = 0;
  if (!internal::AddressableProduct(
          {max_batch, max_seq_len / page + (max_seq_len % page != 0), page, token_bytes},
          &bytes)) {
    internal::Fail("LatentKvCache: max_batch ", max_batch, " x max_seq_len ", max_seq_len,
                   " needs more than 2^47 bytes (", token_bytes, " bytes per token)");
  }
  impl_ = std::make_unique<Impl>(config, max_batch, max_seq_len, kind);
}

LatentKvCache::~LatentKvCache() = default;
LatentKvCache::LatentKvCache(LatentKvCache&&) noexcept = default;
LatentKvCache& LatentKvCache::operator=(LatentKvCache&&) noexcept = default;

int64_t LatentKvCache::max_batch() const { return impl_->max_batch; }
int64_t LatentKvCache::max_seq_len() const { return impl_->max_seq_len; }
DType LatentKvCache::storage() const { return internal::DTypeOf(impl_->storage); }
int64_t LatentKvCache::bytes_per_token() const {
  return TokenBytes(impl_->key_dim, impl_->storage);
}

int64_t LatentKvCache::length(int64_t sequence) const {
  if (sequence < 0 || sequence >= impl_->max_batch) {
    internal::Fail("LatentKvCache::length: sequence must be in [0, ", impl_->max_batch,
                   "), got ", sequence);
  }
  return impl_->lengths[sequence];
}

void LatentKvCache::Reset() {
  for (int64_t sequence = 0; sequence < impl_->max_batch; ++sequence) Reset(sequence);
}

void LatentKvCache::Reset(int64_t sequence) {
  if (sequence < 0 || sequence >= impl_->max_batch) {
    internal::Fail("LatentKvCache::Reset: sequence must be in [0, ", impl_->max_batch,
                   "), got ", sequence);
  }
  impl_->Truncate(sequence, 0);
}

void LatentKvCache::Truncate(int64_t sequence, int64_t length) {
  if (sequence < 0 || sequence >= impl_->max_batch) {
    internal::Fail("LatentKvCache::Truncate: sequence must be in [0, ", impl_->max_batch,
                   "), got ", sequence);
  }
  const int64_t current = impl_->lengths[sequence];
  if (length < 0 || length > current) {
    internal::Fail("LatentKvCache::Truncate: length must be in [0, ", current, "], got ",
                   length);
  }
  impl_->Truncate(sequence, length);
}

}  // namespace mha

// KvCache: allocation, lengths and resets.
#include "mha/kv_cache.hpp"

#include <algorithm>
#include <cstring>

#include "src/base/check.h"
#include "src/cache/kv_cache_storage.h"
#include "src/kernels/tile_sizes.h"
#include "src/platform/isa_cap.h"
#include "src/validation/problem.h"

namespace mha {
namespace internal {

KvStorage KvStorageFor(DType storage) {
  return storage == DType::kBFloat16 ? KvStorage::kBFloat16
         : storage == DType::kInt8   ? KvStorage::kInt8
                                     : KvStorage::kFloat32;
}

KvStorage AttentionStorage(DType compute_dtype) {
  return compute_dtype == DType::kBFloat16 && Bf16DotProductsRun() ? KvStorage::kBFloat16
                                                                   : KvStorage::kFloat32;
}

DType DTypeOf(KvStorage storage) {
  return storage == KvStorage::kBFloat16 ? DType::kBFloat16
         : storage == KvStorage::kInt8   ? DType::kInt8
                                         : DType::kFloat32;
}

int64_t KvTokenBytes(int64_t head_dim, KvStorage storage) {
  const int64_t padded_head_dim =
      static_cast<int64_t>(RoundUp(static_cast<size_t>(head_dim), kPanelWidth));
  const int64_t scales =
      storage == KvStorage::kInt8 ? 2 * static_cast<int64_t>(sizeof(float)) : 0;
  int64_t bytes = 0;
  if (__builtin_add_overflow(head_dim, padded_head_dim, &bytes) ||
      __builtin_mul_overflow(bytes, static_cast<int64_t>(KvElementBytes(storage)),
                             &bytes) ||
      __builtin_add_overflow(bytes, scales, &bytes)) {
    return -1;
  }
  return bytes;
}

}  // namespace internal

KvCache::Impl::Impl(const AttentionConfig& config, int64_t batch, int64_t seq_len,
                    DType dtype)
    : num_kv_heads(config.resolved_num_kv_heads()),
      head_dim(config.head_dim),
      max_batch(batch),
      max_seq_len(seq_len),
      capacity(static_cast<int64_t>(
          internal::RoundUp(static_cast<size_t>(seq_len), internal::kKeyBlock))),
      page_size(internal::kKeyBlock),
      padded_head_dim(static_cast<int64_t>(internal::RoundUp(
          static_cast<size_t>(config.head_dim), internal::kPanelWidth))),
      storage(internal::KvStorageFor(dtype)),
      lengths(batch, 0) {
  // Zero-filled: padded rows and columns must read as 0 (a 0 weight times a NaN
  // left over in memory would still be NaN).
  pages.Reset(internal::BlockLayout(page_size, num_kv_heads, head_dim, storage), batch,
              capacity);
}

void KvCache::Impl::Truncate(int64_t sequence, int64_t length) {
  // Values past a sequence's length are multiplied by 0: keep them (and their int8
  // scales) finite.
  // Zero bits are 0 in every storage type.
  const size_t element = internal::KvElementBytes(storage);
  for (int64_t kv_head = 0; kv_head < num_kv_heads; ++kv_head) {
    const internal::KvPages pages = Pages(sequence, kv_head);
    for (int64_t first = length; first < lengths[sequence];) {
      const int64_t page = first / page_size, row = first % page_size;
      const int64_t end = std::min(page_size, row + lengths[sequence] - first);
      internal::ZeroTileRows(pages.ValuePage(page), page_size, padded_head_dim, row, end,
                             element);
      if (storage == internal::KvStorage::kInt8) {  // a NaN scale would poison 0 x
        std::fill(pages.ValueScales(page) + row, pages.ValueScales(page) + end, 0.0f);
      }
      first += end - row;
    }
  }
  lengths[sequence] = length;
}

namespace {

// The cache's bytes, checked before anything is allocated: a size no process could
// map is an error naming max_batch and max_seq_len.
void CheckCacheBytes(const AttentionConfig& config, int64_t max_batch,
                     int64_t max_seq_len, internal::KvStorage storage) {
  const int64_t page = internal::kKeyBlock;
  const int64_t pages = max_seq_len / page + (max_seq_len % page != 0);
  const int64_t token_bytes = internal::KvTokenBytes(config.head_dim, storage);
  int64_t bytes = 0;
  if (!internal::AddressableProduct(
          {max_batch, pages, page, config.resolved_num_kv_heads(), token_bytes},
          &bytes)) {
    internal::Fail("KvCache: max_batch ", max_batch, " x max_seq_len ", max_seq_len,
                   " needs more than 2^47 bytes (", config.resolved_num_kv_heads(),
                   " KV heads of ", token_bytes, " bytes per token)");
  }
}

}  // namespace

KvCache::KvCache(const AttentionConfig& config, int64_t max_batch, int64_t max_seq_len,
                 DType storage) {
  internal::ValidateConfig(config);
  if (storage != DType::kFloat32 && storage != DType::kBFloat16 &&
      storage != DType::kInt8) {
    internal::Fail("KvCache: storage must be float32, bfloat16 or int8, got ",
                   DTypeName(storage));
  }
  if (max_batch < 1) internal::Fail("KvCache: max_batch must be >= 1, got ", max_batch);
  if (max_seq_len < 1)
    internal::Fail("KvCache: max_seq_len must be >= 1, got ", max_seq_len);
  CheckCacheBytes(config, max_batch, max_seq_len, internal::KvStorageFor(storage));
  impl_ = std::make_unique<Impl>(config, max_batch, max_seq_len, storage);
}

KvCache::~KvCache() = default;
KvCache::KvCache(KvCache&&) noexcept = default;
KvCache& KvCache::operator=(KvCache&&) noexcept = default;

int64_t KvCache::max_batch() const { return impl_->max_batch; }
int64_t KvCache::max_seq_len() const { return impl_->max_seq_len; }
DType KvCache::storage() const { return internal::DTypeOf(impl_->storage); }

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

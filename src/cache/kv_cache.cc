// KvCache: allocation, lengths and resets.
#include "mha/kv_cache.hpp"

#include <algorithm>
#include <cstring>

#include "src/base/check.h"
#include "src/cache/kv_cache_storage.h"
#include "src/kernels/channel_keys.h"
#include "src/kernels/tile_sizes.h"
#include "src/platform/isa_cap.h"
#include "src/validation/problem.h"

namespace mha {
namespace internal {

KvStorage KvStorageFor(const char* owner, DType storage, KvScales scales) {
  const bool fp8 = storage == DType::kFloat8E4M3 || storage == DType::kFloat8E5M2;
  if (scales != KvScales::kPerToken && scales != KvScales::kNone &&
      scales != KvScales::kPerChannelKeys) {
    Fail(owner, ": scales: unknown value ", static_cast<int>(scales));
  }
  if (scales == KvScales::kPerChannelKeys && storage != DType::kInt8 &&
      storage != DType::kInt4) {
    Fail(owner, ": scales kPerChannelKeys needs int8 or int4 storage, got ",
         DTypeName(storage));
  }
  if (storage == DType::kInt4 && scales != KvScales::kPerChannelKeys) {
    Fail(owner, ": int4 storage quantises keys per channel: scales must be ",
         "kPerChannelKeys, got ", scales == KvScales::kNone ? "kNone" : "kPerToken");
  }
  if (scales == KvScales::kNone && !fp8) {
    Fail(owner,
         ": scales kNone (scale-free) needs float8_e4m3fn or float8_e5m2 storage, "
         "got ",
         DTypeName(storage));
  }
  const bool none = scales == KvScales::kNone;
  switch (storage) {
    case DType::kFloat32:
      return KvStorage::kFloat32;
    case DType::kBFloat16:
      return KvStorage::kBFloat16;
    case DType::kInt8:
      return scales == KvScales::kPerChannelKeys ? KvStorage::kInt8ChannelKeys
                                                 : KvStorage::kInt8;
    case DType::kInt4:
      return KvStorage::kInt4;
    case DType::kFloat8E4M3:
      return none ? KvStorage::kFp8E4M3ScaleFree : KvStorage::kFp8E4M3;
    case DType::kFloat8E5M2:
      return none ? KvStorage::kFp8E5M2ScaleFree : KvStorage::kFp8E5M2;
    default:
      Fail(owner,
           ": storage must be float32, bfloat16, int8, float8_e4m3fn, "
           "float8_e5m2 or int4, got ",
           DTypeName(storage));
  }
}

KvStorage AttentionStorage(DType compute_dtype) {
  return compute_dtype == DType::kBFloat16 && Bf16DotProductsRun() ? KvStorage::kBFloat16
                                                                   : KvStorage::kFloat32;
}

DType DTypeOf(KvStorage storage) {
  switch (storage) {
    case KvStorage::kFloat32:
      return DType::kFloat32;
    case KvStorage::kBFloat16:
      return DType::kBFloat16;
    case KvStorage::kInt8:
    case KvStorage::kInt8ChannelKeys:
      return DType::kInt8;
    case KvStorage::kInt4:
      return DType::kInt4;
    case KvStorage::kFp8E4M3:
    case KvStorage::kFp8E4M3ScaleFree:
      return DType::kFloat8E4M3;
    case KvStorage::kFp8E5M2:
    case KvStorage::kFp8E5M2ScaleFree:
      return DType::kFloat8E5M2;
  }
  return DType::kFloat32;
}

KvScales ScalesOf(KvStorage storage) {
  if (HasChannelKeyScales(storage)) return KvScales::kPerChannelKeys;
  return storage == KvStorage::kFp8E4M3ScaleFree ||
                 storage == KvStorage::kFp8E5M2ScaleFree
             ? KvScales::kNone
             : KvScales::kPerToken;
}

void CheckLatentScales(const char* owner, KvScales scales) {
  if (scales == KvScales::kPerChannelKeys) {
    Fail(owner,
         ": scales kPerChannelKeys quantises keys and values differently, and a latent "
         "cache's keys are its values: use kPerToken");
  }
}

int64_t KvTokenBytes(int64_t head_dim, KvStorage storage, int64_t page_size) {
  // head_dim <= 2^31 (ValidateConfig) and page_size <= 256: a page's bytes fit.
  const BlockLayout layout(page_size, 1, head_dim, storage);
  return (layout.key_page_bytes + layout.value_page_bytes + page_size - 1) / page_size;
}

}  // namespace internal

KvCache::Impl::Impl(const AttentionConfig& config, int64_t batch, int64_t seq_len,
                    internal::KvStorage kind)
    : num_kv_heads(config.resolved_num_kv_heads()),
      head_dim(config.head_dim),
      max_batch(batch),
      max_seq_len(seq_len),
      capacity(static_cast<int64_t>(
          internal::RoundUp(static_cast<size_t>(seq_len), internal::kKeyBlock))),
      page_size(internal::kKeyBlock),
      padded_head_dim(static_cast<int64_t>(internal::RoundUp(
          static_cast<size_t>(config.head_dim), internal::kPanelWidth))),
      storage(kind),
      lengths(batch, 0) {
  // Zero-filled: padded rows and columns must read as 0 (a 0 weight times a NaN
  // left over in memory would still be NaN).
  pages.Reset(internal::BlockLayout(page_size, num_kv_heads, head_dim, storage), batch,
              capacity);
  if (internal::HasChannelKeyScales(storage)) {
    key_residuals.assign(static_cast<size_t>(batch * num_kv_heads * page_size * head_dim),
                         0.0f);
  }
}

void KvCache::Impl::Truncate(int64_t sequence, int64_t length) {
  // Values past a sequence's length are multiplied by 0: keep them (and their int8
  // scales) finite.
  // Zero bits are 0 in every storage type.
  const size_t element = internal::KvElementBytes(storage);
  for (int64_t kv_head = 0; kv_head < num_kv_heads; ++kv_head) {
    const internal::KvPages pages = Pages(sequence, kv_head);
    if (pages.key_residual) {
      internal::RestoreKeyResidual(pages, lengths[sequence], length, head_dim);
    }
    for (int64_t first = length; first < lengths[sequence];) {
      const int64_t page = first / page_size, row = first % page_size;
      const int64_t end = std::min(page_size, row + lengths[sequence] - first);
      if (!internal::HasZeroPoints(storage)) {  // int4 codes are finite, whatever
        internal::ZeroTileRows(pages.ValuePage(page), page_size, padded_head_dim, row,
                               end, element);
      }
      if (internal::HasTokenScales(storage)) {  // a NaN scale would poison 0 x
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
  const int64_t token_bytes = internal::KvTokenBytes(config.head_dim, storage, page);
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
                 DType storage, KvScales scales) {
  internal::ValidateConfig(config);
  const internal::KvStorage kind = internal::KvStorageFor("KvCache", storage, scales);
  if (max_batch < 1) internal::Fail("KvCache: max_batch must be >= 1, got ", max_batch);
  if (max_seq_len < 1)
    internal::Fail("KvCache: max_seq_len must be >= 1, got ", max_seq_len);
  CheckCacheBytes(config, max_batch, max_seq_len, kind);
  impl_ = std::make_unique<Impl>(config, max_batch, max_seq_len, kind);
}

KvCache::~KvCache() = default;
KvCache::KvCache(KvCache&&) noexcept = default;
KvCache& KvCache::operator=(KvCache&&) noexcept = default;

int64_t KvCache::max_batch() const { return impl_->max_batch; }
int64_t KvCache::max_seq_len() const { return impl_->max_seq_len; }
DType KvCache::storage() const { return internal::DTypeOf(impl_->storage); }
KvScales KvCache::scales() const { return internal::ScalesOf(impl_->storage); }
int64_t KvCache::bytes_per_token() const {
  return impl_->num_kv_heads *
         internal::KvTokenBytes(impl_->head_dim, impl_->storage, impl_->page_size);
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

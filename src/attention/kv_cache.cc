// KvCache: allocation, lengths and resets.
#include "mha/kv_cache.hpp"

#include <algorithm>
#include <cstring>

#include "src/api/check.h"
#include "src/api/problem.h"
#include "src/attention/kv_cache_storage.h"
#include "src/kernels/attention_head.h"

namespace mha {

using internal::Fail;

KvCache::Impl::Impl(const AttentionConfig& config, int64_t batch, int64_t seq_len,
                    DType storage)
    : num_kv_heads(config.resolved_num_kv_heads()),
      head_dim(config.head_dim),
      max_batch(batch),
      max_seq_len(seq_len),
      capacity(static_cast<int64_t>(internal::RoundUp(static_cast<size_t>(seq_len),
                                                      internal::HeadScratch::kKeyBlock))),
      padded_head_dim(static_cast<int64_t>(internal::RoundUp(
          static_cast<size_t>(config.head_dim), internal::HeadScratch::kPanelAlign))),
      bf16(storage == DType::kBFloat16),
      lengths(batch, 0) {
  // Zero-filled: padded rows and columns must read as 0 (a 0 weight times a NaN
  // left over in memory would still be NaN).
  const int64_t panels = batch * num_kv_heads;
  const size_t element = bf16 ? 2 : 4;
  keys.assign(element * internal::CheckedNumElements(
                            "KvCache", Shape{panels, head_dim, capacity}, element),
              0);
  values.assign(
      element * internal::CheckedNumElements(
                    "KvCache", Shape{panels, capacity, padded_head_dim}, element),
      0);
}

KvCache::KvCache(const AttentionConfig& config, int64_t max_batch, int64_t max_seq_len,
                 DType storage) {
  internal::ValidateConfig(config);
  if (storage != DType::kFloat32 && storage != DType::kBFloat16) {
    Fail("KvCache: storage must be float32 or bfloat16, got ", DTypeName(storage));
  }
  if (max_batch < 1) Fail("KvCache: max_batch must be >= 1, got ", max_batch);
  if (max_seq_len < 1) Fail("KvCache: max_seq_len must be >= 1, got ", max_seq_len);
  impl_ = std::make_unique<Impl>(config, max_batch, max_seq_len, storage);
}

KvCache::~KvCache() = default;
KvCache::KvCache(KvCache&&) noexcept = default;
KvCache& KvCache::operator=(KvCache&&) noexcept = default;

int64_t KvCache::max_batch() const { return impl_->max_batch; }
int64_t KvCache::max_seq_len() const { return impl_->max_seq_len; }
DType KvCache::storage() const {
  return impl_->bf16 ? DType::kBFloat16 : DType::kFloat32;
}

int64_t KvCache::length(int64_t sequence) const {
  if (sequence < 0 || sequence >= impl_->max_batch) {
    Fail("KvCache::length: sequence must be in [0, ", impl_->max_batch, "), got ",
         sequence);
  }
  return impl_->lengths[sequence];
}

void KvCache::Reset() {
  for (int64_t sequence = 0; sequence < impl_->max_batch; ++sequence) Reset(sequence);
}

void KvCache::Reset(int64_t sequence) {
  if (sequence < 0 || sequence >= impl_->max_batch) {
    Fail("KvCache::Reset: sequence must be in [0, ", impl_->max_batch, "), got ",
         sequence);
  }
  Truncate(sequence, 0);
}

void KvCache::Truncate(int64_t sequence, int64_t length) {
  if (sequence < 0 || sequence >= impl_->max_batch) {
    Fail("KvCache::Truncate: sequence must be in [0, ", impl_->max_batch, "), got ",
         sequence);
  }
  const int64_t current = impl_->lengths[sequence];
  if (length < 0 || length > current) {
    Fail("KvCache::Truncate: length must be in [0, ", current, "], got ", length);
  }
  // Values past a sequence's length are multiplied by 0: keep them finite.
  // Zero bits are 0.0 in float and in bfloat16 alike.
  const size_t row_bytes = impl_->padded_head_dim * (impl_->bf16 ? 2 : 4);
  for (int64_t kv_head = 0; kv_head < impl_->num_kv_heads; ++kv_head) {
    uint8_t* values = static_cast<uint8_t*>(impl_->ValuePanel(sequence, kv_head));
    std::memset(values + length * row_bytes, 0, (current - length) * row_bytes);
  }
  impl_->lengths[sequence] = length;
}

}  // namespace mha

// KvCache: one layer's projected keys and values for the sequences of a batch, owned
// by the caller and filled by MultiheadAttention::ForwardWithCache.
#pragma once

#include <cstdint>
#include <memory>

#include "mha/config.hpp"
#include "mha/tensor.hpp"

namespace mha {

class MultiheadAttention;

// Preallocated at creation for max_batch sequences of up to max_seq_len tokens,
// num_kv_heads x head_dim per token (grouped-query layers store only their KV
// heads). Nothing is allocated per step. Not thread-safe: one request, one cache.
class KvCache {
 public:
  // storage: kFloat32, or kBFloat16 (half the memory and the bytes streamed per
  // decode step; keys and values are rounded to bf16 when appended, attention and
  // softmax stay fp32). Throws mha::Error for an invalid config, sizes or storage.
  KvCache(const AttentionConfig& config, int64_t max_batch, int64_t max_seq_len,
          DType storage = DType::kFloat32);
  ~KvCache();
  KvCache(KvCache&&) noexcept;
  KvCache& operator=(KvCache&&) noexcept;

  int64_t max_batch() const;
  int64_t max_seq_len() const;
  DType storage() const;
  int64_t length(int64_t sequence) const;  // tokens cached for that sequence
  void Reset();                            // every sequence empty
  void Reset(int64_t sequence);            // one sequence empty (continuous batching)
  // Drops a sequence's tokens from position `length` on (length <= length(sequence)),
  // e.g. rejected speculative tokens.
  void Truncate(int64_t sequence, int64_t length);

  struct Impl;  // opaque: defined inside the library

 private:
  friend class MultiheadAttention;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mha

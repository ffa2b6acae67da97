// RunAttentionCore: the one entry point into the flash kernel. The layer's flows
// (whole, chunked, with a KV cache) and the public ScaledDotProductAttention all
// describe their tensors and options as a CoreCall and run it here, in parallel over
// (batch, head) tasks.
#pragma once

#include <cstdint>
#include <vector>

#include "mha/kv_cache.hpp"
#include "mha/rotary.hpp"
#include "src/masks/mask_plan.h"

namespace mha::internal {

// Rows of a [B, H, S, D] tensor in any layout: row r of head h of batch b starts at
// data + b * batch_stride + h * head_stride + r * row_stride.
template <class T>
struct HeadRows {
  T* data = nullptr;
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0;
  T* Row(int64_t batch, int64_t head, int64_t row) const {
    return data + batch * batch_stride + head * head_stride + row * row_stride;
  }
};

struct CoreCall {
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t query_len = 0, key_len = 0;  // of the whole problem
  // This call: queries [first_query, first_query + query_count) of batches
  // [batch_begin, batch_end); query/context Row(b, h, 0) is first_query's.
  int64_t batch_begin = 0, batch_end = 0, first_query = 0, query_count = 0;
  HeadRows<const float> query, key, value;
  HeadRows<float> context;
  float* probabilities = nullptr;  // [B, num_heads, Sq, Sk], or null
  float* logsumexp = nullptr;      // [B, num_heads, Sq], or null
  // Decoding: keys and values from the cache's panels, and per-batch query counts.
  KvCache::Impl* cache = nullptr;
  const int64_t* query_counts = nullptr;
  // Logits: query scale (1 when folded into weights), soft-cap (0: none), ALiBi
  // slopes and sinks per query head (null: none).
  float query_scale = 1.0f, softcap = 0.0f;
  const float* alibi_slopes = nullptr;
  const float* sinks = nullptr;
  // Rotary embedding: query positions [B, query_len] (required with rotary) and key
  // positions [B, key_len] (null: key j at j; unused with a cache, whose keys were
  // rotated when appended).
  const RotaryEmbedding* rotary = nullptr;
  const int64_t* query_positions = nullptr;
  const int64_t* key_positions = nullptr;
};

// `scratch` grows to the per-thread panels and tiles the call needs.
void RunAttentionCore(const CoreCall& call, const MaskPlan& masks,
                      std::vector<float>& scratch);

}  // namespace mha::internal

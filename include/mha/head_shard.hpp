// Head sharding for tensor parallelism (Megatron-style): the part of a full layer
// that owns a range of its heads, so that several processes or machines each run
// one part and sum their outputs with their own collective library (MPI_Allreduce).
#pragma once

#include <cstdint>
#include <memory>

#include "mha/config.hpp"
#include "mha/weights.hpp"

namespace mha {

// Query heads [first_head, end_head) of the full layer. With grouped-query attention
// both ends lie on key/value group boundaries (multiples of group_size()), so every
// shard holds whole KV heads and its caches store only those.
struct HeadShard {
  int64_t first_head = 0;
  int64_t end_head = 0;
};

// Shard `rank` of `world_size`: the KV groups split as evenly as possible, the first
// num_kv_heads % world_size ranks taking one group more. Throws mha::Error unless
// 0 <= rank < world_size <= num_kv_heads.
HeadShard EvenHeadShard(const AttentionConfig& config, int64_t rank, int64_t world_size);

// The config and weights of one shard, ready for MultiheadAttention and KvCache:
// - query, key and value projections keep the rows of the shard's heads
//   (column-parallel), the output projection the matching input columns
//   (row-parallel); its bias stays with the shard of head 0 only, so the shards'
//   outputs sum to the full layer's output;
// - without an output projection a shard returns its heads' slice of the
//   concatenated heads: gather the shards' outputs instead of summing them;
// - sinks and ALiBi slopes (BLOOM's defaults resolved for the full head count) are
//   the shard's; the scale, rotary embedding, windows and soft-cap are the layer's.
// Attention weights of a shard are its own heads'; averaged, they average over its
// heads only. The weights are copied (kOutIn layout): `storage` owns them, so
// copies of an AttentionShard stay valid while any of them lives.
struct AttentionShard {
  AttentionConfig config;
  AttentionWeights weights;
  HeadShard heads;
  std::shared_ptr<const void> storage;
};

// Throws mha::Error for an invalid layer or a shard that is empty, out of range or
// splits a key/value group.
AttentionShard ShardHeads(const AttentionConfig& config, const AttentionWeights& weights,
                          const HeadShard& heads);

}  // namespace mha

// CheckPackedBatch: the sequences of one packed continuous-batching step
// (PackedBatch) checked against a paged cache, for every layer kind that runs one.
#pragma once

#include <cstdint>
#include <vector>

#include "mha/attention.hpp"
#include "src/cache/paged_kv_cache_storage.h"
#include "src/masks/mask_plan.h"

namespace mha::internal {

struct PackedSequences {
  int64_t count = 0;      // sequences in the step
  int64_t query_len = 0;  // the most new tokens of one sequence
  int64_t key_len = 0;    // the longest sequence, its new tokens included
};

// Fills ids[n], rows[n + 1] (query_start_loc), counts[n] (new tokens) and
// first_positions[n] (each sequence's length before them: the slots the last
// AppendSlots made) for `tokens` packed rows, under the cache's mutex. Fails naming
// the argument; nothing but the buffers is written.
PackedSequences CheckPackedBatch(const PackedBatch& batch, int64_t tokens,
                                 const PagedKvCache::Impl& cache,
                                 std::vector<int64_t>& ids, std::vector<int64_t>& rows,
                                 std::vector<int64_t>& counts,
                                 std::vector<int64_t>& first_positions);

// A packed step's token trees (PackedBatch::tree_parents, checked: each token's
// parent is an earlier new token of its sequence, or -1): each row's depth in
// depths[tokens], and its depth-first place and subtree end in
// intervals[2 * tokens], the mask MaskPlan::ForCache takes.
TokenTree BuildTokenTree(const TensorView& tree_parents, int64_t tokens,
                         int64_t sequences, const int64_t* rows,
                         std::vector<int64_t>& depths, std::vector<int64_t>& intervals);

// An int32 or int64 vector of `length` elements, or fails naming it.
void CheckIndexTensor(const char* name, const TensorView& tensor, int64_t length);

}  // namespace mha::internal

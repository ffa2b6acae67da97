// CheckPackedBatch (see the header).
#include "src/attention/packed_batch.h"

#include <algorithm>
#include <mutex>

#include "src/attention/workspace.h"
#include "src/base/check.h"

namespace mha::internal {
namespace {

// Grows a caller's buffer (Workspace::Reserve) for a checked, non-negative count.
template <class T>
T* Reserve(std::vector<T>& buffer, int64_t count) {
  return Workspace::Reserve(buffer, static_cast<size_t>(count));
}

}  // namespace

void CheckIndexTensor(const char* name, const TensorView& tensor, int64_t length) {
  if (tensor.dtype != DType::kInt32 && tensor.dtype != DType::kInt64) {
    Fail(name, ": expected dtype int32 or int64, got ", DTypeName(tensor.dtype));
  }
  CheckTensor(name, tensor, tensor.dtype, Shape{length});
}

PackedSequences CheckPackedBatch(const PackedBatch& batch, int64_t tokens,
                                 const PagedKvCache::Impl& cache,
                                 std::vector<int64_t>& id_buffer,
                                 std::vector<int64_t>& row_buffer,
                                 std::vector<int64_t>& count_buffer,
                                 std::vector<int64_t>& position_buffer) {
  if (batch.sequence_ids.shape.rank() != 1) {
    Fail("batch.sequence_ids: expected shape [N], got ",
         batch.sequence_ids.shape.ToString());
  }
  const int64_t n = batch.sequence_ids.shape[0];
  CheckIndexTensor("batch.sequence_ids", batch.sequence_ids, n);
  CheckIndexTensor("batch.query_start_loc", batch.query_start_loc, n + 1);
  const std::lock_guard<std::mutex> lock(cache.mutex);
  // Distinct live sequences: no more of them than the cache holds. Checked before
  // the workspace is sized from n.
  if (n > cache.active_sequences) {
    Fail("batch.sequence_ids: ", n, " sequences, but the cache holds ",
         cache.active_sequences);
  }
  int64_t* ids = Reserve(id_buffer, n);
  int64_t* rows = Reserve(row_buffer, n + 1);
  int64_t* counts = Reserve(count_buffer, n);
  int64_t* first_positions = Reserve(position_buffer, n);
  PackedSequences sizes;
  sizes.count = n;
  rows[0] = IntegerAt(batch.query_start_loc, 0);
  if (rows[0] != 0) Fail("batch.query_start_loc[0]: must be 0, got ", rows[0]);
  for (int64_t i = 0; i < n; ++i) {
    ids[i] = IntegerAt(batch.sequence_ids, i);
    rows[i + 1] = IntegerAt(batch.query_start_loc, i + 1);
    // Compared before subtracting: INT64_MIN - rows[i] would overflow.
    if (rows[i + 1] < rows[i] || rows[i + 1] > tokens) {
      Fail("batch.query_start_loc[", i + 1, "]: must be in [", rows[i], ", ", tokens,
           "], got ", rows[i + 1]);
    }
    counts[i] = rows[i + 1] - rows[i];
    const PagedKvCache::Impl::Sequence* found = cache.Find(ids[i]);
    if (!found) {
      Fail("batch.sequence_ids[", i, "]: ", ids[i], " is not a sequence of the cache");
    }
    const PagedKvCache::Impl::Sequence& sequence = *found;
    first_positions[i] = sequence.length - counts[i];
    // Only the slots the last AppendSlots made are private to the sequence.
    if (first_positions[i] < sequence.appended_from) {
      Fail("batch: sequence ", ids[i], " has ", counts[i],
           " new tokens but its last cache.AppendSlots made room for ",
           sequence.length - sequence.appended_from,
           " (after Fork or Truncate: none); call cache.AppendSlots first");
    }
    sizes.query_len = std::max(sizes.query_len, counts[i]);
    sizes.key_len = std::max(sizes.key_len, sequence.length);
  }
  cache.CheckDistinct("batch.sequence_ids", ids, n);
  if (rows[n] != tokens) {
    Fail("batch.query_start_loc[", n, "]: must equal the packed rows T=", tokens,
         ", got ", rows[n]);
  }
  return sizes;
}

TokenTree BuildTokenTree(const TensorView& tree_parents, int64_t tokens,
                         int64_t sequences, const int64_t* rows,
                         std::vector<int64_t>& depth_buffer,
                         std::vector<int64_t>& interval_buffer) {
  CheckIndexTensor("batch.tree_parents", tree_parents, tokens);
  int64_t* depths = Reserve(depth_buffer, tokens);
  int64_t* preorder = Reserve(interval_buffer, 2 * tokens);
  int64_t* subtree_end = preorder + tokens;
  for (int64_t b = 0; b < sequences; ++b) {
    for (int64_t row = rows[b]; row < rows[b + 1]; ++row) {
      const int64_t i = row - rows[b], parent = IntegerAt(tree_parents, row);
      if (parent < -1 || parent >= i) {
        Fail("batch.tree_parents[", row, "]: must be in [-1, ", i,
             ") (a new token of the same sequence before it, or -1), got ", parent);
      }
      depths[row] = parent < 0 ? 0 : depths[rows[b] + parent] + 1;
    }
    // Subtree sizes, children (always later rows) first.
    std::fill(subtree_end + rows[b], subtree_end + rows[b + 1], int64_t{1});
    for (int64_t row = rows[b + 1] - 1; row >= rows[b]; --row) {
      const int64_t parent = IntegerAt(tree_parents, row);
      if (parent >= 0) subtree_end[rows[b] + parent] += subtree_end[row];
    }
    // Depth-first places, parents first: a node takes its parent's next free place
    // and moves it past its subtree; its own next free place then lives in
    // subtree_end, which ends at place + size once its children are placed.
    int64_t next_root = 0;
    for (int64_t row = rows[b]; row < rows[b + 1]; ++row) {
      const int64_t parent = IntegerAt(tree_parents, row);
      int64_t& next = parent < 0 ? next_root : subtree_end[rows[b] + parent];
      preorder[row] = next;
      next += subtree_end[row];
      subtree_end[row] = preorder[row] + 1;
    }
  }
  return {preorder, subtree_end, rows};
}

}  // namespace mha::internal

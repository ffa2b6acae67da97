// LinearTiles: how one projection y[M, N] = x[M, K] W[K, N] is cut into tasks, each
// run as a single-threaded oneDNN matmul. The cut depends on M, K and N only, never
// on the thread count, and each task adds its products in an order fixed by its
// shape, so a projection gives the same bits on any number of threads. (oneDNN's
// own threading does not: for few rows it splits K across the threads it has.)
#pragma once

#include <algorithm>
#include <cstdint>

namespace mha::internal {

// [0, extent) in `count` pieces of `size`; the last one may be shorter.
struct Cut {
  int64_t extent = 0, size = 0, count = 0;
  int64_t Begin(int64_t piece) const { return piece * size; }
  int64_t Size(int64_t piece) const { return std::min(size, extent - piece * size); }
  bool HasShortLast() const { return count * size != extent; }
};

struct LinearTiles {
  // Decode-sized inputs cut the depth K: each piece writes partial sums of every row
  // and column, and they are added in piece order. Weight rows are contiguous, so a
  // piece streams its share of W at full speed (cutting columns would not).
  // Larger inputs cut rows and columns, and each tile is one whole matmul.
  bool split_depth = false;
  Cut rows, columns, depth;
  int64_t tasks() const { return split_depth ? depth.count : rows.count * columns.count; }
};

// Inputs of up to this many rows split the depth.
constexpr int64_t kSplitDepthRows = 16;

// kByRows: the cut that suits the row count (decode-sized inputs split the depth).
// kBatchInvariant: a row's bits must not depend on the rows that share its call
// (ForwardOptions::batch_invariant). oneDNN adds a row's products in an order that
// depends on the depth cut, on the kernel its block of rows gets (AVX2: blocks of
// six, and the rows left over after them get smaller kernels, whose bits differ for
// two rows; AVX-512: one row alone differs) and, from a few hundred rows, on the row
// count. So the depth is never split, the input is padded with zero rows to whole
// groups of kInvariantRowGroup rows, and the rows are cut in tiles of at most
// kInvariantTileRows, whole groups each (tests/system/batch_invariance_test.cc).
enum class TileRule { kByRows, kBatchInvariant };
constexpr int64_t kInvariantRowGroup = 12, kInvariantTileRows = 60;

LinearTiles PlanLinearTiles(int64_t rows, int64_t in_dim, int64_t out_dim, TileRule rule);

}  // namespace mha::internal

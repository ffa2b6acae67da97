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

LinearTiles PlanLinearTiles(int64_t rows, int64_t in_dim, int64_t out_dim);

}  // namespace mha::internal

// LinearPrimitive's split depth, for decode-sized inputs: fixed-shape primitives
// for the depth pieces (made on first use, kept in the caller's LinearCall), and the
// sum of the pieces' partial outputs plus the bias.
#include <algorithm>

#include "src/base/parallel_for.h"
#include "src/projection/linear_primitive.h"

namespace mha::internal {

const LinearCall::Pieces& LinearPrimitive::PreparePieces(LinearCall& call,
                                                         const LinearTiles& tiles) const {
  const int64_t rows = tiles.rows.extent;
  for (const LinearCall::Pieces& pieces : call.pieces) {
    if (pieces.rows == rows) return pieces;
  }
  LinearCall::Pieces& pieces = call.pieces[call.next_victim];
  call.next_victim = (call.next_victim + 1) % LinearCall::kEntries;
  pieces.rows = -1;  // until both primitives are made: either may fail
  const Cut& depth = tiles.depth;
  pieces.primitives[0] = MakeMatmul(rows, depth.size, shape_.out_dim, true);
  if (depth.HasShortLast()) {
    pieces.primitives[1] =
        MakeMatmul(rows, depth.Size(depth.count - 1), shape_.out_dim, true);
  }
  pieces.rows = rows;
  return pieces;
}

void LinearPrimitive::AddPartialSums(const LinearTiles& tiles, const float* partial_sums,
                                     float* output) const {
  const int64_t rows = tiles.rows.extent, columns = shape_.out_dim;
  const int64_t piece_floats = rows * columns;
  constexpr int64_t kSlice = 512;  // columns per task
  const int64_t slices = (columns + kSlice - 1) / kSlice;
  ParallelFor(rows * slices, nullptr, 0, [&](int64_t task, float*) {
    const int64_t row = task / slices, first = task % slices * kSlice;
    const int64_t last = std::min(columns, first + kSlice);
    const float* sums = partial_sums + row * columns;
    float* out = output + row * shape_.output_stride;
    for (int64_t n = first; n < last; ++n) {
      float sum = sums[n];
      for (int64_t piece = 1; piece < tiles.depth.count; ++piece)
        sum += sums[piece * piece_floats + n];
      out[n] = bias_ ? sum + bias_[n] : sum;
    }
  });
}

}  // namespace mha::internal

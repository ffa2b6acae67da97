// PlanLinearTiles. Sizes measured on a 2-core Zen 3 (docs/performance.md): 64-row
// tiles up to 768 columns wide keep oneDNN's single-threaded GEMM at the speed of
// its own threading; depth pieces of 192 rows of W beat it for one decode row.
#include "src/planning/linear_tiles.h"

namespace mha::internal {
namespace {

constexpr int64_t kTileRows = 64;
constexpr int64_t kTileColumns = 768;
constexpr int64_t kDepthPiece = 192;
constexpr int64_t kMaxDepthPieces = 8;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Near-equal pieces of at most `max_size`, sizes a multiple of `align` (but the last).
Cut Balanced(int64_t extent, int64_t max_size, int64_t align) {
  const int64_t pieces = CeilDiv(extent, max_size);
  const int64_t size = std::min(extent, CeilDiv(CeilDiv(extent, pieces), align) * align);
  return Cut{extent, size, CeilDiv(extent, size)};
}

}  // namespace

LinearTiles PlanLinearTiles(int64_t rows, int64_t in_dim, int64_t out_dim) {
  LinearTiles tiles;
  tiles.split_depth = rows <= kSplitDepthRows;
  if (tiles.split_depth) {
    const int64_t piece = std::max(kDepthPiece, CeilDiv(in_dim, kMaxDepthPieces));
    tiles.rows = Cut{rows, rows, 1};
    tiles.columns = Cut{out_dim, out_dim, 1};
    tiles.depth = Balanced(in_dim, piece, 16);
  } else {
    tiles.rows = Balanced(rows, kTileRows, 1);
    tiles.columns = Balanced(out_dim, kTileColumns, 16);
    tiles.depth = Cut{in_dim, in_dim, 1};
  }
  return tiles;
}

}  // namespace mha::internal

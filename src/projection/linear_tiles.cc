// PlanLinearTiles (the sizes' measurements: docs/fast_path.md, "Projections"): each
// oneDNN call packs its share of W again, so large inputs take rows in tiles of up to
// 512, while keeping at least 8 row tiles for the threads; depth pieces of 192 rows of
// W beat oneDNN's own threading for one decode row.
#include "src/projection/linear_tiles.h"

namespace mha::internal {
namespace {

constexpr int64_t kMinTileRows = 64, kMaxTileRows = 512, kRowTilesWanted = 8;
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

LinearTiles PlanLinearTiles(int64_t rows, int64_t in_dim, int64_t out_dim,
                            TileRule rule) {
  LinearTiles tiles;
  tiles.split_depth = rule == TileRule::kByRows && rows <= kSplitDepthRows;
  if (tiles.split_depth) {
    const int64_t piece = std::max(kDepthPiece, CeilDiv(in_dim, kMaxDepthPieces));
    tiles.rows = Cut{rows, rows, 1};
    tiles.columns = Cut{out_dim, out_dim, 1};
    tiles.depth = Balanced(in_dim, piece, 16);
  } else if (rule == TileRule::kBatchInvariant) {
    tiles.rows = Balanced(rows, kInvariantTileRows, kInvariantRowGroup);
    tiles.columns = Balanced(out_dim, kTileColumns, 16);
    tiles.depth = Cut{in_dim, in_dim, 1};
  } else {
    const int64_t tile_rows =
        std::clamp(CeilDiv(rows, kRowTilesWanted), kMinTileRows, kMaxTileRows);
    tiles.rows = Balanced(rows, tile_rows, 1);
    tiles.columns = Balanced(out_dim, kTileColumns, 16);
    tiles.depth = Cut{in_dim, in_dim, 1};
  }
  return tiles;
}

}  // namespace mha::internal

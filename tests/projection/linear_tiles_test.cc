// The projections' tiles (src/projection/linear_tiles.h): every output element and
// every product of the reduction covered exactly once, sizes within the stated
// bounds, over odd shapes. (That the tiles make the bits thread-independent is
// determinism_test's job.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "src/projection/linear_tiles.h"

namespace mha::internal {
namespace {

// Pieces in order, none empty, none past the extent, together exactly [0, extent).
void ExpectCovers(const Cut& cut, int64_t max_size, const std::string& what) {
  int64_t next = 0;
  for (int64_t piece = 0; piece < cut.count; ++piece) {
    EXPECT_EQ(cut.Begin(piece), next) << what << " piece " << piece;
    EXPECT_GE(cut.Size(piece), 1) << what << " piece " << piece;
    EXPECT_LE(cut.Size(piece), max_size) << what << " piece " << piece;
    next += cut.Size(piece);
  }
  EXPECT_EQ(next, cut.extent) << what;
}

struct Shape {
  int64_t rows, in_dim, out_dim;
};

TEST(LinearTiles, CoverEveryShapeExactlyOnce) {
  std::vector<Shape> shapes;
  for (int64_t rows : {1, 2, 3, 15, 16, 17, 63, 64, 65, 100, 129, 4096})
    for (int64_t in_dim : {1, 7, 16, 32, 191, 192, 193, 768, 3072, 4099})
      for (int64_t out_dim : {1, 15, 17, 768, 769, 2304, 5000})
        shapes.push_back({rows, in_dim, out_dim});
  for (const Shape& s : shapes) {
    const std::string name = std::to_string(s.rows) + "x" + std::to_string(s.in_dim) +
                             "x" + std::to_string(s.out_dim);
    const LinearTiles tiles =
        PlanLinearTiles(s.rows, s.in_dim, s.out_dim, TileRule::kByRows);
    EXPECT_EQ(tiles.split_depth, s.rows <= kSplitDepthRows) << name;
    if (tiles.split_depth) {
      EXPECT_EQ(tiles.rows.count, 1) << name;
      EXPECT_EQ(tiles.columns.count, 1) << name;
      EXPECT_LE(tiles.depth.count, 8) << name;
      EXPECT_EQ(tiles.tasks(), tiles.depth.count) << name;
      ExpectCovers(tiles.depth, s.in_dim, name + " depth");
    } else {
      EXPECT_EQ(tiles.depth.count, 1) << name;
      EXPECT_EQ(tiles.tasks(), tiles.rows.count * tiles.columns.count) << name;
      ExpectCovers(tiles.rows, 512, name + " rows");
      ExpectCovers(tiles.columns, 768, name + " columns");
      // Whole column tiles are a multiple of 16 wide (the kernels' vector widths).
      if (tiles.columns.count > 1) {
        EXPECT_EQ(tiles.columns.size % 16, 0) << name;
      }
    }
    ExpectCovers(tiles.rows, s.rows, name + " rows");
    ExpectCovers(tiles.columns, s.out_dim, name + " columns");
  }
}

TEST(LinearTiles, SplitEnoughWorkForSeveralThreads) {
  // A decode step of a 768-wide layer: four pieces of 192 rows of W.
  EXPECT_EQ(PlanLinearTiles(1, 768, 2304, TileRule::kByRows).depth.count, 4);
  // A BERT-base prefill of 128 tokens: 2 row tiles x 3 column tiles.
  const LinearTiles prefill = PlanLinearTiles(128, 768, 2304, TileRule::kByRows);
  EXPECT_EQ(prefill.rows.count, 2);
  EXPECT_EQ(prefill.columns.count, 3);
  // Large inputs take taller tiles, at least 8 of them: 4096 rows in 8 of 512,
  // 1024 rows in 8 of 128.
  EXPECT_EQ(PlanLinearTiles(4096, 768, 768, TileRule::kByRows).rows.count, 8);
  EXPECT_EQ(PlanLinearTiles(4096, 768, 768, TileRule::kByRows).rows.size, 512);
  EXPECT_EQ(PlanLinearTiles(1024, 768, 768, TileRule::kByRows).rows.size, 128);
  EXPECT_EQ(PlanLinearTiles(100000, 768, 768, TileRule::kByRows).rows.size,
            511);  // 196 near-equal tiles
  // Near-equal row tiles: 65 rows are 33 + 32, not 64 + 1.
  const LinearTiles odd = PlanLinearTiles(65, 768, 768, TileRule::kByRows);
  EXPECT_EQ(odd.rows.Size(0), 33);
  EXPECT_EQ(odd.rows.Size(1), 32);
}

TEST(LinearTiles, BatchInvariantCutsNeverSplitTheDepth) {
  for (const int64_t rows : {1, 2, 16, 17, 64, 1000}) {
    const LinearTiles tiles =
        PlanLinearTiles(rows, 4096, 6144, TileRule::kBatchInvariant);
    EXPECT_FALSE(tiles.split_depth) << rows << " rows";
    EXPECT_EQ(tiles.depth.count, 1) << rows << " rows";
    EXPECT_EQ(tiles.columns.size, 768) << rows << " rows";
  }
}

}  // namespace
}  // namespace mha::internal

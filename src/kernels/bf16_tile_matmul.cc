// Bf16TileMatMul (bf16_tile_matmul.h): AMX tiles for the whole kAmxDepth / 2 chunks
// of a product large enough, vdpbf16ps for the rest.
#include "src/kernels/bf16_tile_matmul.h"

#include "src/kernels/tile_sizes.h"
#include "src/platform/cpu_features.h"
#include "src/platform/isa_cap.h"

namespace mha::internal {

bool AmxTileProducts() { return CapAllowsAmx() && CpuHasAmxBf16(); }

namespace {

// The tile products of the AMX part, counted in full-depth ones (16-row blocks, one
// panel per C tile).
size_t TileProducts(size_t rows, size_t n, size_t tiled_depth) {
  return (rows + 15) / 16 * (n / kPanelWidth) * tiled_depth / kAmxDepth;
}

}  // namespace

void Bf16TileMatMul(size_t rows, size_t n, size_t depth, const uint16_t* a, size_t lda,
                    const uint16_t* b, size_t b_rows, float* c, size_t ldc,
                    bool accumulate, const uint16_t* after) {
  size_t tiled = depth / (kAmxDepth / 2) * (kAmxDepth / 2);
  if (TileProducts(rows, n, tiled) < kAmxMinTileProducts || !AmxTileProducts()) tiled = 0;
  if (tiled > 0) {
    Bf16TileMatMulAmx(rows, n, tiled, a, lda, b, b_rows, c, ldc, accumulate);
    if (tiled == depth) return;
    accumulate = true;
  }
  // B from row `tiled` on: the same panels (b_rows apart), `tiled` (even) rows in.
  Bf16TileMatMulAvx512(rows, n, depth - tiled, a + tiled, lda, b + tiled * kPanelWidth,
                       b_rows, c, ldc, accumulate, after);
}

}  // namespace mha::internal

// Bf16TileMatMul (bf16_tile_matmul.h): AMX tiles for the whole amx_depth chunks of
// every product where AMX runs, vdpbf16ps for the rest.
#include "src/kernel/bf16_tile_matmul.h"

#include "src/base/cpu_features.h"
#include "src/base/isa_cap.h"
#include "src/kv/tile_sizes.h"

namespace mha::internal {

bool AmxTileProducts() { return CapAllowsAmx() && CpuHasAmxBf16(); }

void Bf16TileMatMul(size_t rows, size_t n, size_t depth, const uint16_t* a, size_t lda,
                    const uint16_t* b, size_t b_rows, float* c, size_t ldc,
                    bool accumulate, const uint16_t* after, size_t amx_depth,
                    const uint16_t* ahead) {
  size_t done = 0;
  if (AmxTileProducts()) {
    // Whole amx_depth chunks from depth 0: a row's products are grouped alike for
    // every row count and every depth past its last nonzero product.
    done = depth / amx_depth * amx_depth;
    if (done > 0) {
      Bf16TileMatMulAmx(rows, n, done, a, lda, b, b_rows, c, ldc, accumulate, amx_depth,
                        ahead           ? ahead
                        : done == depth ? after
                                        : nullptr);
      if (done == depth) return;
      accumulate = true;
    }
  }
  // B from row `done` on: the same panels (b_rows apart), `done` (even) rows in.
  Bf16TileMatMulAvx512(rows, n, depth - done, a + done, lda, b + done * kPanelWidth,
                       b_rows, c, ldc, accumulate, after,
                       ahead && done == 0 ? ahead : nullptr);
}

}  // namespace mha::internal

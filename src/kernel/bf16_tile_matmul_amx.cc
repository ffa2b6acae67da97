// Bf16TileMatMulAmx on AMX (bf16_tile_matmul.h): tdpbf16ps multiplies a 16 x depth
// bfloat16 tile of A by a depth x 16 one of B into a 16 x 16 fp32 tile of C, at a
// depth the caller sets so that every cache groups a row's products alike: a whole
// tile row, 32 (Q K^T over head_dim), or half of one, 16 (P V over a 16-token page).
// A B tile is depth / 2 pair-rows of one paired panel, consecutive 64-byte lines: the
// layout the KV pages already have (kv_pages.h), so it loads in place. The eight tile
// registers hold a 2 x 2 block of C (32 rows x 2 panels), the two A tiles and the two
// B tiles it needs.
#include "src/kernel/bf16_tile_matmul.h"

#include <algorithm>

#include "src/kv/kv_pages.h"
#include "src/simd/prefetch_rule.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define MHA_AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))

namespace mha::internal {
namespace {

constexpr size_t kAmxTileRows = 16, kLineBytes = 64;

// The 64-byte tile configuration of palette 1 (Intel SDM, LDTILECFG).
struct TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// The tiles' shapes: row blocks of rows[0] and rows[1] (0: none) rows, products
// `depth` deep.
struct Shape {
  size_t rows[2];
  size_t depth;
  bool operator!=(const Shape& other) const {
    return rows[0] != other.rows[0] || depth != other.depth ||
           (rows[1] && rows[1] != other.rows[1]);  // a block of none fits any
  }
};

// The configuration this thread's tiles hold inside an AmxTileSession.
struct Session {
  bool open = false;
  Shape configured{{0, 0}, 0};
};
thread_local Session session;

MHA_AMX_TARGET void ReleaseTiles() { _tile_release(); }

// C tiles 0-3 (C[block][panel] is tile 2 block + panel), A tiles 4-5, B tiles 6-7.
MHA_AMX_TARGET void Configure(const Shape& shape) {
  TileConfig config;
  for (size_t block = 0; block < 2; ++block) {
    const auto rows = static_cast<uint8_t>(shape.rows[block]);
    const uint16_t bytes = rows ? kLineBytes : 0;
    config.rows[2 * block] = config.rows[2 * block + 1] = config.rows[4 + block] = rows;
    config.bytes_per_row[2 * block] = config.bytes_per_row[2 * block + 1] = bytes;
    config.bytes_per_row[4 + block] =
        static_cast<uint16_t>(rows ? shape.depth * sizeof(uint16_t) : 0);
  }
  for (size_t tile : {6, 7}) {
    config.rows[tile] = static_cast<uint8_t>(shape.depth / 2);  // pair-rows
    config.bytes_per_row[tile] = kLineBytes;
  }
  _tile_loadconfig(&config);
}

// Where one 32-row x 2-panel block of C reads its operands.
struct Block {
  const uint16_t* a;  // row 0 of the block, depth 0
  size_t a_stride;    // bytes
  const uint16_t* b[2];
  float* c;
  size_t c_stride;  // bytes
  bool second_rows, second_panel;
};

// Tile numbers are immediates: each C tile's load, product and store is spelled out.
MHA_AMX_TARGET void LoadOrZeroC(const Block& block, bool accumulate) {
  if (!accumulate) {
    _tile_zero(0);
    if (block.second_panel) _tile_zero(1);
    if (block.second_rows) _tile_zero(2);
    if (block.second_rows && block.second_panel) _tile_zero(3);
    return;
  }
  const size_t below = kAmxTileRows * block.c_stride / sizeof(float);
  _tile_loadd(0, block.c, block.c_stride);
  if (block.second_panel) _tile_loadd(1, block.c + kPanelWidth, block.c_stride);
  if (block.second_rows) _tile_loadd(2, block.c + below, block.c_stride);
  if (block.second_rows && block.second_panel) {
    _tile_loadd(3, block.c + below + kPanelWidth, block.c_stride);
  }
}

MHA_AMX_TARGET void StoreC(const Block& block) {
  const size_t below = kAmxTileRows * block.c_stride / sizeof(float);
  _tile_stored(0, block.c, block.c_stride);
  if (block.second_panel) _tile_stored(1, block.c + kPanelWidth, block.c_stride);
  if (block.second_rows) _tile_stored(2, block.c + below, block.c_stride);
  if (block.second_rows && block.second_panel) {
    _tile_stored(3, block.c + below + kPanelWidth, block.c_stride);
  }
}

// C block += A[:, k, k + step) B[k, k + step) for every `step` of depth.
MHA_AMX_TARGET void MultiplyBlock(const Block& block, size_t depth, size_t step,
                                  const uint8_t* prefetch, size_t prefetch_bytes) {
  const size_t a_below = kAmxTileRows * block.a_stride / sizeof(uint16_t);
  const size_t steps = depth / step;
  const size_t per_step =
      RoundUp((prefetch_bytes + steps - 1) / std::max<size_t>(steps, 1), kCacheLineBytes);
  for (size_t k = 0; k < depth; k += step) {
    if (prefetch_bytes > 0) {
      const size_t bytes = std::min(per_step, prefetch_bytes);
      PrefetchLines(prefetch, bytes);
      prefetch += bytes;
      prefetch_bytes -= bytes;
    }
    _tile_loadd(4, block.a + k, block.a_stride);
    _tile_loadd(6, block.b[0] + k * kPanelWidth, kLineBytes);
    if (block.second_panel) _tile_loadd(7, block.b[1] + k * kPanelWidth, kLineBytes);
    if (block.second_rows) _tile_loadd(5, block.a + a_below + k, block.a_stride);
    _tile_dpbf16ps(0, 4, 6);
    if (block.second_panel) _tile_dpbf16ps(1, 4, 7);
    if (block.second_rows) {
      _tile_dpbf16ps(2, 5, 6);
      if (block.second_panel) _tile_dpbf16ps(3, 5, 7);
    }
  }
}

}  // namespace

MHA_AMX_TARGET void Bf16TileMatMulAmx(size_t rows, size_t n, size_t depth,
                                      const uint16_t* a, size_t lda, const uint16_t* b,
                                      size_t b_rows, float* c, size_t ldc,
                                      bool accumulate, size_t amx_depth,
                                      const uint16_t* after) {
  const size_t stored_rows = RoundUp(b_rows, 2), panels = n / kPanelWidth;
  // The tile read next (a decode step's next page, from memory) on its way to L2, a
  // slice per block of C: tileloadd has no prefetcher ramp-up over short pages.
  const size_t after_bytes = after ? stored_rows * n * sizeof(uint16_t) : 0;
  const size_t blocks =
      (rows + 2 * kAmxTileRows - 1) / (2 * kAmxTileRows) * ((panels + 1) / 2);
  const size_t slice =
      blocks ? RoundUp((after_bytes + blocks - 1) / blocks, kCacheLineBytes) : 0;
  size_t prefetched = 0;
  // Configuring costs as much as a few tile products: once per call (once per
  // AmxTileSession), and again only for a row block of another height (48 rows:
  // 16 + 16, then 16 on the same tiles) or another depth (Q K^T, then P V). Outside a
  // session the tiles are released on return: oneDNN's AMX kernels on the same thread
  // configure their own.
  Shape unshared{{0, 0}, 0};
  Shape& configured = session.open ? session.configured : unshared;
  for (size_t first = 0; first < rows; first += 2 * kAmxTileRows) {
    const size_t first_rows = std::min(kAmxTileRows, rows - first);
    const Shape shape{{first_rows, std::min(kAmxTileRows, rows - first - first_rows)},
                      amx_depth};
    if (shape != configured) {
      Configure(shape);
      configured = shape;
    }
    for (size_t panel = 0; panel < panels; panel += 2) {
      Block block;
      block.a = a + first * lda;
      block.a_stride = lda * sizeof(uint16_t);
      block.second_panel = panel + 1 < panels;
      block.second_rows = shape.rows[1] > 0;
      for (size_t i = 0; i < 2; ++i) {
        block.b[i] = b + PairedOffset(0, (panel + i) * kPanelWidth, stored_rows);
      }
      block.c = c + first * ldc + panel * kPanelWidth;
      block.c_stride = ldc * sizeof(float);
      LoadOrZeroC(block, accumulate);
      const size_t bytes = std::min(slice, after_bytes - prefetched);
      MultiplyBlock(block, depth, amx_depth,
                    reinterpret_cast<const uint8_t*>(after) + prefetched, bytes);
      prefetched += bytes;
      StoreC(block);
    }
  }
  if (!session.open) ReleaseTiles();
}

AmxTileSession::AmxTileSession() { session.open = true; }

AmxTileSession::~AmxTileSession() {
  if (session.configured.rows[0] != 0) ReleaseTiles();
  session = Session();
}

}  // namespace mha::internal

#else  // not x86-64: never called (CpuHasAmxBf16 is false)

namespace mha::internal {

void Bf16TileMatMulAmx(size_t, size_t, size_t, const uint16_t*, size_t, const uint16_t*,
                       size_t, float*, size_t, bool, size_t, const uint16_t*) {}
AmxTileSession::AmxTileSession() = default;
AmxTileSession::~AmxTileSession() = default;

}  // namespace mha::internal

#endif

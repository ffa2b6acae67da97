// AmxTileLoop: the AMX tile rate, as BM_AmxPeak reports it. Four independent 16 x 16
// fp32 accumulators each take a full-depth tdpbf16ps (16 x 32 by 32 x 16 bfloat16,
// 16,384 FLOPs) per step from tiles already loaded, so nothing but the tile unit
// sets the pace. Only called where mha::DescribeIsa().amx_tiles (which has also
// asked Linux for the tile state).
#include "benchmarks/machine_peaks.h"

#if defined(__x86_64__)
#include <immintrin.h>

namespace mha::bench {
namespace {

struct TileConfig {  // palette 1 (Intel SDM, LDTILECFG)
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace

__attribute__((target("amx-tile,amx-bf16"))) void AmxTileLoop(int64_t steps,
                                                              float* sink) {
  TileConfig config;
  for (int tile = 0; tile < 8; ++tile) {
    config.rows[tile] = 16;
    config.bytes_per_row[tile] = 64;
  }
  _tile_loadconfig(&config);
  alignas(64) uint16_t operand[16 * 32] = {};
  for (int i = 0; i < 16 * 32; ++i) operand[i] = 0x3f80;  // bfloat16 1.0
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  for (int64_t step = 0; step < steps; ++step) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float result[16 * 16];
  _tile_stored(0, result, 64);
  *sink = result[0];
  _tile_release();
}

}  // namespace mha::bench

#else

namespace mha::bench {
void AmxTileLoop(int64_t, float*) {}
}  // namespace mha::bench

#endif

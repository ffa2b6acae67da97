// Bf16TileMatMul: the tile product of tile_matmul-inl.h on bfloat16 operands with
// fp32 accumulation, in instructions Highway 1.0.3 does not emit, each in one narrow
// x86 file with a target attribute, run only where CPUID says so
// (src/base/cpu_features.h):
// - AVX512_BF16's vdpbf16ps (per 32-bit lane, c += a0 b0 + a1 b1), twice the
//   multiply-adds of an fp32 FMA per instruction (bf16_tile_matmul_avx512.cc);
// - AMX's tdpbf16ps (a 16 x 32 by 32 x 16 tile product), where the CPU has AMX-BF16
//   and the ISA cap is "native" (bf16_tile_matmul_amx.cc).
// The attention kernel calls it only from its AVX-512 target, so MHA_MAX_ISA caps
// it like every Highway kernel.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mha::internal {

// C[rows, n] = (accumulate ? C : 0) + A[rows, depth] B[depth, n]; n % kPanelWidth == 0.
// A: bfloat16 bits, rows lda apart (lda even); B: the first depth rows of a paired
// bfloat16 tile of b_rows rows (src/kv/kv_pages.h). Rows go in pairs: for an
// odd depth, A's element depth must be 0 and B's row depth finite (a tile's zero
// row). `after`: the tile read next, whose start the last strip prefetches. `ahead`
// (or null): the tile read a key tile later in B's place (laid out alike),
// prefetched instead, at the offsets B is read (AMX: a slice per block, as `after`).
// Runs on AMX tiles wherever AmxTileProducts(), whatever the product's size (AMX
// and vdpbf16ps round differently: the kernel must not pick by row count), in tile
// products amx_depth deep (kAmxDepth or kAmxRowDepth); the depth past whole
// amx_depth runs on vdpbf16ps.
void Bf16TileMatMul(size_t rows, size_t n, size_t depth, const uint16_t* a, size_t lda,
                    const uint16_t* b, size_t b_rows, float* c, size_t ldc,
                    bool accumulate, const uint16_t* after, size_t amx_depth,
                    const uint16_t* ahead = nullptr);

// Whether Bf16TileMatMul may use AMX: the CPU has it and the ISA cap allows it.
bool AmxTileProducts();

// While one lives, the AMX products on this thread keep their tile configuration from
// call to call (a decode step's many small products would each pay one) and release
// it when it ends. Open one around a run of Bf16TileMatMul calls with no oneDNN call
// between them (oneDNN's AMX kernels configure the tiles their own way).
class AmxTileSession {
 public:
  AmxTileSession();
  ~AmxTileSession();
  AmxTileSession(const AmxTileSession&) = delete;
  AmxTileSession& operator=(const AmxTileSession&) = delete;
};

// The depths of one AMX tile product as mha runs them. AMX sums one product's terms
// otherwise than in sequence, so the bits of a row depend on how its depth is cut,
// and every cache must cut it alike:
// - P V, over tokens: 16 bfloat16, half a 64-byte tile row, always in 16s from the
//   step's first key: one 16-token page of a paged cache or a sixteenth of a
//   contiguous cache's 128-token page alike;
// - Q K^T, over head_dim (the same in every cache): a whole tile row, 32, where
//   head_dim is a multiple of it (AmxDepthFor), at twice the multiply-adds per
//   tdpbf16ps.
constexpr size_t kAmxDepth = 16, kAmxRowDepth = 32;
constexpr size_t AmxDepthFor(size_t head_dim) {
  return head_dim % kAmxRowDepth == 0 ? kAmxRowDepth : kAmxDepth;
}

// The two kernels, as Bf16TileMatMul; the AMX one takes depth % amx_depth == 0 and
// needs AmxTileProducts().
void Bf16TileMatMulAvx512(size_t rows, size_t n, size_t depth, const uint16_t* a,
                          size_t lda, const uint16_t* b, size_t b_rows, float* c,
                          size_t ldc, bool accumulate, const uint16_t* after,
                          const uint16_t* ahead = nullptr);
void Bf16TileMatMulAmx(size_t rows, size_t n, size_t depth, const uint16_t* a, size_t lda,
                       const uint16_t* b, size_t b_rows, float* c, size_t ldc,
                       bool accumulate, size_t amx_depth, const uint16_t* after);

}  // namespace mha::internal

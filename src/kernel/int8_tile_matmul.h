// Int8 key products: the scores of an int8 cache's keys (src/kv/kinds/int8.cc)
// against a query quantised per row (src/simd/query_codes-inl.h), as exact integer
// dot products. Exact integers give the same bits whichever instructions sum them:
// the Highway tile product (tile_matmul-inl.h) sums the codes widened to float,
// exactly while every partial sum stays below 2^24 (which bounds the query's codes:
// QueryCodeLimit). Integer kernels sum two 16-bit products per 32-bit lane instead, in
// narrow x86 files with a target attribute: AVX512_VNNI's vpdpwssd
// (int8_tile_matmul_vnni.cc), run only where CPUID says so (src/base/cpu_features.h)
// and only from the attention kernel's AVX-512 target (so MHA_MAX_ISA caps it), and
// AVX2's vpmaddwd (int8_tile_matmul_avx2.cc) from its AVX2 target, or AVX-512 without
// VNNI. All give the same bits; the kernel takes the integer ones for speed.
// The same kernels sum int8 values against a key tile's probabilities quantised per
// row (P V), in int32: x86 only, no float path to match (serving.md, "int8 values
// meet integer probabilities"). Both products read 4-bit codes as well (q4_0).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "src/kv/tile_sizes.h"

namespace mha::internal {

// The largest query code for a head_dim: codes within [-limit, limit] against keys
// within [-127, 127] keep |sum| <= limit * 127 * head_dim < 2^24, exact in float. For
// head_dim 128, 1032: ten bits and a sign, a step 8x finer than int8's; at most 32767
// (16-bit codes).
constexpr int32_t QueryCodeLimit(size_t head_dim) {
  return static_cast<int32_t>(std::min<size_t>(
      32767, ((size_t{1} << 24) - 1) / (127 * std::max<size_t>(1, head_dim))));
}

// Whether int8 keys of a head_dim meet the query as integer codes: while those codes
// reach 512 (nine bits and a sign, head_dim <= 258, Gemma's 256 included). Wider
// heads would quantise the query ever more coarsely (MLA's 576: codes of 229, whose
// step is 2.2x the query's at 512; from head_dim 132105 no code at all): they meet
// it in float against the widened keys, so the keys' own rounding is the only error.
constexpr int32_t kMinQueryCodeLimit = 512;
constexpr bool QueryCodesFor(size_t head_dim) {
  return QueryCodeLimit(head_dim) >= kMinQueryCodeLimit;
}
constexpr size_t kMaxQueryCodesHeadDim = 258;
static_assert(QueryCodesFor(kMaxQueryCodesHeadDim) &&
              !QueryCodesFor(kMaxQueryCodesHeadDim + 1));

// The largest code of a key tile's weights (probability x value scale) in P V: each
// row's within [0, limit], a step of 1/32767 of the row's largest weight in the tile.
// Against values within [-127, 127], a sum over the largest key tile fits int32.
constexpr int32_t kProbabilityCodeLimit = 32767;
static_assert(int64_t{kProbabilityCodeLimit} * 127 * kMaxKeyStep < int64_t{1} << 31);

// Whether the int8 key products of a head_dim run on Int8TileMatMulVnni here: the
// CPU has AVX512_VNNI, and head_dim is a whole number of channel pairs. Callers ask only
// from an AVX-512 Highway target.
bool Int8DotProducts(size_t head_dim);

// B of an integer tile product: `panels` column panels of kPanelWidth int8 columns
// within [-127, 127] (src/kv/kv_pages.h), each held in chunks of chunk_depth rows
// (even), rows paired as int8 pages pair them (PairedOffset): panel p's chunk q at
// chunks[p * chunk_count + q]. A K^T panel is one chunk (or one per group of
// channels: q8_0); a V tile's panel, one chunk per page. As it reads a chunk, the
// product sends the same bytes from aheads[same index] (null: none) on to L2: what is
// read a key tile later in its place (a decode step's next tile), so that memory
// keeps streaming. chunk_scales (null: none) gives each chunk's column scales, fp16
// (a q8_0 group's scale per key), at the same index: the chunk's integer sums are
// then scaled apiece and summed in float. With `nibbles`, the chunks hold 4-bit codes
// as int4 pages do (Int4Offset: a byte holds a column's rows 2i, the low nibble, and
// 2i + 1; a panel row pair is 16 bytes, not 32), each standing for code - zero_code
// (q4_0's 8): the kernels spread them to the same 16-bit pairs int8 codes widen to.
struct Int8Panels {
  const int8_t* const* chunks;
  const int8_t* const* aheads;
  size_t chunk_depth, chunk_count;
  const uint16_t* const* chunk_scales = nullptr;
  bool nibbles = false;
  int16_t zero_code = 0;
};

// Bytes of a chunk's panel row pair (a column's two rows, kPanelWidth columns).
constexpr size_t PanelPairBytes(bool nibbles) {
  return nibbles ? kPanelWidth : 2 * kPanelWidth;
}

// C[rows, panels * kPanelWidth] (+)= row_scales[i] * float(A[rows, depth] B[depth, ...]),
// the integer sums converted, times the scale, then added (no fused multiply-add: the
// same bits on every path); with chunk scales, row_scales[i] * f, where f sums
// float(chunk q's integer sum) * its column scale in chunk order from 0: A 16-bit codes,
// rows lda apart, with sums that fit int32 (the query's within QueryCodeLimit(depth), the
// probabilities' within kProbabilityCodeLimit); depth even (P V: its keys rounded up to a
// pair, the padding key's code 0).
void Int8TileMatMulVnni(size_t rows, size_t panels, size_t depth, const int16_t* a,
                        size_t lda, const float* row_scales, const Int8Panels& b,
                        float* c, size_t ldc, bool accumulate);
// The same product on AVX2 (any x86 CPU the AVX2 target runs on).
void Int8TileMatMulAvx2(size_t rows, size_t panels, size_t depth, const int16_t* a,
                        size_t lda, const float* row_scales, const Int8Panels& b,
                        float* c, size_t ldc, bool accumulate);

}  // namespace mha::internal

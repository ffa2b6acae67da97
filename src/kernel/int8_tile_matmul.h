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
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

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

// Whether the int8 key products of a head_dim run on Int8TileMatMulVnni here: the
// CPU has AVX512_VNNI and AVX512_VBMI, and head_dim is a whole number of channel
// pairs. Callers ask only from an AVX-512 Highway target.
bool Int8DotProducts(size_t head_dim);

// C[rows, panels * kPanelWidth] = row_scales[i] * float(A[rows, depth] B[depth, ...]):
// A 16-bit query codes within QueryCodeLimit(depth), rows lda apart; B panels[p] the
// first depth rows of a K^T panel ([rows, kPanelWidth] int8 within [-127, 127],
// src/kv/kv_pages.h). depth even. As it reads panel p, the product sends the same
// bytes from ahead[p] on to L2: what is read later (a decode step's next key tile),
// so that memory keeps streaming.
void Int8TileMatMulVnni(size_t rows, size_t panels, size_t depth, const int16_t* a,
                        size_t lda, const float* row_scales,
                        const int8_t* const* b_panels, const int8_t* const* ahead,
                        float* c, size_t ldc);
// The same product on AVX2 (any x86 CPU the AVX2 target runs on). depth even.
void Int8TileMatMulAvx2(size_t rows, size_t panels, size_t depth, const int16_t* a,
                        size_t lda, const float* row_scales,
                        const int8_t* const* b_panels, const int8_t* const* ahead,
                        float* c, size_t ldc);

}  // namespace mha::internal

// Bf16TileMatMul: the tile product of tile_matmul-inl.h in bfloat16 dot products
// with fp32 accumulation (AVX512_BF16's vdpbf16ps: per 32-bit lane, c += a0 b0 +
// a1 b1), twice the multiply-adds of an fp32 FMA per instruction. Highway 1.0.3 has
// no such operation, so this is one narrow x86 kernel with a target attribute
// (bf16_tile_matmul_avx512.cc), run only where CPUID says so
// (src/platform/cpu_features.h). The attention kernel calls it only from its AVX-512
// target, so MHA_MAX_ISA caps it like every Highway kernel.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mha::internal {

// C[rows, n] = (accumulate ? C : 0) + A[rows, depth] B[depth, n]; n % kPanelWidth == 0.
// A: bfloat16 bits, rows lda apart (lda even); B: the first depth rows of a paired
// bfloat16 tile of b_rows rows (src/kernels/kv_pages.h). Rows go in pairs: for an
// odd depth, A's element depth must be 0 and B's row depth finite (a tile's zero
// row). `after`: the tile read next, whose start the last strip prefetches.
void Bf16TileMatMul(size_t rows, size_t n, size_t depth, const uint16_t* a, size_t lda,
                    const uint16_t* b, size_t b_rows, float* c, size_t ldc,
                    bool accumulate, const uint16_t* after);

}  // namespace mha::internal

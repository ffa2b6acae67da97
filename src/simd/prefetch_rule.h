// Where a tile product's micro-tile prefetches: the rule both tile products share
// (tile_matmul-inl.h and the AVX512_BF16 one, bf16_tile_matmul.h). A decode step
// streams KV pages from memory, a paged cache's in scattered pages of 1-8 KiB, too
// short for the hardware prefetchers to ramp up: the last strip of a page prefetches
// the start of the page read after it, and short bands (under 2 x kPrefetchRows rows)
// their next strip. Within a band, strips of several panels prefetch, and so does a
// single panel that another page follows (a paged cache's 16-token K^T page: the
// previous page fetched its first rows, and the hardware does not ramp up on the
// rest). A single panel without a next page (the AVX2 kernel's contiguous strips) is
// one sequential stream the hardware follows, and prefetching it slows decoding down
// (the figures: docs/fast_path.md).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace mha::internal {

// B rows prefetched ahead of the loads.
constexpr size_t kPrefetchRows = 32;
// What one prefetch fetches.
constexpr size_t kCacheLineBytes = 64;

// A strip of `panels` panels of `rows` stored rows each, `row_bytes` per panel row,
// starting at `strip`; `after`: what is read after the tile (on its last strip), or
// null. Returns the address panel `panel` prefetches when the micro-tile loads row
// `row`, or null for none. Addresses may lie past the tile: a prefetch never faults,
// and integer arithmetic keeps them defined. Asked only every `line_rows` rows (the
// panel rows a cache line holds: 4 of int8 and fp8), it fetches each line once.
inline uintptr_t PrefetchAddress(const void* strip, size_t panel, size_t panels,
                                 size_t rows, size_t row_bytes, size_t row,
                                 const void* after, size_t line_rows = 1) {
  const size_t ahead = row + kPrefetchRows;
  const uintptr_t start = reinterpret_cast<uintptr_t>(strip) + panel * rows * row_bytes;
  if (ahead < rows) return panels > 1 || after ? start + ahead * row_bytes : 0;
  if (after) {
    return reinterpret_cast<uintptr_t>(after) +
           ((ahead - rows) * panels + panel * line_rows) * row_bytes;
  }
  if (panels > 1 || rows < 2 * kPrefetchRows) {
    return start + (ahead - rows) * row_bytes + panels * rows * row_bytes;
  }
  return 0;
}

// The address in `ahead` (a strip laid out as the one being read, read a key tile
// later) of the row `row` of panel `panel` being read: the same offset.
inline uintptr_t AheadAddress(const void* ahead, size_t panel, size_t rows,
                              size_t row_bytes, size_t row) {
  return reinterpret_cast<uintptr_t>(ahead) + (panel * rows + row) * row_bytes;
}

// Every cache line of [p, p + bytes) on its way to L2 (a hint).
inline void PrefetchLines(const uint8_t* p, size_t bytes) {
  for (size_t line = 0; line < bytes; line += kCacheLineBytes) {
#if defined(__x86_64__) || defined(__i386__)
    _mm_prefetch(reinterpret_cast<const char*>(p + line), _MM_HINT_T1);
#else
    __builtin_prefetch(p + line, 0, 2);
#endif
  }
}

}  // namespace mha::internal

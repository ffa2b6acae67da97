// The attention kernel's tile sizes, stated once: the caches size their pages by
// them, the task planner cuts query tiles by them, and the kernels step their loops
// on them. Plain constants, so that any layer may include this header.
#pragma once

#include <cstddef>

namespace mha::internal {

// Columns per panel of a K^T or V tile (src/kv/kv_pages.h): one cache line of
// floats, a whole number of vectors on every target. Head dims and key tiles are
// padded to it.
constexpr size_t kPanelWidth = 16;
// Query rows of the tile product's micro-tile (tile_matmul-inl.h): the smallest
// query tile worth planning.
constexpr size_t kTileRows = 6;
// Query rows AttendHead takes per step (a step of queries meets key steps).
constexpr size_t kQueryStep = 8 * kTileRows;
// The most rows a step takes: a task of one query position (a decode step: its KV
// group's heads, MLA's 128) or on AMX tiles (four 32-row tile blocks), so that each
// K/V tile is read once for all of them, not once per kQueryStep rows.
constexpr size_t kMaxQueryStep = 128;
// Keys per page of the contiguous KvCache and of the pages a forward writes its K/V
// into: the kernel's key tile.
constexpr size_t kKeyStep = 128;
// A paged cache's largest block (page) size.
constexpr size_t kMaxPageSize = 256;
// A key tile's most keys: kKeyStep, or one larger page.
constexpr size_t kMaxKeyStep = kMaxPageSize > kKeyStep ? kMaxPageSize : kKeyStep;
// Keys rotated at a time as they are written into pages.
constexpr size_t kRotationRows = 128;

// n rounded up to a whole number of `multiple`s: panel and tile padding.
constexpr size_t RoundUp(size_t n, size_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

}  // namespace mha::internal

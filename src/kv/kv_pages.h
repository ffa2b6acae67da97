// KvPages: where the attention kernel finds one (sequence, KV head)'s cached keys and
// values. They are stored in pages of page_size tokens: K^T as a
// [head_dim, page_size] tile (scores = Q K^T streams it) and V as a
// [page_size, padded_head_dim] tile, zero-padded, in the codes of the cache's
// storage kind (src/kv/kinds/: float, bfloat16, int8, fp8 or int4 codes two to a
// byte, Int4Offset), each page's codes followed by whatever the kind keeps beside
// them (scales). A block holds one page of every KV head (BlockLayout). The
// contiguous KvCache and the pages a forward writes its own K/V into are runs of
// blocks, block p following block p - 1; the paged cache finds block p through its
// sequence's block table.
//
// Tiles are stored in column panels (PanelOffset): a tile product walks B one band
// of columns at a time, and a band of a row-major tile is one cache line per row, a
// stride apart, which the hardware prefetchers follow badly: decoding read K/V at
// about half the rate of a sequential read. In panels a band is one contiguous run.
//
// Multi-head latent attention (DeepSeek's MLA, absorbed) stores no V pages: a
// token's value is value_head_dim elements of its key (the latent), so
// the kernel makes each page's V tile from its K^T tile (values_in_keys), and the
// cache holds and decode streams the latent once.
//
// bfloat16 and int8 tiles pair their rows (PairedOffset): rows 2i and 2i + 1 of a
// column sit side by side, the layout the dot products read where one 32-bit lane
// holds a column's two rows: AVX512_BF16's vdpbf16ps, and for int8 codes widened to
// 16 bits, vpdpwssd and vpmaddwd (src/kernel/int8_tile_matmul.h), which then need
// no interleave. A tile of an odd number of rows ends with a padding row (zeroed in
// bfloat16, where stale bits could be a NaN). Widened to float, a pair is one load
// and two or three bit operations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "src/kv/kv_kind.h"
#include "src/kv/tile_sizes.h"

namespace mha::internal {

// Element (row, col) of a [rows, cols] tile stored as cols / kPanelWidth panels of
// [rows, kPanelWidth], one after another.
inline size_t PanelOffset(size_t row, size_t col, size_t rows) {
  return (col / kPanelWidth * rows + row) * kPanelWidth + col % kPanelWidth;
}

// The same for a tile of paired rows: [rows rounded up to even, kPanelWidth] panels
// whose rows 2i and 2i + 1 interleave, column by column.
inline size_t PairedOffset(size_t row, size_t col, size_t rows) {
  return (col / kPanelWidth * RoundUp(rows, 2) + row / 2 * 2) * kPanelWidth +
         col % kPanelWidth * 2 + row % 2;
}

// Channels per value scale group of int4 pages: a whole number of vectors on every
// target, so a vector's columns share their scale.
constexpr size_t kValueGroup = 32;

// Value scale groups of a V tile of padded_value_head_dim columns.
inline int64_t ValueGroups(int64_t padded_value_head_dim) {
  return (padded_value_head_dim + static_cast<int64_t>(kValueGroup) - 1) /
         static_cast<int64_t>(kValueGroup);
}

// Tiles of 2-byte elements (bfloat16) and of int8 codes pair their rows; the others
// (float, fp8, Int4Pair: its own pairs) do not.
template <typename T>
constexpr bool PairsRows() {
  return sizeof(T) == 2 || std::is_same_v<T, int8_t>;
}

// Rows a tile of T stores: paired tiles round up to even.
template <typename T>
constexpr size_t StoredRows(size_t rows) {
  return PairsRows<T>() ? RoundUp(rows, 2) : rows;
}

// Two int4 codes: rows 2i (the low nibble) and 2i + 1 of one column of a tile, one
// byte, a panel row of pairs 16 bytes: one load widens into two rows of a column
// strip, as a bfloat16 pair does.
struct Int4Pair {
  uint8_t bits;
};

// The byte of an int4 tile that holds element (row, col): the tile as
// [rows rounded up to even / 2, cols] pairs in column panels.
inline size_t Int4Offset(size_t row, size_t col, size_t rows) {
  return PanelOffset(row / 2, col, RoundUp(rows, 2) / 2);
}

// Element (row, col) of a tile of T, in the layout T's tiles use (Int4Pair: the
// pair holding it).
template <typename T>
size_t TileOffset(size_t row, size_t col, size_t rows) {
  if constexpr (std::is_same_v<T, Int4Pair>) return Int4Offset(row, col, rows);
  return PairsRows<T>() ? PairedOffset(row, col, rows) : PanelOffset(row, col, rows);
}

// Bytes of a [rows, cols] tile of T (cols a multiple of kPanelWidth).
template <typename T>
int64_t TileBytes(int64_t rows, int64_t cols) {
  const size_t stored = std::is_same_v<T, Int4Pair>
                            ? RoundUp(static_cast<size_t>(rows), 2) / 2
                            : StoredRows<T>(static_cast<size_t>(rows)) * sizeof(T);
  return static_cast<int64_t>(stored) * cols;
}

// Zeroes rows [first_row, end_row) of such a tile of T.
template <typename T>
void ZeroTileRows(uint8_t* tile, size_t rows, size_t cols, size_t first_row,
                  size_t end_row) {
  if (end_row <= first_row) return;
  if (!PairsRows<T>()) {
    const size_t run = (end_row - first_row) * kPanelWidth * sizeof(T);
    for (size_t col = 0; col < cols; col += kPanelWidth) {
      std::memset(tile + PanelOffset(first_row, col, rows) * sizeof(T), 0, run);
    }
    return;
  }
  for (size_t col = 0; col < cols; ++col) {
    for (size_t row = first_row; row < end_row; ++row) {
      std::memset(tile + PairedOffset(row, col, rows) * sizeof(T), 0, sizeof(T));
    }
  }
}

struct KvPages {
  // Page id 0 of this KV head; page id i is i strides further.
  uint8_t* keys = nullptr;
  uint8_t* values = nullptr;
  int64_t key_stride = 0, value_stride = 0;  // bytes
  // One page's bytes, and where its codes end: what the kind keeps beside them
  // (scales, minimums) follows, so that a page and its scales are one run of memory.
  int64_t key_page_bytes = 0, value_page_bytes = 0;
  int64_t key_codes_bytes = 0, value_codes_bytes = 0;
  // K^T rows and V columns (padded to whole panels).
  int64_t head_dim = 0, padded_value_head_dim = 0;
  // Keys per channel: the sequence's keys from its partial last page on,
  // [page_size, head_dim] fp32 rows (what each append requantises that page from).
  float* key_residual = nullptr;
  // Page p (p >= first_page) has id page_ids[p - first_page]; null: id p.
  const int32_t* page_ids = nullptr;
  int64_t first_page = 0;
  int64_t page_size = 0;
  KvStorage storage = KvStorage::kFloat32;
  // V is value_head_dim rows of each K^T tile (MLA's latent; where: the attention
  // params' value_offset); values and their scales are the keys'.
  bool values_in_keys = false;

  int64_t Id(int64_t page) const { return page_ids ? page_ids[page - first_page] : page; }
  uint8_t* KeyPage(int64_t page) const { return keys + Id(page) * key_stride; }
  uint8_t* ValuePage(int64_t page) const { return values + Id(page) * value_stride; }
};

// One block: page_size tokens of every KV head, their K^T pages side by side in one
// array, their V pages in another, each page as its kind lays it out. Values are
// value_head_dim wide (0: head_dim; PyTorch lets them differ from the keys); with
// values_in_keys there are no V pages (MLA: V is value_head_dim of the keys').
struct BlockLayout {
  BlockLayout() = default;
  BlockLayout(int64_t page_size, int64_t num_kv_heads, int64_t head_dim,
              KvStorage storage, int64_t value_head_dim = 0, bool values_in_keys = false);

  int64_t page_size = 0, num_kv_heads = 0, head_dim = 0, value_head_dim = 0,
          padded_value_head_dim = 0;
  KvStorage storage = KvStorage::kFloat32;
  bool values_in_keys = false;
  // One KV head's pages and their codes.
  int64_t key_page_bytes = 0, value_page_bytes = 0;
  int64_t key_codes_bytes = 0, value_codes_bytes = 0;

  int64_t block_key_bytes() const { return num_kv_heads * key_page_bytes; }
  int64_t block_value_bytes() const { return num_kv_heads * value_page_bytes; }
  // KV head kv_head's pages, block id i at i blocks from these bases.
  KvPages Pages(uint8_t* keys, uint8_t* values, int64_t kv_head) const {
    KvPages pages;
    pages.keys = keys + kv_head * key_page_bytes;
    pages.key_stride = block_key_bytes();
    pages.values = values_in_keys ? pages.keys : values + kv_head * value_page_bytes;
    pages.value_stride = values_in_keys ? pages.key_stride : block_value_bytes();
    pages.key_page_bytes = key_page_bytes;
    pages.key_codes_bytes = key_codes_bytes;
    pages.value_page_bytes = values_in_keys ? key_page_bytes : value_page_bytes;
    pages.value_codes_bytes = values_in_keys ? key_codes_bytes : value_codes_bytes;
    pages.head_dim = head_dim;
    pages.padded_value_head_dim = padded_value_head_dim;
    pages.page_size = page_size;
    pages.storage = storage;
    pages.values_in_keys = values_in_keys;
    return pages;
  }
};

inline BlockLayout::BlockLayout(int64_t page_size_, int64_t num_kv_heads_,
                                int64_t head_dim_, KvStorage storage_,
                                int64_t value_head_dim_, bool values_in_keys_)
    : page_size(page_size_),
      num_kv_heads(num_kv_heads_),
      head_dim(head_dim_),
      value_head_dim(value_head_dim_ > 0 ? value_head_dim_ : head_dim_),
      padded_value_head_dim(static_cast<int64_t>(
          RoundUp(static_cast<size_t>(value_head_dim), kPanelWidth))),
      storage(storage_),
      values_in_keys(values_in_keys_) {
  // page_size is a multiple of 16: what follows the codes starts 4-byte aligned.
  const KvKind& kind = KindOf(storage);
  const PageBytes keys = kind.key_page(page_size, head_dim);
  key_page_bytes = keys.total;
  key_codes_bytes = keys.codes;
  if (!values_in_keys) {
    const PageBytes values = kind.value_page(page_size, padded_value_head_dim);
    value_page_bytes = values.total;
    value_codes_bytes = values.codes;
  }
}

}  // namespace mha::internal

// KvPages: where the attention kernel finds one (sequence, KV head)'s cached keys and
// values. They are stored in pages of page_size tokens: K^T as a
// [head_dim, page_size] tile (scores = Q K^T streams it) and V as a
// [page_size, padded_head_dim] tile, zero-padded, as float, bfloat16, int8, fp8 or
// int4 (int8, int4 and the scaled fp8 kinds with one fp32 scale per token for K and
// for V; int4 codes two to a byte: Int4Offset). A block
// holds one page of every KV head (BlockLayout). The contiguous KvCache and the pages a
// forward writes its own K/V into are runs of blocks, block p following block p - 1; the
// paged cache finds block p through its sequence's block table.
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
// bfloat16 tiles pair their rows (PairedOffset): rows 2i and 2i + 1 of a column sit
// side by side, the layout AVX512_BF16's dot product (vdpbf16ps) reads, where one
// 32-bit lane holds a column's two rows; a tile of an odd number of rows ends with
// a zero row. Widened to float, a pair is one load and two bit operations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "src/kernels/tile_sizes.h"

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

// fp8 (src/kernels/fp8.h) with one scale per (token, KV head), as int8 is, or scale
// free: values cast as they are, for a model calibrated for fp8 KV. kInt8ChannelKeys:
// int8 values per token, int8 keys per channel (KIVI: keys have outlier channels, which
// a per-token scale lets flatten every other channel): one scale per (page, KV head,
// channel) over the page's tokens; each token's key scale is 1, or NaN for a key
// with a non-finite element (channel_keys.h). kInt4 (KIVI's 2-bit scheme at 4 bits):
// unsigned codes with zero points, keys per channel as kInt8ChannelKeys (a scale and
// a minimum per channel), values per token in groups of kValueGroup channels (a scale
// and a minimum per token and group; the token scale is 1, or NaN for a value with a
// non-finite element); the tile product widens the codes as it loads them.
enum class KvStorage {
  kFloat32,
  kBFloat16,
  kInt8,
  kInt8ChannelKeys,
  kInt4,
  kFp8E4M3,
  kFp8E5M2,
  kFp8E4M3ScaleFree,
  kFp8E5M2ScaleFree
};

// Channels per value scale group of kInt4 pages: a whole number of vectors on every
// target, so a vector's columns share their scale.
constexpr size_t kValueGroup = 32;

// Bytes of a tile's element (int4: of a pair of codes, Int4Pair).
inline size_t KvElementBytes(KvStorage storage) {
  return storage == KvStorage::kFloat32 ? 4 : storage == KvStorage::kBFloat16 ? 2 : 1;
}

// Whether pages of `storage` carry one fp32 scale per token for K and for V.
inline bool HasTokenScales(KvStorage storage) {
  return storage == KvStorage::kInt8 || storage == KvStorage::kInt8ChannelKeys ||
         storage == KvStorage::kInt4 || storage == KvStorage::kFp8E4M3 ||
         storage == KvStorage::kFp8E5M2;
}

// Whether K pages of `storage` also carry one fp32 scale per channel (after the
// token scales), and the cache keeps the partial last page's keys in fp32.
inline bool HasChannelKeyScales(KvStorage storage) {
  return storage == KvStorage::kInt8ChannelKeys || storage == KvStorage::kInt4;
}

// Whether codes are unsigned with zero points (int4): K pages end with a minimum per
// channel, V pages with a scale and a minimum per (value group, token).
inline bool HasZeroPoints(KvStorage storage) { return storage == KvStorage::kInt4; }

// Value scale groups of a V tile of padded_value_dim columns.
inline int64_t ValueGroups(int64_t padded_value_dim) {
  return (padded_value_dim + static_cast<int64_t>(kValueGroup) - 1) /
         static_cast<int64_t>(kValueGroup);
}

// Tiles of 2-byte elements (bfloat16) pair their rows; the others do not.
constexpr bool PairsRows(size_t element_bytes) { return element_bytes == 2; }

// Rows a tile stores: paired tiles round up to even.
constexpr size_t StoredRows(size_t rows, size_t element_bytes) {
  return PairsRows(element_bytes) ? RoundUp(rows, 2) : rows;
}

// Bytes of a [rows, cols] tile of `storage` (cols a multiple of kPanelWidth).
inline int64_t KvTileBytes(int64_t rows, int64_t cols, KvStorage storage) {
  const size_t element = KvElementBytes(storage);
  const size_t stored = storage == KvStorage::kInt4
                            ? RoundUp(static_cast<size_t>(rows), 2) / 2
                            : StoredRows(static_cast<size_t>(rows), element) * element;
  return static_cast<int64_t>(stored) * cols;
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
  return PairsRows(sizeof(T)) ? PairedOffset(row, col, rows)
                              : PanelOffset(row, col, rows);
}

// Zeroes rows [first_row, end_row) of such a tile of `element_bytes` elements.
inline void ZeroTileRows(uint8_t* tile, size_t rows, size_t cols, size_t first_row,
                         size_t end_row, size_t element_bytes) {
  if (end_row <= first_row) return;
  if (!PairsRows(element_bytes)) {
    const size_t run = (end_row - first_row) * kPanelWidth * element_bytes;
    for (size_t col = 0; col < cols; col += kPanelWidth) {
      std::memset(tile + PanelOffset(first_row, col, rows) * element_bytes, 0, run);
    }
    return;
  }
  for (size_t col = 0; col < cols; ++col) {
    for (size_t row = first_row; row < end_row; ++row) {
      std::memset(tile + PairedOffset(row, col, rows) * element_bytes, 0, element_bytes);
    }
  }
}

struct KvPages {
  // Page id 0 of this KV head; page id i is i strides further.
  uint8_t* keys = nullptr;
  uint8_t* values = nullptr;
  int64_t key_stride = 0, value_stride = 0;  // bytes
  // int8, scaled fp8: one float per token after each page's data, `*_scales_at`
  // bytes from the page's start, so that a page and its scales are one run of memory.
  bool token_scales = false;
  int64_t key_scales_at = 0, value_scales_at = 0;
  // Channel key scales: head_dim floats (zero-padded to whole panels),
  // key_channel_scales_at bytes from each K
  // page's start; key_residual: the sequence's keys from its partial last page on,
  // [page_size, head_dim] fp32 rows (what each append requantises that page from).
  bool channel_key_scales = false;
  int64_t key_channel_scales_at = 0;
  float* key_residual = nullptr;
  // Zero points (int4): channel minimums after the channel scales; each V page's
  // value_groups x page_size scales, then as many minimums, value_groups_at bytes
  // from its start (group g's at g x page_size floats).
  bool zero_points = false;
  int64_t key_channel_mins_at = 0, value_groups_at = 0, value_groups = 0;
  // One page's bytes, scales included.
  int64_t key_page_bytes = 0, value_page_bytes = 0;
  // Page p (p >= first_page) has id page_ids[p - first_page]; null: id p.
  const int32_t* page_ids = nullptr;
  int64_t first_page = 0;
  int64_t page_size = 0;
  KvStorage storage = KvStorage::kFloat32;
  // V is value_head_dim rows of each K^T tile (MLA's latent; where: the attention
  // params' value_offset); values and its scales are the keys'.
  bool values_in_keys = false;

  int64_t Id(int64_t page) const { return page_ids ? page_ids[page - first_page] : page; }
  uint8_t* KeyPage(int64_t page) const { return keys + Id(page) * key_stride; }
  uint8_t* ValuePage(int64_t page) const { return values + Id(page) * value_stride; }
  float* KeyScales(int64_t page) const {
    return reinterpret_cast<float*>(KeyPage(page) + key_scales_at);
  }
  float* ValueScales(int64_t page) const {
    return reinterpret_cast<float*>(ValuePage(page) + value_scales_at);
  }
  float* KeyChannelScales(int64_t page) const {
    return reinterpret_cast<float*>(KeyPage(page) + key_channel_scales_at);
  }
  float* KeyChannelMins(int64_t page) const {
    return reinterpret_cast<float*>(KeyPage(page) + key_channel_mins_at);
  }
  float* ValueGroupScales(int64_t page) const {
    return reinterpret_cast<float*>(ValuePage(page) + value_groups_at);
  }
  float* ValueGroupMins(int64_t page) const {
    return ValueGroupScales(page) + value_groups * page_size;
  }
};

// One block: page_size tokens of every KV head, their K^T pages side by side in one
// array, their V pages in another; with HasTokenScales each page ends with its
// tokens' scales (K pages with channel scales then their channels'). Values
// are value_head_dim wide (0: head_dim; PyTorch lets them differ from the keys); with
// values_in_keys there are no V pages (MLA: V is value_head_dim of the keys').
struct BlockLayout {
  BlockLayout() = default;
  BlockLayout(int64_t page_size, int64_t num_kv_heads, int64_t head_dim,
              KvStorage storage, int64_t value_head_dim = 0, bool values_in_keys = false);

  int64_t page_size = 0, num_kv_heads = 0, head_dim = 0, value_head_dim = 0,
          padded_value_dim = 0;
  KvStorage storage = KvStorage::kFloat32;
  bool values_in_keys = false;
  // One KV head's pages, scales included, and where their scales start.
  int64_t key_page_bytes = 0, value_page_bytes = 0;
  int64_t key_scales_at = 0, value_scales_at = 0, key_channel_scales_at = 0;
  int64_t key_channel_mins_at = 0, value_groups_at = 0;

  int64_t block_key_bytes() const { return num_kv_heads * key_page_bytes; }
  int64_t block_value_bytes() const { return num_kv_heads * value_page_bytes; }
  // KV head kv_head's pages, block id i at i blocks from these bases.
  KvPages Pages(uint8_t* keys, uint8_t* values, int64_t kv_head) const {
    KvPages pages;
    pages.keys = keys + kv_head * key_page_bytes;
    pages.key_stride = block_key_bytes();
    pages.values = values_in_keys ? pages.keys : values + kv_head * value_page_bytes;
    pages.value_stride = values_in_keys ? pages.key_stride : block_value_bytes();
    pages.token_scales = HasTokenScales(storage);
    pages.key_scales_at = key_scales_at;
    pages.channel_key_scales = HasChannelKeyScales(storage);
    pages.key_channel_scales_at = key_channel_scales_at;
    pages.zero_points = HasZeroPoints(storage);
    pages.key_channel_mins_at = key_channel_mins_at;
    pages.value_groups_at = value_groups_at;
    pages.value_groups = ValueGroups(padded_value_dim);
    pages.key_page_bytes = key_page_bytes;
    pages.value_page_bytes = values_in_keys ? key_page_bytes : value_page_bytes;
    pages.value_scales_at = values_in_keys ? key_scales_at : value_scales_at;
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
      padded_value_dim(static_cast<int64_t>(
          RoundUp(static_cast<size_t>(value_head_dim), kPanelWidth))),
      storage(storage_),
      values_in_keys(values_in_keys_) {
  constexpr int64_t kFloat = sizeof(float);
  const int64_t scale_bytes = HasTokenScales(storage) ? page_size * kFloat : 0;
  // page_size is a multiple of 16: the scales start 4-byte aligned (int4 too).
  key_scales_at = KvTileBytes(head_dim, page_size, storage);
  key_channel_scales_at = key_scales_at + scale_bytes;
  // Channel scales (and minimums) padded to whole panels (zeros).
  const int64_t channel_scales =
      HasChannelKeyScales(storage)
          ? static_cast<int64_t>(RoundUp(static_cast<size_t>(head_dim), kPanelWidth))
          : 0;
  key_channel_mins_at = key_channel_scales_at + channel_scales * kFloat;
  key_page_bytes =
      key_channel_mins_at + (HasZeroPoints(storage) ? channel_scales : 0) * kFloat;
  value_scales_at =
      values_in_keys ? 0 : KvTileBytes(page_size, padded_value_dim, storage);
  value_groups_at = value_scales_at + scale_bytes;
  const int64_t group_bytes =
      HasZeroPoints(storage) ? 2 * ValueGroups(padded_value_dim) * page_size * kFloat : 0;
  value_page_bytes = values_in_keys ? 0 : value_groups_at + group_bytes;
}

}  // namespace mha::internal

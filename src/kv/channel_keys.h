// Keys quantised per channel (the int8_channel_keys and int4 kinds, KIVI's scheme): a
// page's K^T tile holds int8 codes with one scale per channel over the page's tokens
// (int4: a scale and a minimum, int4_codes.h), so an outlier channel sets its own
// scale only. Its scale changes as tokens arrive, so a
// cache keeps its sequences' partial last page in fp32 (the residual, KvPages::
// key_residual) and each write requantises that page from it whole: the kernel reads
// one layout for every page. (KIVI attends the residual in full precision instead.)
// A key with a non-finite element codes as zeros with token scale NaN: every score
// it enters is NaN, as with float pages.
#pragma once

#include <cstdint>

#include "src/kv/kv_pages.h"
#include "src/kv/token_scales.h"

namespace mha::internal {

// A K page of keys per channel: its codes, a scale per token (1, or NaN for a key
// with a non-finite element), a scale per channel (head_dim padded to whole panels),
// and (int4) a minimum per channel.
template <typename T>
PageBytes ChannelKeyPage(int64_t page_size, int64_t head_dim, bool minimums) {
  const int64_t codes = TileBytes<T>(head_dim, page_size);
  const int64_t channels =
      static_cast<int64_t>(RoundUp(static_cast<size_t>(head_dim), kPanelWidth));
  const int64_t floats = page_size + channels * (minimums ? 2 : 1);
  return {codes, codes + floats * static_cast<int64_t>(sizeof(float))};
}
inline int64_t KeyChannelScalesAt(const KvPages& pages) {  // bytes from a K page's start
  return pages.key_codes_bytes + pages.page_size * static_cast<int64_t>(sizeof(float));
}
inline float* KeyChannelScales(const KvPages& pages, int64_t page) {
  return reinterpret_cast<float*>(pages.KeyPage(page) + KeyChannelScalesAt(pages));
}
inline float* KeyChannelMins(const KvPages& pages, int64_t page) {
  return KeyChannelScales(pages, page) +
         RoundUp(static_cast<size_t>(pages.head_dim), kPanelWidth);
}

// What a cache does with keys per channel (int8 or int4 codes), each on one KV
// head's pages with their residual:
struct ResidualKeys {
  // Page `page` from the `count` fp32 key rows `rows` (row t: token t of the page,
  // head_dim floats): codes, token scales and channel scales; columns from count on
  // zeroed.
  void (*quantize_page)(const KvPages& pages, int64_t page, const float* rows,
                        int64_t count, int64_t head_dim);
  // The key of token `position` as the kernel sees it (code x channel scale x token
  // scale), into `row`; exact for tokens of the residual's page below `length`.
  void (*read_key)(const KvPages& pages, int64_t position, int64_t length,
                   int64_t head_dim, float* row);
  // Tokens [first, first + count) (first a page boundary) from fp32 rows: whole
  // pages quantised, a partial last one through the residual.
  void (*write_keys)(const KvPages& pages, int64_t first, const float* rows,
                     int64_t count, int64_t head_dim);
  // After a sequence went from `old_length` tokens down to `length`: the residual
  // made to hold the new partial last page (dequantised when that page was full
  // before: its fp32 keys are gone), and the page requantised from it, as if
  // `length` tokens had been appended.
  void (*restore)(const KvPages& pages, int64_t old_length, int64_t length,
                  int64_t head_dim);
};

extern const ResidualKeys kInt8ChannelKeys, kInt4ChannelKeys;

}  // namespace mha::internal

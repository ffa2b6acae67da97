// Per-channel key pages: scalar code, run per write of a partial page (a decode step
// requantises page_size x head_dim codes per KV head), far from the kernel's loop.
#include "src/kv/channel_keys.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "src/kv/int4_codes.h"

namespace mha::internal {
namespace {

constexpr float kInt8Max = 127.0f;

bool Finite(const float* row, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    if (!std::isfinite(row[k])) return false;
  }
  return true;
}

int8_t Code(float x) {
  return static_cast<int8_t>(std::clamp(std::nearbyint(x), -kInt8Max, kInt8Max));
}

// Channel c of an int8 page: symmetric codes, scale max|x| / 127 over its coded
// tokens (`coded`: those below the count with a finite key).
void QuantizeInt8Channel(const KvPages& pages, int64_t page, const float* rows,
                         const bool* coded, int64_t head_dim, int64_t c) {
  int8_t* codes = reinterpret_cast<int8_t*>(pages.KeyPage(page));
  float max_abs = 0.0f;
  for (int64_t t = 0; t < pages.page_size; ++t) {
    if (coded[t]) max_abs = std::max(max_abs, std::fabs(rows[t * head_dim + c]));
  }
  KeyChannelScales(pages, page)[c] = max_abs / kInt8Max;
  // In double: a float kInt8Max / max_abs is infinite for channels below 3.7e-37.
  const double inverse = max_abs > 0.0f ? kInt8Max / double{max_abs} : 0.0;
  for (int64_t t = 0; t < pages.page_size; ++t) {
    codes[TileOffset<int8_t>(static_cast<size_t>(c), static_cast<size_t>(t),
                             static_cast<size_t>(head_dim))] =
        coded[t] ? Code(static_cast<float>(rows[t * head_dim + c] * inverse)) : int8_t{0};
  }
}

// The same for int4: codes 0..15 from the channel's minimum up to its maximum.
void QuantizeInt4Channel(const KvPages& pages, int64_t page, const float* rows,
                         const bool* coded, int64_t head_dim, int64_t c) {
  uint8_t* codes = pages.KeyPage(page);
  float low = std::numeric_limits<float>::infinity(), high = -low;
  for (int64_t t = 0; t < pages.page_size; ++t) {
    if (!coded[t]) continue;
    low = std::min(low, rows[t * head_dim + c]);
    high = std::max(high, rows[t * head_dim + c]);
  }
  const ZeroPointRange range = low <= high ? ZeroPointRange(low, high) : ZeroPointRange();
  KeyChannelScales(pages, page)[c] = range.scale;
  KeyChannelMins(pages, page)[c] = range.min;
  for (int64_t t = 0; t < pages.page_size; ++t) {
    SetInt4(codes, static_cast<size_t>(c), static_cast<size_t>(t),
            static_cast<size_t>(head_dim),
            coded[t] ? range.Code(rows[t * head_dim + c]) : uint8_t{0});
  }
}

template <bool kInt4>
void QuantizeKeyPage(const KvPages& pages, int64_t page, const float* rows, int64_t count,
                     int64_t head_dim) {
  float* token_scales = KeyTokenScales(pages, page);
  bool coded[kMaxPageSize];
  for (int64_t t = 0; t < pages.page_size; ++t) {
    const bool finite = t < count && Finite(rows + t * head_dim, head_dim);
    coded[t] = finite;
    token_scales[t] = t >= count ? 0.0f
                      : finite   ? 1.0f
                                 : std::numeric_limits<float>::quiet_NaN();
  }
  for (int64_t c = 0; c < head_dim; ++c) {
    if constexpr (kInt4) {
      QuantizeInt4Channel(pages, page, rows, coded, head_dim, c);
    } else {
      QuantizeInt8Channel(pages, page, rows, coded, head_dim, c);
    }
  }
}

template <bool kInt4>
void ReadKey(const KvPages& pages, int64_t position, int64_t length, int64_t head_dim,
             float* row) {
  const int64_t page = position / pages.page_size, slot = position % pages.page_size;
  if (length % pages.page_size != 0 && page == length / pages.page_size) {
    std::copy_n(pages.key_residual + slot * head_dim, head_dim, row);
    return;
  }
  const uint8_t* codes = pages.KeyPage(page);
  const float token_scale = KeyTokenScales(pages, page)[slot];
  const float* channel_scales = KeyChannelScales(pages, page);
  const size_t dims = static_cast<size_t>(head_dim), at = static_cast<size_t>(slot);
  for (int64_t c = 0; c < head_dim; ++c) {
    const size_t channel = static_cast<size_t>(c);
    row[c] = kInt4 ? (GetInt4(codes, channel, at, dims) * channel_scales[c] +
                      KeyChannelMins(pages, page)[c]) *
                         token_scale
                   : static_cast<int8_t>(codes[TileOffset<int8_t>(channel, at, dims)]) *
                         channel_scales[c] * token_scale;
  }
}

template <bool kInt4>
void WriteKeys(const KvPages& pages, int64_t first, const float* rows, int64_t count,
               int64_t head_dim) {
  for (int64_t done = 0; done < count; done += pages.page_size) {
    const int64_t page = (first + done) / pages.page_size;
    const int64_t n = std::min(pages.page_size, count - done);
    const float* page_rows = rows + done * head_dim;
    if (n < pages.page_size) {
      std::copy_n(page_rows, n * head_dim, pages.key_residual);
      page_rows = pages.key_residual;
    }
    QuantizeKeyPage<kInt4>(pages, page, page_rows, n, head_dim);
  }
}

template <bool kInt4>
void RestoreKeyResidual(const KvPages& pages, int64_t old_length, int64_t length,
                        int64_t head_dim) {
  const int64_t count = length % pages.page_size, page = length / pages.page_size;
  if (count == 0) return;
  // ReadKey of a row below `length` in the old residual's page is that row: in place.
  for (int64_t t = 0; t < count; ++t) {
    ReadKey<kInt4>(pages, page * pages.page_size + t, old_length, head_dim,
                   pages.key_residual + t * head_dim);
  }
  QuantizeKeyPage<kInt4>(pages, page, pages.key_residual, count, head_dim);
}

}  // namespace

const ResidualKeys kInt8ChannelKeys = {QuantizeKeyPage<false>, ReadKey<false>,
                                       WriteKeys<false>, RestoreKeyResidual<false>};
const ResidualKeys kInt4ChannelKeys = {QuantizeKeyPage<true>, ReadKey<true>,
                                       WriteKeys<true>, RestoreKeyResidual<true>};

}  // namespace mha::internal

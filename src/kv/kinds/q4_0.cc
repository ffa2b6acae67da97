// The q4_0 KV kind, ggml's block_q4_0: each token's key and value in groups of 32
// channels, one fp16 scale d per group, 4-bit codes q standing for q - 8:
// x ~ d (q - 8). As ggml's reference quantiser: m = the group's element of largest
// magnitude (the first, if several), d = m / -8, q = min(15, trunc(x / d + 8.5))
// (through 1 / d in fp32), d stored rounded to fp16. The codes and scales are ggml's
// bit for bit; they sit in mha's int4 tiles (two rows of a column to a byte,
// Int4Offset; ggml pairs channels j and j + 16 of a group instead), the scales per
// group after them (group_scales.h). A group with a non-finite element: codes 8,
// scale NaN; a scale past fp16's 65504 saturates (ggml's would be infinite). 4.5 bits
// per value.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/kinds/q4_0.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>

#include "hwy/highway.h"
#include "src/kernel/attention_head-inl.h"
#include "src/kv/group_scaled_kind-inl.h"
#include "src/kv/int4_codes.h"
#include "src/kv/kinds/kind_entry_points.h"
#include "src/kv/kv_append-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha::internal::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// int4 codes as the numbers q - 8 they stand for.
struct Q4Codes {
  using Codes = mha::HWY_NAMESPACE::CodesLoader<Int4Pair>;
  using Code = Int4Pair;
  static constexpr size_t kRowsPerLoad = Codes::kRowsPerLoad;
  static constexpr size_t kPanelRowBytes = Codes::kPanelRowBytes;

  struct Column : Codes::Column {
    template <class D>
    HWY_INLINE void Load(D d, size_t k, hn::Vec<D>& even, hn::Vec<D>& odd) const {
      Codes::Column::Load(d, k, even, odd);
      even = hn::Sub(even, hn::Set(d, 8.0f));
      odd = hn::Sub(odd, hn::Set(d, 8.0f));
    }
  };
  template <class D>
  HWY_INLINE Column At(D d, const Int4Pair* tile, size_t column, size_t rows) const {
    return {Codes().At(d, tile, column, rows)};
  }
};

// The integer kernels read the codes as nibbles less 8 (int8_tile_matmul.h).
using Q4_0Traits = GroupScaledKind<Q4Codes, 8>;

MHA_KV_KIND_ATTEND(Q4_0, Q4_0Traits)

// A row of n values (`count` of them given, zeros after) as groups: code c of the
// row through set(c, code), group b's scale to scales[b * page_size].
template <class Set>
void QuantizeGroups(const float* row, size_t count, size_t n, const Set& set,
                    uint16_t* scales, size_t page_size) {
  constexpr size_t kGroup = static_cast<size_t>(kScaleGroup);
  for (size_t first = 0, b = 0; first < n; first += kGroup, ++b) {
    const size_t end = std::min(n, first + kGroup), given = std::min(end, count);
    float amax = 0.0f, max = 0.0f;
    bool finite = true;
    for (size_t c = first; c < given; ++c) {
      finite = finite && std::isfinite(row[c]);
      if (amax < std::fabs(row[c])) amax = std::fabs(row[c]), max = row[c];
    }
    // ggml's x * (1 / d) + 8.5 in float; where 1 / d overflows a float (|m| below
    // about 3e-37, where ggml casts infinities), x / d in double.
    const float d = SaturatedScale(max / -8.0f), inverse = d != 0.0f ? 1.0f / d : 0.0f;
    const bool finite_inverse = std::isfinite(inverse);
    scales[b * page_size] = finite ? Fp16FromFloat(d) : Fp16FromFloat(NAN);
    for (size_t c = first; c < end; ++c) {
      const bool coded = c < given && finite;
      const double x = !coded           ? 8.5
                       : finite_inverse ? double{row[c] * inverse + 8.5f}
                                        : row[c] / double{d} + 8.5;
      set(c, static_cast<uint8_t>(std::clamp(x, 0.0, 15.0)));
    }
  }
}

struct Q4_0Writer {
  void Key(const KvPages& pages, const float* key, int64_t page, size_t offset,
           bool) const {
    const size_t head_dim = static_cast<size_t>(pages.head_dim);
    uint8_t* tile = pages.KeyPage(page);
    QuantizeGroups(
        key, head_dim, head_dim,
        [&](size_t c, uint8_t code) { SetInt4(tile, c, offset, head_dim, code); },
        KeyGroupScales(pages, page) + offset, static_cast<size_t>(pages.page_size));
  }
  void Value(const KvPages& pages, const float* value, size_t value_head_dim,
             int64_t page, size_t offset) const {
    const size_t page_size = static_cast<size_t>(pages.page_size);
    uint8_t* tile = pages.ValuePage(page);
    QuantizeGroups(
        value, value_head_dim, static_cast<size_t>(pages.padded_value_head_dim),
        [&](size_t c, uint8_t code) { SetInt4(tile, offset, c, page_size, code); },
        ValueGroupScales(pages, page) + offset, page_size);
  }
};

void AppendQ4_0(const PanelAppend& append) {
  CheckAppend(append);
  AppendRows(append, Q4_0Writer{});
}

}  // namespace mha::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mha::internal {
namespace {

// Code by code (a byte holds two tokens' codes of a V column), then the scales.
void CopyToken(const KvPages& pages, int64_t from, int64_t to) {
  if (from == to) return;
  const int64_t size = pages.page_size;
  const size_t from_at = static_cast<size_t>(from % size),
               to_at = static_cast<size_t>(to % size);
  const size_t head_dim = static_cast<size_t>(pages.head_dim),
               rows = static_cast<size_t>(size);
  uint8_t* key_from = pages.KeyPage(from / size);
  uint8_t* key_to = pages.KeyPage(to / size);
  for (size_t c = 0; c < head_dim; ++c) {
    SetInt4(key_to, c, to_at, head_dim, GetInt4(key_from, c, from_at, head_dim));
  }
  uint8_t* value_from = pages.ValuePage(from / size);
  uint8_t* value_to = pages.ValuePage(to / size);
  for (size_t c = 0; c < static_cast<size_t>(pages.padded_value_head_dim); ++c) {
    SetInt4(value_to, to_at, c, rows, GetInt4(value_from, from_at, c, rows));
  }
  CopyGroupScales(pages, from, to);
}

}  // namespace

MHA_KV_KIND_ENTRY_POINTS(Q4_0)

extern const KvKind kKvKindQ4_0 = {GroupScaledKeyPage<Int4Pair>,
                                   GroupScaledValuePage<Int4Pair>,
                                   nullptr,
                                   /*latent=*/false,
                                   AttendQ4_0Run,
                                   AppendQ4_0Run,
                                   CopyToken,
                                   ClearValueGroupScales};

}  // namespace mha::internal
#endif  // HWY_ONCE

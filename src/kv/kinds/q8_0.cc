// The q8_0 KV kind, ggml's block_q8_0: each token's key and value in groups of 32
// channels, one fp16 scale d per group, symmetric int8 codes: x ~ d q. As ggml's
// reference quantiser: d = max|x| / 127, q = round(x / d) (halves away from zero,
// through 1 / d in fp32), d stored rounded to fp16. The codes and scales are ggml's
// bit for bit; they sit in mha's tiles (codes in column panels, scales per group
// after them: group_scales.h), not in ggml's 34-byte structs. A group with a
// non-finite element: zero codes, scale NaN; a scale past fp16's 65504 saturates
// (group_scales.h). 8.5 bits per value.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/kinds/q8_0.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>

#include "hwy/highway.h"
#include "src/kernel/attention_head-inl.h"
#include "src/kv/group_scaled_kind-inl.h"
#include "src/kv/kinds/kind_entry_points.h"
#include "src/kv/kv_append-inl.h"
#include "src/kv/kv_token_copy.h"

HWY_BEFORE_NAMESPACE();
namespace mha::internal::HWY_NAMESPACE {

// Codes as they are, meeting the integer kernels as int8's do.
using Q8_0Traits = GroupScaledKind<mha::HWY_NAMESPACE::CodesLoader<int8_t>, 0>;

MHA_KV_KIND_ATTEND(Q8_0, Q8_0Traits)

// A row of n values (`count` of them given, zeros after) as groups: group b's codes
// to codes[index(c)] for its channels c, its scale to scales[b * page_size].
template <class Index>
void QuantizeGroups(const float* row, size_t count, size_t n, int8_t* codes,
                    const Index& index, uint16_t* scales, size_t page_size) {
  constexpr size_t kGroup = static_cast<size_t>(kScaleGroup);
  for (size_t first = 0, b = 0; first < n; first += kGroup, ++b) {
    const size_t end = std::min(n, first + kGroup), given = std::min(end, count);
    float amax = 0.0f;
    bool finite = true;
    for (size_t c = first; c < given; ++c) {
      finite = finite && std::isfinite(row[c]);
      amax = std::max(amax, std::fabs(row[c]));
    }
    // ggml's x * (1 / d) in float; where 1 / d overflows a float (max|x| below about
    // 4e-37, where ggml's codes are infinities cast to int8), x / d in double.
    const float d = SaturatedScale(amax / 127.0f), inverse = d != 0.0f ? 1.0f / d : 0.0f;
    const bool finite_inverse = std::isfinite(inverse);
    scales[b * page_size] = finite ? Fp16FromFloat(d) : Fp16FromFloat(NAN);
    for (size_t c = first; c < end; ++c) {
      const bool coded = c < given && finite;  // else zero (padding, non-finite)
      const double x = !coded           ? 0.0
                       : finite_inverse ? double{row[c] * inverse}
                                        : row[c] / double{d};
      codes[index(c)] = static_cast<int8_t>(std::clamp(std::round(x), -127.0, 127.0));
    }
  }
}

struct Q8_0Writer {
  void Key(const KvPages& pages, const float* key, int64_t page, size_t offset,
           bool) const {
    const size_t head_dim = static_cast<size_t>(pages.head_dim);
    QuantizeGroups(
        key, head_dim, head_dim, reinterpret_cast<int8_t*>(pages.KeyPage(page)),
        [&](size_t c) { return TileOffset<int8_t>(c, offset, head_dim); },
        KeyGroupScales(pages, page) + offset, static_cast<size_t>(pages.page_size));
  }
  void Value(const KvPages& pages, const float* value, size_t value_head_dim,
             int64_t page, size_t offset) const {
    const size_t page_size = static_cast<size_t>(pages.page_size);
    QuantizeGroups(
        value, value_head_dim, static_cast<size_t>(pages.padded_value_head_dim),
        reinterpret_cast<int8_t*>(pages.ValuePage(page)),
        [&](size_t c) { return TileOffset<int8_t>(offset, c, page_size); },
        ValueGroupScales(pages, page) + offset, page_size);
  }
};

void AppendQ8_0(const PanelAppend& append) {
  CheckAppend(append);
  AppendRows(append, Q8_0Writer{});
}

}  // namespace mha::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mha::internal {
namespace {

void CopyToken(const KvPages& pages, int64_t from, int64_t to) {
  if (from == to) return;
  CopyCodes<int8_t>(pages, from, to);
  CopyGroupScales(pages, from, to);
}

}  // namespace

MHA_KV_KIND_ENTRY_POINTS(Q8_0)

extern const KvKind kKvKindQ8_0 = {GroupScaledKeyPage<int8_t>,
                                   GroupScaledValuePage<int8_t>,
                                   nullptr,
                                   /*latent=*/false,
                                   AttendQ8_0Run,
                                   AppendQ8_0Run,
                                   CopyToken,
                                   ClearValueGroupScales};

}  // namespace mha::internal
#endif  // HWY_ONCE

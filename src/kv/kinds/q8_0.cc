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
#include "src/kv/group_scales-inl.h"
#include "src/kv/kind_traits-inl.h"
#include "src/kv/kinds/kind_entry_points.h"
#include "src/kv/kv_append-inl.h"
#include "src/kv/kv_token_copy.h"

HWY_BEFORE_NAMESPACE();
namespace mha::internal::HWY_NAMESPACE {

using Q8Codes = mha::HWY_NAMESPACE::CodesLoader<int8_t>;

// Keys meet the query quantised to integers and values the weights quantised to
// integers, as int8's do, each group's integer sums times its scales; the fp32 path
// (no integer kernel here) reads both through the group loaders.
struct Q8_0Traits : CodesKind<int8_t> {
  static constexpr bool kInt8KeyProducts = true, kInt8ValueProducts = true;
  static constexpr size_t kKeyScaleGroup = kScaleGroup, kValueScaleGroup = kScaleGroup;
  static const uint16_t* KeyGroupScales(const KvPages& pages, int64_t page) {
    return internal::KeyGroupScales(pages, page);
  }
  template <class D>
  static void GroupWeights(D d, const KvPages& pages, int64_t page, size_t group,
                           const float* probabilities, size_t keys, float* weights) {
    namespace hn = hwy::HWY_NAMESPACE;
    const uint16_t* scales =
        ValueGroupScales(pages, page) + group * static_cast<size_t>(pages.page_size);
    const size_t lanes = hn::Lanes(d);
    size_t t = 0;
    for (; t + lanes <= keys; t += lanes) {
      const auto p = hn::LoadU(d, probabilities + t);
      hn::StoreU(
          hn::IfThenZeroElse(hn::Eq(p, hn::Zero(d)),
                             hn::Mul(p, mha::HWY_NAMESPACE::LoadFp16(d, scales + t))),
          d, weights + t);
    }
    for (; t < keys; ++t) {
      weights[t] =
          probabilities[t] == 0.0f ? 0.0f : probabilities[t] * FloatFromFp16(scales[t]);
    }
  }
  using KeyLoader = mha::HWY_NAMESPACE::KeyGroupLoader<Q8Codes>;
  using ValueLoader = mha::HWY_NAMESPACE::ValueGroupLoader<Q8Codes>;
  static KeyLoader Keys(const KvPages& pages) {
    return {pages.key_codes_bytes, static_cast<size_t>(pages.page_size)};
  }
  static ValueLoader Values(const KvPages& pages) {
    return {pages.value_codes_bytes, static_cast<size_t>(pages.page_size)};
  }
};

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

// The int4 KV kind (KIVI's scheme at 4 bits): unsigned codes with zero points, two
// to a byte (Int4Pair, kv_pages.h). Keys per channel as int8_channel_keys, with a
// scale and a minimum per (page, channel); values per token in groups of
// kValueGroup channels, a scale and a minimum each (value_groups.h). The tile
// products take the scaled codes; the minimums' terms are separable and added apart
// (zero_points-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/kinds/int4.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "src/kernel/attention_head-inl.h"
#include "src/kv/channel_keys.h"
#include "src/kv/int4_codes.h"
#include "src/kv/kind_traits-inl.h"
#include "src/kv/kinds/kind_entry_points.h"
#include "src/kv/kv_append-inl.h"
#include "src/kv/kv_token_copy.h"
#include "src/kv/value_groups.h"
#include "src/simd/zero_points-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha::internal::HWY_NAMESPACE {

// Values as q8_0's and q4_0's (group_scaled_kind-inl.h): codes alone, each group's
// scales in the weights, in the integer kernels on x86 (4-bit codes, 0 standing for 0).
struct Int4Traits : TokenScaledKind<Int4Pair> {
  using KeyLoader = mha::HWY_NAMESPACE::RowScaledLoader<Int4Pair>;
  using ValueLoader = mha::HWY_NAMESPACE::CodesLoader<Int4Pair>;
  static constexpr bool kInt8ValueProducts = true, kContextTerms = true;
  static constexpr size_t kValueScaleGroup = kValueGroup;

  static KeyLoader Keys(const KvPages& pages) { return {KeyChannelScalesAt(pages)}; }
  // The tokens' scales for the group, to a whole vector past `keys`.
  template <class D>
  static void GroupScales(D d, const KvPages& pages, int64_t page, size_t group,
                          size_t keys, float* scales) {
    const float* from =
        ValueGroupScales(pages, page) + group * static_cast<size_t>(pages.page_size);
    for (size_t t = 0; t < keys; t += hn::Lanes(d)) {
      hn::StoreU(hn::LoadU(d, from + t), d, scales + t);
    }
  }
  // q . k_t = sum_c q_c s_c code_ct + q . mins, then the token scale (1 or NaN).
  template <class D>
  static void FinishScores(D d, const KvPages& pages, int64_t page, const float* query,
                           size_t query_stride, size_t rows, float* scores, size_t stride,
                           size_t keys) {
    mha::HWY_NAMESPACE::AddKeyZeroPoints(
        d, query, query_stride, rows, KeyChannelMins(pages, page),
        static_cast<size_t>(pages.head_dim), scores, stride, keys);
    TokenScaledKind::FinishScores(d, pages, page, query, query_stride, rows, scores,
                                  stride, keys);
  }
  // The value groups' minimums of a key tile's pages, from first_page.
  template <class D>
  static void FinishContext(D d, const KvPages& pages, int64_t first_page, size_t rows,
                            const float* probabilities, size_t stride, size_t keys,
                            float* context, size_t dim) {
    const size_t page_size = static_cast<size_t>(pages.page_size);
    const float* page_mins[kMaxKeyStep / kPanelWidth];
    for (size_t q = 0; q * page_size < keys; ++q)
      page_mins[q] = ValueGroupMins(pages, first_page + static_cast<int64_t>(q));
    mha::HWY_NAMESPACE::AddValueZeroPoints(d, probabilities, stride, rows, page_mins,
                                           page_size, keys, kValueGroup, context, dim);
  }
};

MHA_KV_KIND_ATTEND(Int4, Int4Traits)

struct Int4Writer {
  void Key(const KvPages& pages, const float* key, int64_t page, size_t offset,
           bool last) const {
    AppendChannelKey(pages, kInt4ChannelKeys, key, page, offset, last);
  }
  void Value(const KvPages& pages, const float* value, size_t value_head_dim,
             int64_t page, size_t offset) const {
    QuantizeValueGroups(pages, page * pages.page_size + static_cast<int64_t>(offset),
                        value, static_cast<int64_t>(value_head_dim));
  }
};

void AppendInt4(const PanelAppend& append) {
  CheckAppend(append);
  AppendRows(append, Int4Writer{});
}

}  // namespace mha::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mha::internal {
namespace {

PageBytes KeyPage(int64_t page_size, int64_t head_dim) {
  return ChannelKeyPage<Int4Pair>(page_size, head_dim, /*minimums=*/true);
}

// A value (the cache moves keys through its residual): its codes nibble by nibble,
// its token scale and each group's scale and minimum.
void CopyValue(const KvPages& pages, int64_t from, int64_t to) {
  if (from == to) return;
  const int64_t size = pages.page_size;
  const int64_t from_page = from / size, to_page = to / size;
  const int64_t from_slot = from % size, to_slot = to % size;
  const size_t rows = static_cast<size_t>(size);
  for (size_t k = 0; k < static_cast<size_t>(pages.padded_value_head_dim); ++k) {
    SetInt4(pages.ValuePage(to_page), static_cast<size_t>(to_slot), k, rows,
            GetInt4(pages.ValuePage(from_page), static_cast<size_t>(from_slot), k, rows));
  }
  CopyTokenScales(pages, from, to, /*keys=*/false);
  for (int64_t g = 0; g < ValueGroups(pages.padded_value_head_dim); ++g) {
    ValueGroupScales(pages, to_page)[g * size + to_slot] =
        ValueGroupScales(pages, from_page)[g * size + from_slot];
    ValueGroupMins(pages, to_page)[g * size + to_slot] =
        ValueGroupMins(pages, from_page)[g * size + from_slot];
  }
}

}  // namespace

MHA_KV_KIND_ENTRY_POINTS(Int4)

// Cleared values keep their codes (finite, whatever they hold): their token scales
// are zeroed.
extern const KvKind kKvKindInt4 = {KeyPage,
                                   GroupedValuePage<Int4Pair>,
                                   &kInt4ChannelKeys,
                                   /*latent=*/false,
                                   AttendInt4Run,
                                   AppendInt4Run,
                                   CopyValue,
                                   ClearValueTokenScales};

}  // namespace mha::internal
#endif  // HWY_ONCE

// The int8_channel_keys KV kind (KIVI's keys): int8 keys per channel, one scale per
// (page, channel) over the page's tokens, through the cache's fp32 residual of each
// sequence's partial last page (channel_keys.h); values per token as the int8 kind.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/kinds/int8_channel_keys.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "src/kernel/attention_head-inl.h"
#include "src/kv/channel_keys.h"
#include "src/kv/kind_traits-inl.h"
#include "src/kv/kinds/kind_entry_points.h"
#include "src/kv/kv_append-inl.h"
#include "src/kv/kv_token_copy.h"

HWY_BEFORE_NAMESPACE();
namespace mha::internal::HWY_NAMESPACE {

// K^T rows (channels) scaled as they load; token scales 1, or NaN for a non-finite key.
struct Int8ChannelKeysTraits : TokenScaledKind<int8_t> {
  static constexpr bool kInt8ValueProducts = true;  // values per token, as int8's
  using KeyLoader = mha::HWY_NAMESPACE::RowScaledLoader<int8_t>;
  static KeyLoader Keys(const KvPages& pages) { return {KeyChannelScalesAt(pages)}; }
};

MHA_KV_KIND_ATTEND(Int8ChannelKeys, Int8ChannelKeysTraits)

struct Int8ChannelKeysWriter {
  void Key(const KvPages& pages, const float* key, int64_t page, size_t offset,
           bool last) const {
    AppendChannelKey(pages, kInt8ChannelKeys, key, page, offset, last);
  }
  void Value(const KvPages& pages, const float* value, size_t value_head_dim,
             int64_t page, size_t offset) const {
    TokenCodes<Int8Code>{}.Value(pages, value, value_head_dim, page, offset);
  }
};

void AppendInt8ChannelKeys(const PanelAppend& append) {
  CheckAppend(append);
  AppendRows(append, Int8ChannelKeysWriter{});
}

}  // namespace mha::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mha::internal {
namespace {

// Values and their scales; the cache moves keys through its residual.
void CopyValue(const KvPages& pages, int64_t from, int64_t to) {
  if (from == to) return;
  CopyCodes<int8_t>(pages, from, to, /*keys=*/false);
  CopyTokenScales(pages, from, to, /*keys=*/false);
}

PageBytes KeyPage(int64_t page_size, int64_t head_dim) {
  return ChannelKeyPage<int8_t>(page_size, head_dim, /*minimums=*/false);
}

}  // namespace

MHA_KV_KIND_ENTRY_POINTS(Int8ChannelKeys)

extern const KvKind kKvKindInt8ChannelKeys = {
    KeyPage,          TokenScaledValuePage<int8_t>, &kInt8ChannelKeys,
    /*latent=*/false, AttendInt8ChannelKeysRun,     AppendInt8ChannelKeysRun,
    CopyValue,        ClearScaledValues<int8_t>};

}  // namespace mha::internal
#endif  // HWY_ONCE

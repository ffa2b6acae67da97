// The int8 KV kind: symmetric int8 codes, one fp32 scale per token for the key and for
// the value (max|x| / 127; token_scales.h). Keys meet the query quantised to integers in
// exact integer dot products (src/kernel/int8_tile_matmul.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/kinds/int8.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "src/kernel/attention_head-inl.h"
#include "src/kv/kind_traits-inl.h"
#include "src/kv/kinds/kind_entry_points.h"
#include "src/kv/kv_append-inl.h"
#include "src/kv/kv_token_copy.h"

HWY_BEFORE_NAMESPACE();
namespace mha::internal::HWY_NAMESPACE {

MHA_KV_KIND_ATTEND(Int8, Int8TokenScaledKind)

void AppendInt8(const PanelAppend& append) {
  CheckAppend(append);
  AppendRows(append, TokenCodes<Int8Code>{});
}

}  // namespace mha::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mha::internal {

MHA_KV_KIND_ENTRY_POINTS(Int8)

extern const KvKind kKvKindInt8 = {TokenScaledKeyPage<int8_t>,
                                   TokenScaledValuePage<int8_t>,
                                   nullptr,
                                   /*latent=*/true,
                                   AttendInt8Run,
                                   AppendInt8Run,
                                   CopyScaledToken<int8_t>,
                                   ClearScaledValues<int8_t>};

}  // namespace mha::internal
#endif  // HWY_ONCE

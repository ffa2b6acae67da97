// The fp8_e5m2 KV kind: fp8 e5m2 codes (PyTorch's float8_e5m2, src/simd/fp8.h), one
// fp32 scale per token for the key and for the value.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/kinds/fp8_e5m2.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "src/kernel/attention_head-inl.h"
#include "src/kv/kind_traits-inl.h"
#include "src/kv/kinds/kind_entry_points.h"
#include "src/kv/kv_append-inl.h"
#include "src/kv/kv_token_copy.h"

HWY_BEFORE_NAMESPACE();
namespace mha::internal::HWY_NAMESPACE {

MHA_KV_KIND_ATTEND(Fp8E5M2, TokenScaledKind<Fp8E5M2>)

void AppendFp8E5M2(const PanelAppend& append) {
  CheckAppend(append);
  AppendRows(append, TokenCodes<Fp8Code<Fp8E5M2>>{});
}

}  // namespace mha::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mha::internal {

MHA_KV_KIND_ENTRY_POINTS(Fp8E5M2)

extern const KvKind kKvKindFp8E5M2 = {TokenScaledKeyPage<uint8_t>,
                                      TokenScaledValuePage<uint8_t>,
                                      nullptr,
                                      /*latent=*/true,
                                      AttendFp8E5M2Run,
                                      AppendFp8E5M2Run,
                                      CopyScaledToken<uint8_t>,
                                      ClearScaledValues<uint8_t>};

}  // namespace mha::internal
#endif  // HWY_ONCE

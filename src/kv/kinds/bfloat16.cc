// The bfloat16 KV kind: bfloat16 codes in paired rows (kv_pages.h), rounded once as
// appended; read by AVX512_BF16 dot products (or AMX tiles) where the CPU has them,
// widened to fp32 elsewhere.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/kinds/bfloat16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "src/kernel/attention_head-inl.h"
#include "src/kv/kind_traits-inl.h"
#include "src/kv/kinds/kind_entry_points.h"
#include "src/kv/kv_append-inl.h"
#include "src/kv/kv_token_copy.h"

HWY_BEFORE_NAMESPACE();
namespace mha::internal::HWY_NAMESPACE {

// bfloat16 products where the CPU has them (attention_head-inl.h).
struct BFloat16Traits : CodesKind<hwy::bfloat16_t> {
  static constexpr bool kBf16Products = true;
};

MHA_KV_KIND_ATTEND(BFloat16, BFloat16Traits)

void AppendBFloat16(const PanelAppend& append) {
  CheckAppend(append);
  AppendSplit<hwy::bfloat16_t>(append);
}

}  // namespace mha::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mha::internal {

MHA_KV_KIND_ENTRY_POINTS(BFloat16)

extern const KvKind kKvKindBFloat16 = {CodesKeyPage<hwy::bfloat16_t>,
                                       CodesValuePage<hwy::bfloat16_t>,
                                       nullptr,
                                       /*latent=*/true,
                                       AttendBFloat16Run,
                                       AppendBFloat16Run,
                                       CopyTokenCodes<hwy::bfloat16_t>,
                                       ClearValueCodes<hwy::bfloat16_t>};

}  // namespace mha::internal
#endif  // HWY_ONCE

// The float32 KV kind: fp32 codes, nothing beside them.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/kinds/float32.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "src/kernel/attention_head-inl.h"
#include "src/kv/kind_traits-inl.h"
#include "src/kv/kinds/kind_entry_points.h"
#include "src/kv/kv_append-inl.h"
#include "src/kv/kv_token_copy.h"

HWY_BEFORE_NAMESPACE();
namespace mha::internal::HWY_NAMESPACE {

MHA_KV_KIND_ATTEND(Float32, CodesKind<float>)

void AppendFloat32(const PanelAppend& append) {
  CheckAppend(append);
  AppendSplit<float>(append);
}

}  // namespace mha::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mha::internal {

MHA_KV_KIND_ENTRY_POINTS(Float32)

extern const KvKind kKvKindFloat32 = {
    CodesKeyPage<float>,   CodesValuePage<float>, nullptr,
    /*latent=*/true,       AttendFloat32Run,      AppendFloat32Run,
    CopyTokenCodes<float>, ClearValueCodes<float>};

}  // namespace mha::internal
#endif  // HWY_ONCE

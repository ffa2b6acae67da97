// The fp8_e4m3 KV kind: fp8 e4m3 codes (PyTorch's float8_e4m3fn, src/simd/fp8.h), one
// fp32 scale per token for the key and for the value (max|x| over the format's largest
// value, vLLM's fp8 scheme); the scaled codes are finite.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/kinds/fp8_e4m3.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "src/kernel/attention_head-inl.h"
#include "src/kv/kind_traits-inl.h"
#include "src/kv/kinds/kind_entry_points.h"
#include "src/kv/kv_append-inl.h"
#include "src/kv/kv_token_copy.h"

HWY_BEFORE_NAMESPACE();
namespace mha::internal::HWY_NAMESPACE {

MHA_KV_KIND_ATTEND(Fp8E4M3, TokenScaledKind<Fp8E4M3Finite>)

void AppendFp8E4M3(const PanelAppend& append) {
  CheckAppend(append);
  AppendRows(append, TokenCodes<Fp8Code<Fp8E4M3Finite>>{});
}

}  // namespace mha::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mha::internal {

MHA_KV_KIND_ENTRY_POINTS(Fp8E4M3)

extern const KvKind kKvKindFp8E4M3 = {TokenScaledKeyPage<uint8_t>,
                                      TokenScaledValuePage<uint8_t>,
                                      nullptr,
                                      /*latent=*/true,
                                      AttendFp8E4M3Run,
                                      AppendFp8E4M3Run,
                                      CopyScaledToken<uint8_t>,
                                      ClearScaledValues<uint8_t>};

}  // namespace mha::internal
#endif  // HWY_ONCE

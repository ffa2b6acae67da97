// The traits ggml's block kinds (src/kv/kinds/q8_0.cc, q4_0.cc) share: codes in
// groups of kScaleGroup channels with a fp16 scale per (group, token), keys and
// values alike (group_scales.h). On x86 keys meet the query's codes and values the
// weights' codes in the integer kernels, each group's sums times its scales. The fp32
// path (no integer kernel) reads keys through the group loader, and values as codes
// against each group's fp32 weights: either way a weight of 0 stays 0.

#if defined(MHA_KV_GROUP_SCALED_KIND_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KV_GROUP_SCALED_KIND_INL_H_
#undef MHA_KV_GROUP_SCALED_KIND_INL_H_
#else
#define MHA_KV_GROUP_SCALED_KIND_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"
#include "src/kv/group_scales-inl.h"
#include "src/kv/group_scales.h"
#include "src/kv/kind_traits-inl.h"
#include "src/kv/kv_pages.h"
#include "src/simd/softmax-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace internal {
namespace HWY_NAMESPACE {

// Codes: a loader of the codes as numbers (tile_loaders-inl.h), less kZero (the code
// standing for 0) where the kind stores them offset.
template <class Codes, int16_t kZero>
struct GroupScaledKind : CodesKind<typename Codes::Code> {
  static constexpr bool kInt8KeyProducts = true, kInt8ValueProducts = true;
  static constexpr int16_t kZeroCode = kZero;
  static constexpr size_t kKeyScaleGroup = kScaleGroup, kValueScaleGroup = kScaleGroup;
  using KeyLoader = mha::HWY_NAMESPACE::KeyGroupLoader<Codes>;
  using ValueLoader = Codes;  // the scales go into the weights (GroupScales)
  static KeyLoader Keys(const KvPages& pages) {
    return {pages.key_codes_bytes, static_cast<size_t>(pages.page_size)};
  }
  static ValueLoader Values(const KvPages&) { return {}; }
  static const uint16_t* KeyGroupScales(const KvPages& pages, int64_t page) {
    return internal::KeyGroupScales(pages, page);
  }
  // To a whole vector past `keys`: a page's scales run to page_size.
  template <class D>
  static void GroupScales(D d, const KvPages& pages, int64_t page, size_t group,
                          size_t keys, float* scales) {
    const uint16_t* from =
        ValueGroupScales(pages, page) + group * static_cast<size_t>(pages.page_size);
    for (size_t t = 0; t < keys; t += hwy::HWY_NAMESPACE::Lanes(d)) {
      hwy::HWY_NAMESPACE::StoreU(mha::HWY_NAMESPACE::LoadFp16(d, from + t), d,
                                 scales + t);
    }
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KV_GROUP_SCALED_KIND_INL_H_

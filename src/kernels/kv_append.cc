// AppendToPanels, compiled once per SIMD target: the head split of head_layout-inl.h
// aimed at a position inside a KV cache instead of at a fresh panel.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kernels/kv_append.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "src/kernels/head_layout-inl.h"
#include "src/kernels/kv_append.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace internal {
namespace HWY_NAMESPACE {

void AppendToPanels(const PanelAppend& a) {
  const hwy::HWY_NAMESPACE::ScalableTag<float> d;
  const size_t rows = static_cast<size_t>(a.rows),
               head_dim = static_cast<size_t>(a.head_dim);
  const size_t first = static_cast<size_t>(a.first);
  mha::HWY_NAMESPACE::SplitKeysTransposed(d, a.keys, a.stride, first, rows, first + rows,
                                          head_dim, a.key_panel, a.key_block);
  mha::HWY_NAMESPACE::SplitHead(d, a.values, a.stride, rows, rows, head_dim,
                                a.value_panel + a.first * a.value_panel_stride,
                                a.value_panel_stride);
}

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mha::internal {

HWY_EXPORT(AppendToPanels);

void AppendToPanels(const PanelAppend& append) {
  HWY_DYNAMIC_DISPATCH(AppendToPanels)(append);
}

}  // namespace mha::internal
#endif  // HWY_ONCE

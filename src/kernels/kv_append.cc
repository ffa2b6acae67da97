// AppendToPanels, compiled once per SIMD target: the head split of head_layout-inl.h
// (keys rotated on the way in for rotary layers) aimed at a position inside a KV
// cache instead of at a fresh panel.
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

template <typename T>
void Append(const PanelAppend& a, T* keys, T* values) {
  const hwy::HWY_NAMESPACE::ScalableTag<float> d;
  const size_t rows = static_cast<size_t>(a.rows),
               head_dim = static_cast<size_t>(a.head_dim);
  const size_t first = static_cast<size_t>(a.first),
               stride = static_cast<size_t>(a.stride);
  const size_t value_stride = static_cast<size_t>(a.value_panel_stride);
  const mha::HWY_NAMESPACE::KeyRotation rotation{a.rotary, a.positions, a.first,
                                                 a.rotation_scratch, a.rotation_rows};
  mha::HWY_NAMESPACE::SplitRotatedKeys(d, a.keys, stride, first, rows, first + rows,
                                       head_dim, keys, static_cast<size_t>(a.key_block),
                                       rotation);
  mha::HWY_NAMESPACE::SplitHead(d, a.values, stride, rows, rows, head_dim,
                                values + first * value_stride, value_stride);
}

void AppendToPanels(const PanelAppend& a) {
  if (a.bf16) {
    return Append(a, static_cast<hwy::bfloat16_t*>(a.key_panel),
                  static_cast<hwy::bfloat16_t*>(a.value_panel));
  }
  Append(a, static_cast<float*>(a.key_panel), static_cast<float*>(a.value_panel));
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

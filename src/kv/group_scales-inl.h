// Per-target loaders of pages scaled per group (group_scales.h): a K^T row (a
// channel) times the fp16 scales of its group for the vector's tokens. Codes: a
// loader of the codes as numbers (tile_loaders-inl.h; a kind subtracts its offset
// there). Values take their scales in the weights instead (group_scaled_kind-inl.h).

#if defined(MHA_KV_GROUP_SCALES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KV_GROUP_SCALES_INL_H_
#undef MHA_KV_GROUP_SCALES_INL_H_
#else
#define MHA_KV_GROUP_SCALES_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"
#include "src/kv/group_scales.h"
#include "src/kv/tile_loaders-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Lanes(d) fp16 values from p, as floats: F16C where the target has it (AVX2 and
// up); below, as FloatFromFp16 does (Highway 1.0.3's emulation there widens an
// infinite fp16 to a finite float).
template <class D>
HWY_INLINE hn::Vec<D> LoadFp16(D d, const uint16_t* HWY_RESTRICT p) {
#if HWY_TARGET <= HWY_AVX2
  const hn::Rebind<hwy::float16_t, D> d16;
  return hn::PromoteTo(d, hn::LoadU(d16, reinterpret_cast<const hwy::float16_t*>(p)));
#else
  const hn::RebindToUnsigned<D> du;
  const auto h = hn::PromoteTo(du, hn::LoadU(hn::Rebind<uint16_t, D>(), p));
  const auto sign = hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u)));
  const auto magnitude = hn::ShiftLeft<13>(hn::And(h, hn::Set(du, 0x7FFFu)));
  const auto finite = hn::Mul(hn::BitCast(d, magnitude), hn::Set(d, 0x1p112f));
  const auto special = hn::BitCast(d, hn::Or(magnitude, hn::Set(du, 0x7F800000u)));
  const auto exponent_max =
      hn::Eq(hn::And(h, hn::Set(du, 0x7C00u)), hn::Set(du, 0x7C00u));
  const auto widened = hn::IfThenElse(hn::RebindMask(d, exponent_max), special, finite);
  return hn::Or(widened, hn::BitCast(d, sign));
#endif
}

// K^T tiles: row k of column c times scales[k / kScaleGroup x page_size + c], the
// scales `scales_at` bytes from the tile's start.
template <class Codes>
struct KeyGroupLoader {
  using Code = typename Codes::Code;
  static constexpr size_t kRowsPerLoad = Codes::kRowsPerLoad;
  static constexpr size_t kPanelRowBytes = Codes::kPanelRowBytes;
  int64_t scales_at = 0;
  size_t page_size = 0;

  struct Column : Codes::Column {
    const uint16_t* scales;
    size_t page_size;
    template <class D>
    HWY_INLINE hn::Vec<D> Scale(D d, size_t k) const {
      return LoadFp16(d, scales + k / internal::kScaleGroup * page_size);
    }
    template <class D>
    HWY_INLINE hn::Vec<D> Load(D d, size_t k) const {
      return hn::Mul(Codes::Column::Load(d, k), Scale(d, k));
    }
    // Rows k and k + 1 (k even) share their group.
    template <class D>
    HWY_INLINE void Load(D d, size_t k, hn::Vec<D>& even, hn::Vec<D>& odd) const {
      Codes::Column::Load(d, k, even, odd);
      const hn::Vec<D> scale = Scale(d, k);
      even = hn::Mul(even, scale);
      odd = hn::Mul(odd, scale);
    }
  };
  template <class D>
  HWY_INLINE Column At(D d, const Code* tile, size_t column, size_t rows) const {
    return {Codes().At(d, tile, column, rows),
            reinterpret_cast<const uint16_t*>(reinterpret_cast<const uint8_t*>(tile) +
                                              scales_at) +
                column,
            page_size};
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KV_GROUP_SCALES_INL_H_

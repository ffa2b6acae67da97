// Per-target tile loaders: how the tile products (tile_matmul-inl.h) read the rows
// of a B tile (a KV page, src/kv/kv_pages.h) as float vectors. A loader is the
// one place a KV storage kind meets the products: the kind (src/kv/kinds/) picks
// one, the products never ask what the codes are. A loader has
//   Code                  the tile's element (float, bfloat16, int8, fp8, Int4Pair)
//   kRowsPerLoad          1, or 2 for tiles that pair their rows (bf16, int8, int4)
//   kPanelRowBytes        bytes of one panel row (the prefetches' step)
//   At(d, tile, column, rows)
//                         a Column: the vector of columns [column, column + Lanes)
//                         of the [rows, ...] tile starting at `tile` (a page's
//                         start, where the kind finds the page's scales), whose
//                         `codes` is row 0's first element and whose Load(d, k)
//                         (or Load(d, k, even, odd)) gives row k (and k + 1).
// Here: codes widened as they are (CodesLoader), or times a scale per row (keys per
// channel: RowScaledLoader).

#if defined(MHA_KERNELS_TILE_LOADERS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KERNELS_TILE_LOADERS_INL_H_
#undef MHA_KERNELS_TILE_LOADERS_INL_H_
#else
#define MHA_KERNELS_TILE_LOADERS_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "hwy/highway.h"
#include "src/kv/kv_pages.h"
#include "src/simd/fp8_widen-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D>
HWY_INLINE hn::Vec<D> LoadRow(D d, const float* HWY_RESTRICT p) {
  return hn::LoadU(d, p);
}
// Rows k and k + 1 of a bfloat16 tile (paired rows: kv_pages.h): each 32-bit lane
// holds row k's element in its low half and row k + 1's in its high half, and a
// bfloat16 is the high half of its float.
template <class D>
HWY_INLINE void LoadRowPair(D d, const hwy::bfloat16_t* HWY_RESTRICT p, hn::Vec<D>& even,
                            hn::Vec<D>& odd) {
  const hn::RebindToUnsigned<D> du;
  const auto pairs = hn::LoadU(du, reinterpret_cast<const uint32_t*>(p));
  even = hn::BitCast(d, hn::ShiftLeft<16>(pairs));
  odd = hn::BitCast(d, hn::And(pairs, hn::Set(du, 0xFFFF0000u)));
}

// Rows k and k + 1 of an int4 tile (Int4Pair: kv_pages.h): the low and high nibbles
// of lanes bytes, unsigned codes 0..15. The bytes widen once, then split in 32-bit
// lanes: x86 has no byte shift (a nibble split in bytes took two more operations).
template <class D>
HWY_INLINE void LoadRowPair(D d, const internal::Int4Pair* HWY_RESTRICT p,
                            hn::Vec<D>& even, hn::Vec<D>& odd) {
  const hn::Rebind<int32_t, D> di32;
  const auto pairs = hn::PromoteTo(
      di32, hn::LoadU(hn::Rebind<uint8_t, D>(), reinterpret_cast<const uint8_t*>(p)));
  even = hn::ConvertTo(d, hn::And(pairs, hn::Set(di32, 15)));
  odd = hn::ConvertTo(d, hn::ShiftRight<4>(pairs));
}

// Rows k and k + 1 of an int8 tile (paired rows: kv_pages.h): the low and high bytes
// of 16-bit lanes. Widened with their sign to 32 bits, a lane's high byte is an
// arithmetic shift away, its low byte a shift left and back.
template <class D>
HWY_INLINE void LoadRowPair(D d, const int8_t* HWY_RESTRICT p, hn::Vec<D>& even,
                            hn::Vec<D>& odd) {
  const hn::Rebind<int32_t, D> di32;
  const auto pairs = hn::PromoteTo(
      di32, hn::LoadU(hn::Rebind<int16_t, D>(), reinterpret_cast<const int16_t*>(p)));
  even = hn::ConvertTo(d, hn::ShiftRight<24>(hn::ShiftLeft<24>(pairs)));
  odd = hn::ConvertTo(d, hn::ShiftRight<8>(pairs));
}
template <class D>
HWY_INLINE hn::Vec<D> LoadRow(D d, const internal::Fp8E4M3* HWY_RESTRICT p) {
  return WidenFp8(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadRow(D d, const internal::Fp8E5M2* HWY_RESTRICT p) {
  return WidenFp8(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadRow(D d, const internal::Fp8E4M3Finite* HWY_RESTRICT p) {
  return WidenFp8(d, p);
}

// Codes widened as they are.
template <typename T>
struct CodesLoader {
  using Code = T;
  static constexpr bool kInt4 = std::is_same_v<T, internal::Int4Pair>;
  static constexpr size_t kRowsPerLoad = kInt4 || internal::PairsRows<T>() ? 2 : 1;
  static constexpr size_t kPanelRowBytes =
      internal::kPanelWidth * sizeof(T) / (kInt4 ? 2 : 1);
  // Elements of T from one load's rows of a panel to the next.
  static constexpr size_t kLoadStep =
      kInt4 ? internal::kPanelWidth : kRowsPerLoad * internal::kPanelWidth;

  struct Column {
    const T* codes;
    template <class D>
    HWY_INLINE hn::Vec<D> Load(D d, size_t k) const {
      return LoadRow(d, codes + k * internal::kPanelWidth);
    }
    template <class D>
    HWY_INLINE void Load(D d, size_t k, hn::Vec<D>& even, hn::Vec<D>& odd) const {
      LoadRowPair(d, codes + k / 2 * kLoadStep, even, odd);
    }
  };
  template <class D>
  HWY_INLINE Column At(D, const T* tile, size_t column, size_t rows) const {
    return {tile + internal::TileOffset<T>(0, column, rows)};
  }
};

// Codes times a scale per row: row k of a tile times the float at `scales_at`
// bytes from the tile's start, plus k (keys per channel: channel_keys.h). A tile of
// paired rows has a scale for its padding row too (read with its pair, never used:
// pages pad their scales to whole panels).
template <typename T>
struct RowScaledLoader {
  using Codes = CodesLoader<T>;
  using Code = T;
  static constexpr size_t kRowsPerLoad = Codes::kRowsPerLoad;
  static constexpr size_t kPanelRowBytes = Codes::kPanelRowBytes;
  int64_t scales_at = 0;

  // The codes' column (its `codes` the prefetches follow) and its rows' scales.
  struct Column : Codes::Column {
    const float* scales;
    template <class D>
    HWY_INLINE hn::Vec<D> Load(D d, size_t k) const {
      return hn::Mul(Codes::Column::Load(d, k), hn::Set(d, scales[k]));
    }
    template <class D>
    HWY_INLINE void Load(D d, size_t k, hn::Vec<D>& even, hn::Vec<D>& odd) const {
      Codes::Column::Load(d, k, even, odd);
      even = hn::Mul(even, hn::Set(d, scales[k]));
      odd = hn::Mul(odd, hn::Set(d, scales[k + 1]));
    }
  };
  template <class D>
  HWY_INLINE Column At(D d, const T* tile, size_t column, size_t rows) const {
    return {Codes().At(d, tile, column, rows),
            reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(tile) +
                                           scales_at)};
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_TILE_LOADERS_INL_H_

// UnpackNibbles, per target: int4 codes (two to a byte, the low nibble first:
// int4_codes.h) to one int8 per code, so that an int4 page becomes the int8 tile the
// tile product reads (tile_matmul-inl.h). 128-bit vectors on every target: their
// interleave keeps the codes in order, where a wider one interleaves per 128-bit block.

#if defined(MHA_KERNELS_INT4_UNPACK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KERNELS_INT4_UNPACK_INL_H_
#undef MHA_KERNELS_INT4_UNPACK_INL_H_
#else
#define MHA_KERNELS_INT4_UNPACK_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Every cache line of p[0, bytes) on its way to L2: an int4 page the unpacking
// reads next. Pages are scattered (a paged cache's blocks): the hardware prefetchers
// do not follow from one to the next, and the unpacking's loads waited on memory.
HWY_INLINE void PrefetchPage(const uint8_t* p, size_t bytes) {
  for (size_t line = 0; line < bytes; line += 64) {
#if HWY_ARCH_X86
    _mm_prefetch(reinterpret_cast<const char*>(p + line), _MM_HINT_T1);
#else
    hwy::Prefetch(p + line);
#endif
  }
}

// out[i] = code i of `packed`, for i < 2 x bytes.
HWY_INLINE void UnpackNibbles(const uint8_t* HWY_RESTRICT packed, size_t bytes,
                              int8_t* HWY_RESTRICT out) {
  const hn::Full128<uint8_t> d;
  const size_t lanes = hn::Lanes(d);
  const auto low_nibble = hn::Set(d, uint8_t{0x0F});
  size_t i = 0;
  for (; i + lanes <= bytes; i += lanes) {
    const auto v = hn::LoadU(d, packed + i);
    const auto low = hn::And(v, low_nibble), high = hn::ShiftRight<4>(v);
    uint8_t* to = reinterpret_cast<uint8_t*>(out + 2 * i);
    hn::StoreU(hn::InterleaveLower(d, low, high), d, to);
    hn::StoreU(hn::InterleaveUpper(d, low, high), d, to + lanes);
  }
  for (; i < bytes; ++i) {
    out[2 * i] = static_cast<int8_t>(packed[i] & 0x0F);
    out[2 * i + 1] = static_cast<int8_t>(packed[i] >> 4);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_INT4_UNPACK_INL_H_

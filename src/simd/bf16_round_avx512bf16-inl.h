// AVX512_BF16's vcvtneps2bf16 on Highway's AVX-512 targets (Highway 1.0.3 does not
// emit it): 16 floats rounded to bfloat16 in one instruction, where RoundToBf16
// (bf16_round-inl.h) takes ten. The same bits for every normal float, zero, infinity
// and NaN (round to nearest even, a NaN quieted); a subnormal becomes zero of its
// sign. A function that uses it carries MHA_AVX512_BF16, so it is never inlined into
// code compiled without the instruction, and runs only where CpuHasAvx512Bf16()
// (src/base/cpu_features.h).

#if defined(MHA_KERNELS_BF16_ROUND_AVX512BF16_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KERNELS_BF16_ROUND_AVX512BF16_INL_H_
#undef MHA_KERNELS_BF16_ROUND_AVX512BF16_INL_H_
#else
#define MHA_KERNELS_BF16_ROUND_AVX512BF16_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#include <immintrin.h>

#ifndef MHA_AVX512_BF16
#define MHA_AVX512_BF16 __attribute__((target(HWY_TARGET_STR ",avx512bf16")))
#endif

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D>
MHA_AVX512_BF16 inline hn::Vec<hn::Rebind<uint16_t, D>> RoundToBf16Avx512Bf16(
    D /*d*/, hn::Vec<D> values) {
  static_assert(hn::MaxLanes(D()) == 16, "vcvtneps2bf16 rounds 16 lanes");
  return hn::Vec<hn::Rebind<uint16_t, D>>{
      reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(values.raw))};
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3

#endif  // MHA_KERNELS_BF16_ROUND_AVX512BF16_INL_H_

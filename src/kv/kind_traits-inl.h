// Per-target traits a KV storage kind's file (src/kv/kinds/) builds its kind from:
// what the flash kernel (attention_head-inl.h) asks of a kind.
//   Code                 the tiles' element
//   KeyLoader, ValueLoader and Keys(pages), Values(pages)
//                        how the tile products read its K^T and V tiles
//                        (tile_loaders-inl.h)
//   kBf16Products        bfloat16 dot products where the CPU has them
//   kInt8KeyProducts     int8 keys meet the query quantised to integers, in exact
//                        integer dot products (src/kernel/int8_tile_matmul.h)
//   kKeyScaleGroup       with kInt8KeyProducts, non-zero: the keys carry a fp16
//                        scale per (group of that many channels, key), which the
//                        integer products apply to each group's sums;
//                        KeyGroupScales(pages, page) gives a page's, group b's at
//                        b x page_size (q8_0's: group_scales.h)
//   kInt8ValueProducts   int8 values (a scale per token) meet the weights quantised
//                        to integers, in integer products (x86)
//                        (with either: 4-bit codes, Int4Pair, read as nibbles less
//                        kZeroCode, the code standing for 0)
//   kValueScaleGroup     non-zero: the values carry a scale per (group of that many
//                        channels, token) instead; GroupScales(d, pages, page,
//                        group, keys, scales) gives a group's scales of a page's
//                        keys as floats, which the kernel multiplies into the
//                        probabilities to meet the ValueLoader's codes group by
//                        group, in the integer kernels
//                        (with kInt8ValueProducts) or in fp32 (ggml's block kinds:
//                        group_scaled_kind-inl.h; int4's values)
//   kScoreTerms          FinishScores(d, pages, page, query, query_stride, rows,
//                        scores, stride, keys): after Q K^T of one page (token scales,
//                        zero points)
//   kProbabilityTerms    ScaleProbabilities(d, pages, page, rows, probabilities,
//                        stride, keys): before P V (token scales)
//   kContextTerms        FinishContext(d, pages, first_page, rows, probabilities,
//                        stride, keys, context, dim): after P V (zero points)
// The score and probability hooks run for each page of a key tile, on the columns of
// that page; the context hook once per key tile, over its pages from first_page.

#if defined(MHA_KV_KIND_TRAITS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KV_KIND_TRAITS_INL_H_
#undef MHA_KV_KIND_TRAITS_INL_H_
#else
#define MHA_KV_KIND_TRAITS_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"
#include "src/kv/kv_pages.h"
#include "src/kv/tile_loaders-inl.h"
#include "src/kv/token_scales.h"
#include "src/simd/softmax-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace internal {
namespace HWY_NAMESPACE {
using mha::HWY_NAMESPACE::CodesLoader;

// Codes alone, read as they are.
template <typename T>
struct CodesKind {
  using Code = T;
  using KeyLoader = CodesLoader<T>;
  using ValueLoader = CodesLoader<T>;
  static constexpr bool kBf16Products = false, kInt8KeyProducts = false,
                        kInt8ValueProducts = false;
  static constexpr size_t kKeyScaleGroup = 0, kValueScaleGroup = 0;
  static constexpr int16_t kZeroCode = 0;
  static constexpr bool kScoreTerms = false, kProbabilityTerms = false,
                        kContextTerms = false;
  static KeyLoader Keys(const KvPages&) { return {}; }
  static ValueLoader Values(const KvPages&) { return {}; }
};

// Codes with a scale per token (token_scales.h): a key's scores times its key
// scale, a value's probability times its value scale.
template <typename T>
struct TokenScaledKind : CodesKind<T> {
  static constexpr bool kScoreTerms = true, kProbabilityTerms = true;

  template <class D>
  static void FinishScores(D d, const KvPages& pages, int64_t page, const float*, size_t,
                           size_t rows, float* scores, size_t stride, size_t keys) {
    for (size_t i = 0; i < rows; ++i) {
      mha::HWY_NAMESPACE::MulRow(d, scores + i * stride, KeyTokenScales(pages, page),
                                 keys);
    }
  }
  template <class D>
  static void ScaleProbabilities(D d, const KvPages& pages, int64_t page, size_t rows,
                                 float* probabilities, size_t stride, size_t keys) {
    for (size_t i = 0; i < rows; ++i) {
      mha::HWY_NAMESPACE::ScaleProbabilities(d, probabilities + i * stride,
                                             ValueTokenScales(pages, page), keys);
    }
  }
};

// int8 codes with a scale per token, whose keys meet a quantised query: a logit is
// query scale * integer dot product * key scale.
struct Int8TokenScaledKind : TokenScaledKind<int8_t> {
  static constexpr bool kInt8KeyProducts = true, kInt8ValueProducts = true;
};

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KV_KIND_TRAITS_INL_H_

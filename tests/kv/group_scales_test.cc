// Pages scaled per group (src/kv/group_scales.h, group_scales-inl.h) on every SIMD
// target this CPU supports: fp16 scales coded with round-to-nearest-even and decoded
// exactly (every one of the 65536 codes, scalar and vector), and the tile product
// reading int8 K^T pages through KeyGroupLoader (rows times their group's scale per
// token), against the same products in double. (Values take their group scales in
// the weights: kv_cache_test's non-finite tokens and kv_storage_accuracy_test.)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/kv/group_scales_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "hwy/highway.h"
#include "src/kernel/tile_matmul-inl.h"
#include "src/kv/group_scales-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

// Every fp16 code widened a vector at a time.
void WidenAllFp16ForTest(const uint16_t* codes, float* out) {
  const hwy::HWY_NAMESPACE::ScalableTag<float> d;
  for (size_t i = 0; i < 65536; i += hwy::HWY_NAMESPACE::Lanes(d)) {
    hwy::HWY_NAMESPACE::StoreU(LoadFp16(d, codes + i), d, out + i);
  }
}

// C[rows, page] = A B over one page of `page` keys (B = the K^T tile, depth
// head_dim), the page's codes then its scales.
void BlockProductForTest(size_t rows, size_t page, size_t head_dim, const float* a,
                         const int8_t* page_bytes, int64_t scales_at, float* c) {
  const hwy::HWY_NAMESPACE::ScalableTag<float> d;
  const KeyGroupLoader<CodesLoader<int8_t>> loader{scales_at, page};
  TileMatMul(d, loader, rows, page, head_dim, a, head_dim, page_bytes, head_dim, c, page,
             /*accumulate=*/false);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "hwy/tests/hwy_gtest.h"
#include "tests/test_util.h"

namespace mha {
HWY_EXPORT(WidenAllFp16ForTest);
HWY_EXPORT(BlockProductForTest);
}  // namespace mha

namespace {

using mha::internal::FloatFromFp16;
using mha::internal::Fp16FromFloat;
using mha::internal::TileOffset;

class BlockScales : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(BlockScales);

TEST_P(BlockScales, Fp16CodesRoundTripAndRoundToNearestEven) {
  std::vector<uint16_t> codes(65536);
  for (uint32_t i = 0; i < 65536; ++i) codes[i] = static_cast<uint16_t>(i);
  std::vector<float> widened(65536);
  HWY_DYNAMIC_DISPATCH(mha::WidenAllFp16ForTest)(codes.data(), widened.data());
  for (uint32_t i = 0; i < 65536; ++i) {
    const float x = FloatFromFp16(static_cast<uint16_t>(i));
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(widened[i])) << i;
      ASSERT_EQ(Fp16FromFloat(x) & 0x7C00u, 0x7C00u) << i;
      continue;
    }
    ASSERT_EQ(std::memcmp(&x, &widened[i], 4), 0) << "code " << i;
    ASSERT_EQ(Fp16FromFloat(x), i) << "code " << i;
  }
  EXPECT_EQ(FloatFromFp16(0x3C00), 1.0f);
  EXPECT_EQ(FloatFromFp16(0x0001), std::ldexp(1.0f, -24));  // the least subnormal
  EXPECT_EQ(FloatFromFp16(0x7BFF), 65504.0f);
  // Ties go to the even code, halfway above 65504 to infinity.
  EXPECT_EQ(Fp16FromFloat(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(Fp16FromFloat(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(Fp16FromFloat(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(Fp16FromFloat(3 * std::ldexp(1.0f, -25)), 0x0002);
  EXPECT_EQ(Fp16FromFloat(65519.0f), 0x7BFF);
  EXPECT_EQ(Fp16FromFloat(65520.0f), 0x7C00);
  EXPECT_EQ(Fp16FromFloat(-1e30f), 0xFC00);
}

TEST_P(BlockScales, KeyProductsScaleEachRowByItsBlock) {
  constexpr size_t kPage = 16;
  for (const size_t rows : {1, 5, 7}) {
    for (const size_t head_dim : {16, 48, 64, 96}) {  // 48: a partial last group
      const size_t groups = (head_dim + 31) / 32;
      const std::vector<float> a =
          mha::testing::RandomFloats(rows * head_dim, uint32_t(rows + head_dim));
      const std::vector<float> scales =
          mha::testing::RandomFloats(groups * kPage, uint32_t(head_dim), 0.5f);
      std::vector<int8_t> page(head_dim * kPage + groups * kPage * 2);
      std::vector<double> b(head_dim * kPage);
      for (size_t t = 0; t < kPage; ++t) {
        for (size_t c = 0; c < head_dim; ++c) {
          const size_t group = c / 32;
          const uint16_t scale = Fp16FromFloat(scales[group * kPage + t]);
          std::memcpy(page.data() + head_dim * kPage + (group * kPage + t) * 2, &scale,
                      2);
          const int8_t code = static_cast<int8_t>((t * 7 + c * 3) % 255 - 127);
          page[TileOffset<int8_t>(c, t, head_dim)] = code;
          b[c * kPage + t] = code * double{FloatFromFp16(scale)};
        }
      }
      std::vector<float> c(rows * kPage);
      HWY_DYNAMIC_DISPATCH(mha::BlockProductForTest)
      (rows, kPage, head_dim, a.data(), page.data(),
       static_cast<int64_t>(head_dim * kPage), c.data());
      mha::testing::ExpectTileProduct(a, b, c, rows, kPage, head_dim);
    }
  }
}

}  // namespace
#endif  // HWY_ONCE

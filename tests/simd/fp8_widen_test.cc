// fp8 on every SIMD target this CPU supports: every code of both formats widened
// (fp8_widen-inl.h, F16C's conversion where the target has it) to the value the OCP FP8
// definition gives it, computed here from its fields with ldexp; the scalar cast rounding
// to nearest even and saturating; a cache's rows coded into pages with and without
// per-token scales; and the tile product reading fp8 K^T pages against the same product
// in double.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/simd/fp8_widen_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "hwy/highway.h"
#include "src/kernel/tile_matmul-inl.h"
#include "src/kv/contiguous_pages.h"
#include "src/kv/kv_append.h"
#include "src/kv/token_scales.h"
#include "src/simd/fp8.h"
#include "src/simd/fp8_widen-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

// All 256 codes of the format, widened a vector at a time.
template <class Format>
void WidenAllCodes(float* out) {
  const hwy::HWY_NAMESPACE::ScalableTag<float> d;
  Format codes[256];
  for (int c = 0; c < 256; ++c) codes[c].bits = static_cast<uint8_t>(c);
  for (size_t i = 0; i < 256; i += hwy::HWY_NAMESPACE::Lanes(d)) {
    hwy::HWY_NAMESPACE::StoreU(WidenFp8(d, codes + i), d, out + i);
  }
}
void WidenE4M3ForTest(float* out) { WidenAllCodes<internal::Fp8E4M3>(out); }
void WidenE5M2ForTest(float* out) { WidenAllCodes<internal::Fp8E5M2>(out); }
void WidenE4M3FiniteForTest(float* out) { WidenAllCodes<internal::Fp8E4M3Finite>(out); }

void Fp8TileProductForTest(size_t rows, size_t n, size_t depth, const float* a,
                           const internal::Fp8E4M3* b, float* c) {
  TileMatMul(hwy::HWY_NAMESPACE::ScalableTag<float>(), rows, n, depth, a, depth, b, depth,
             c, n, /*accumulate=*/false);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "hwy/tests/hwy_gtest.h"
#include "tests/test_util.h"

namespace mha {
HWY_EXPORT(WidenE4M3ForTest);
HWY_EXPORT(WidenE5M2ForTest);
HWY_EXPORT(WidenE4M3FiniteForTest);
HWY_EXPORT(Fp8TileProductForTest);
}  // namespace mha

namespace {

using mha::internal::DecodeFp8;
using mha::internal::EncodeFp8;
using mha::internal::Fp8E4M3;
using mha::internal::Fp8E5M2;
using mha::internal::PanelOffset;

// The value of `code` from the format's definition: (-1)^s 2^(e - bias) (1 + m / 2^M),
// subnormal 2^(1 - bias) m / 2^M; e4m3fn's S.1111.111 is NaN, e5m2's top exponent
// is infinity (m = 0) or NaN.
template <class Format>
double Definition(int code) {
  constexpr int kM = Format::kMantissaBits, kE = 7 - kM;
  const int sign = code >> 7, e = (code >> kM) & ((1 << kE) - 1),
            m = code & ((1 << kM) - 1);
  const double s = sign ? -1.0 : 1.0;
  if ((code & 0x7F) == Format::kNaNCode && kM == 3) return std::nan("");
  if (kM == 2 && e == 31) return m == 0 ? s * INFINITY : std::nan("");
  if (e == 0) return s * std::ldexp(double(m), 1 - Format::kBias - kM);
  return s * std::ldexp(1.0 + double(m) / (1 << kM), e - Format::kBias);
}

bool SameFloat(double expected, float actual) {
  if (std::isnan(expected)) return std::isnan(actual);
  return double{actual} == expected && std::signbit(expected) == std::signbit(actual);
}

// finite_only: a widening for pages that hold no NaN code, checked on the others, to
// `widened_scale` of each value.
template <class Format>
void ExpectEveryCode(void (*widen)(float*), bool finite_only = false,
                     double widened_scale = 1.0) {
  float widened[256];
  widen(widened);
  for (int code = 0; code < 256; ++code) {
    const double expected = Definition<Format>(code);
    if (finite_only && std::isnan(expected)) continue;
    ASSERT_TRUE(SameFloat(expected * widened_scale, widened[code])) << "code " << code;
    ASSERT_TRUE(SameFloat(expected, DecodeFp8<Format>(uint8_t(code)))) << "code " << code;
    if (std::isfinite(expected)) {  // the cast gives every finite code back
      ASSERT_EQ(EncodeFp8<Format>(float(expected)), code) << "code " << code;
    }
  }
}

class Fp8 : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(Fp8);

TEST_P(Fp8, EveryCodeWidensToItsDefinedValue) {
  ExpectEveryCode<Fp8E4M3>(HWY_DYNAMIC_DISPATCH(mha::WidenE4M3ForTest));
  ExpectEveryCode<Fp8E5M2>(HWY_DYNAMIC_DISPATCH(mha::WidenE5M2ForTest));
  ExpectEveryCode<Fp8E4M3>(HWY_DYNAMIC_DISPATCH(mha::WidenE4M3FiniteForTest),
                           /*finite_only=*/true, 1.0 / 256);
}

TEST(Fp8Cast, RoundsToNearestEvenAndSaturates) {
  // e4m3: 1.0625 lies halfway between 1 (0x38) and 1.125 (0x39): to the even code.
  EXPECT_EQ(EncodeFp8<Fp8E4M3>(1.0625f), 0x38);
  EXPECT_EQ(EncodeFp8<Fp8E4M3>(1.1875f), 0x3A);  // between 0x39 and 0x3A: even
  EXPECT_EQ(EncodeFp8<Fp8E4M3>(1.07f), 0x39);
  EXPECT_EQ(EncodeFp8<Fp8E4M3>(std::ldexp(3.0f, -10)), 0x02);  // subnormal tie: even
  EXPECT_EQ(EncodeFp8<Fp8E4M3>(std::ldexp(1.0f, -12)), 0x00);  // below half a step
  EXPECT_EQ(EncodeFp8<Fp8E4M3>(-1e6f), 0xFE);                  // -448
  EXPECT_EQ(EncodeFp8<Fp8E4M3>(INFINITY), 0x7E);               // no infinity: 448
  EXPECT_EQ(EncodeFp8<Fp8E4M3>(460.0f), 0x7E);  // rounds past 448: saturates
  EXPECT_EQ(EncodeFp8<Fp8E4M3>(std::nanf("")) & 0x7F, 0x7F);
  EXPECT_EQ(EncodeFp8<Fp8E5M2>(1e6f), 0x7B);  // 57344
  EXPECT_EQ(EncodeFp8<Fp8E5M2>(-INFINITY), 0xFC);
  EXPECT_TRUE(std::isnan(DecodeFp8<Fp8E5M2>(EncodeFp8<Fp8E5M2>(std::nanf("")))));
  EXPECT_EQ(EncodeFp8<Fp8E5M2>(1.125f), 0x3C);  // halfway 1 and 1.25: even (1)
  EXPECT_EQ(EncodeFp8<Fp8E5M2>(1.375f), 0x3E);  // halfway 1.25 and 1.5: even (1.5)
}

// Rows coded into pages: with per-token scales, each element within half a step of
// its code at the row's scale (max |x| / 448 maps the row onto the format; the page
// stores it times 2^8, Fp8E4M3Finite's widening); scale free, the element cast as it
// is. A row with a NaN: zeros and a NaN scale.
TEST_P(Fp8, CacheRowsCodeWithAndWithoutScales) {
  using mha::internal::KvStorage;
  constexpr int64_t kHeadDim = 21, kPage = 16, kRows = 37;
  for (const KvStorage storage : {KvStorage::kFp8E4M3, KvStorage::kFp8E4M3ScaleFree}) {
    const bool scaled = storage == KvStorage::kFp8E4M3;
    mha::internal::ContiguousPages pages;
    pages.Reset(mha::internal::BlockLayout(kPage, 1, kHeadDim, storage), 1, 64);
    std::vector<float> keys = mha::testing::RandomFloats(kRows * kHeadDim, 3, 2.0f),
                       values = mha::testing::RandomFloats(kRows * kHeadDim, 4, 2.0f);
    keys[9 * kHeadDim + 4] = std::numeric_limits<float>::quiet_NaN();
    const mha::internal::KvPages p = pages(0, 0);
    ASSERT_EQ(p.key_page_bytes > p.key_codes_bytes, scaled);  // token scales
    mha::internal::PanelAppend append;
    append.keys = keys.data();
    append.values = values.data();
    append.key_stride = append.value_stride = kHeadDim;
    append.rows = kRows;
    append.head_dim = kHeadDim;
    append.pages = &p;
    append.first = 3;
    append.pad_to = append.first + kRows;
    mha::internal::AppendToPages(append);
    for (int64_t r = 0; r < kRows; ++r) {
      const int64_t t = r + append.first, page = t / kPage, offset = t % kPage;
      const float key_scale =
          scaled ? mha::internal::KeyTokenScales(p, page)[offset] / 256 : 1.0f;
      const float value_scale =
          scaled ? mha::internal::ValueTokenScales(p, page)[offset] / 256 : 1.0f;
      const auto* k = reinterpret_cast<const uint8_t*>(p.KeyPage(page));
      const auto* v = reinterpret_cast<const uint8_t*>(p.ValuePage(page));
      for (int64_t d = 0; d < kHeadDim; ++d) {
        const float key = DecodeFp8<Fp8E4M3>(k[PanelOffset(d, offset, kHeadDim)]);
        const float value = DecodeFp8<Fp8E4M3>(v[PanelOffset(offset, d, kPage)]);
        const float expected_value = values[r * kHeadDim + d];
        // Half a step of 3 mantissa bits, or of the subnormals' 2^-9.
        const auto half_step = [](float x, float scale) {
          return std::max(std::fabs(x) / 16.0f, std::ldexp(scale, -10)) + 1e-7f;
        };
        if (r == 9 && scaled) {
          ASSERT_TRUE(std::isnan(key_scale));
          ASSERT_EQ(key, 0.0f);
        } else if (r == 9 && d == 4) {
          ASSERT_TRUE(std::isnan(key));
        } else {
          const float expected_key = keys[r * kHeadDim + d];
          ASSERT_NEAR(key * key_scale, expected_key, half_step(expected_key, key_scale))
              << r << " " << d;
        }
        ASSERT_NEAR(value * value_scale, expected_value,
                    half_step(expected_value, value_scale))
            << r << " " << d;
      }
    }
  }
}

TEST_P(Fp8, TileProductWidensFp8Pages) {
  for (const size_t rows : {1, 5, 6, 7, 13}) {
    for (const size_t n : {16, 32, 80}) {
      for (const size_t depth : {1, 8, 21, 64}) {
        const std::vector<float> a =
            mha::testing::RandomFloats(rows * depth, uint32_t(rows * n + depth));
        std::vector<Fp8E4M3> b(depth * n);
        std::vector<double> b_value(depth * n);  // row-major
        for (size_t k = 0; k < depth; ++k) {
          for (size_t j = 0; j < n; ++j) {
            uint8_t code = static_cast<uint8_t>((k * 31 + j * 17) % 256);
            if ((code & 0x7F) == 0x7F) code = 0x3C;  // no NaN here
            b[PanelOffset(k, j, depth)].bits = code;
            b_value[k * n + j] = Definition<Fp8E4M3>(code);
          }
        }
        std::vector<float> c(rows * n);
        HWY_DYNAMIC_DISPATCH(mha::Fp8TileProductForTest)
        (rows, n, depth, a.data(), b.data(), c.data());
        mha::testing::ExpectTileProduct(a, b_value, c, rows, n, depth);
      }
    }
  }
}

}  // namespace
#endif  // HWY_ONCE

// int8 on every SIMD target this CPU supports, against plain loops: the projection
// inputs' quantisation (MaxAbs and QuantizeInt8 over odd counts, ties and clamping),
// an int8 cache's rows quantised into pages (AppendToPages: one scale per token,
// a row with a NaN marked by a NaN scale), and the tile product reading int8 K^T
// pages (tile_matmul-inl.h widening int8 as it loads) against the same product in
// double.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/kernels/int8_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "hwy/highway.h"
#include "src/cache/contiguous_pages.h"
#include "src/kernels/int8_quantize.h"
#include "src/kernels/kv_append.h"
#include "src/kernels/tile_matmul-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

void Int8TileProductForTest(size_t rows, size_t n, size_t depth, const float* a,
                            const int8_t* b, float* c) {
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
HWY_EXPORT(Int8TileProductForTest);
}  // namespace mha

namespace {

using mha::internal::PanelOffset;

class Int8 : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(Int8);

TEST_P(Int8, QuantizeRoundsToNearestAndClamps) {
  for (size_t count = 0; count <= 67; ++count) {
    std::vector<float> in = mha::testing::RandomFloats(count, uint32_t(count) + 1, 3.0f);
    if (count > 2) in[1] = 2.5f / 40.0f;  // a tie: 2.5 rounds to even, 2
    if (count > 3) in[2] = 1e6f;          // clamped to 127
    if (count > 4) in[3] = -1e6f;         // clamped to -127
    float expected_max = 0.0f;
    for (const float x : in) expected_max = std::max(expected_max, std::fabs(x));
    ASSERT_EQ(mha::internal::MaxAbs(in.data(), count), expected_max) << count;
    std::vector<int8_t> out(count + 1, 99);
    mha::internal::QuantizeInt8(in.data(), count, 40.0f, out.data());
    for (size_t i = 0; i < count; ++i) {
      const float q = std::clamp(std::nearbyint(in[i] * 40.0f), -127.0f, 127.0f);
      ASSERT_EQ(out[i], static_cast<int8_t>(q)) << "count " << count << " i " << i;
    }
    ASSERT_EQ(out[count], 99) << "written past the end, count " << count;
  }
}

TEST_P(Int8, CacheRowsQuantiseWithOneScalePerToken) {
  constexpr int64_t kHeadDim = 21, kPage = 16, kRows = 37;
  mha::internal::ContiguousPages pages;
  pages.Reset(
      mha::internal::BlockLayout(kPage, 1, kHeadDim, mha::internal::KvStorage::kInt8), 1,
      64);
  std::vector<float> keys = mha::testing::RandomFloats(kRows * kHeadDim, 3, 2.0f),
                     values = mha::testing::RandomFloats(kRows * kHeadDim, 4, 2.0f);
  std::fill(values.begin() + 5 * kHeadDim, values.begin() + 6 * kHeadDim, 0.0f);
  keys[9 * kHeadDim + 4] = std::numeric_limits<float>::quiet_NaN();
  const mha::internal::KvPages p = pages(0, 0);
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
    const float key_scale = p.KeyScales(page)[offset];
    const float value_scale = p.ValueScales(page)[offset];
    const auto* k = reinterpret_cast<const int8_t*>(p.KeyPage(page));
    const auto* v = reinterpret_cast<const int8_t*>(p.ValuePage(page));
    for (int64_t d = 0; d < kHeadDim; ++d) {
      const int8_t key = k[PanelOffset(d, offset, kHeadDim)];
      const int8_t value = v[PanelOffset(offset, d, kPage)];
      if (r == 9) {  // no int8 form: zeros and a NaN scale
        ASSERT_TRUE(std::isnan(key_scale));
        ASSERT_EQ(key, 0);
      } else {
        ASSERT_NEAR(key * key_scale, keys[r * kHeadDim + d], key_scale / 2 + 1e-6f)
            << r << " " << d;
      }
      ASSERT_NEAR(value * value_scale, values[r * kHeadDim + d], value_scale / 2 + 1e-6f)
          << r << " " << d;
    }
    if (r == 5) {  // an all-zero row
      ASSERT_EQ(value_scale, 0.0f);
    }
  }
}

TEST_P(Int8, TileProductWidensInt8Pages) {
  for (const size_t rows : {1, 5, 6, 7, 13}) {
    for (const size_t n : {16, 32, 64, 80}) {
      for (const size_t depth : {1, 8, 21, 64}) {
        const std::vector<float> a =
            mha::testing::RandomFloats(rows * depth, uint32_t(rows * n + depth));
        std::vector<int8_t> b(depth * n);
        std::vector<double> b_float(depth * n);  // row-major
        for (size_t k = 0; k < depth; ++k) {
          for (size_t j = 0; j < n; ++j) {
            const auto q = static_cast<int8_t>(int((k * 31 + j * 17) % 255) - 127);
            b[PanelOffset(k, j, depth)] = q;
            b_float[k * n + j] = q;
          }
        }
        std::vector<float> c(rows * n);
        HWY_DYNAMIC_DISPATCH(mha::Int8TileProductForTest)
        (rows, n, depth, a.data(), b.data(), c.data());
        mha::testing::ExpectTileProduct(a, b_float, c, rows, n, depth);
      }
    }
  }
}

}  // namespace
#endif  // HWY_ONCE

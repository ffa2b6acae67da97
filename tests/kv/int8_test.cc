// int8 on every SIMD target this CPU supports, against plain loops: the projection
// inputs' quantisation (MaxAbs and QuantizeInt8 over odd counts, ties and clamping),
// an int8 cache's rows quantised into pages (AppendToPages: one scale per token,
// a row with a NaN marked by a NaN scale; keys per channel through the residual),
// and the tile product reading int8 K^T pages (tile_matmul-inl.h widening int8 as it
// loads, rows scaled as they load for keys per channel) against the same product in
// double.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/kv/int8_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "hwy/highway.h"
#include "src/kernel/tile_matmul-inl.h"
#include "src/kv/channel_keys.h"
#include "src/kv/contiguous_pages.h"
#include "src/simd/int8_quantize.h"
#include "tests/kv/scaled_pages.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

void Int8TileProductForTest(size_t rows, size_t n, size_t depth, const float* a,
                            const int8_t* b, float* c) {
  TileMatMul(hwy::HWY_NAMESPACE::ScalableTag<float>(), rows, n, depth, a, depth, b, depth,
             c, n, /*accumulate=*/false);
}

// The same with B's rows scaled: one tile (row_scales[0], pages null) or 16-column
// pages side by side (pages[i], row_scales[i]), several to a strip where strips are
// wider (as the attention kernel), one product each otherwise.
void ScaledInt8TileProductForTest(size_t rows, size_t n, size_t depth, const float* a,
                                  const int8_t* b, const int8_t* const* pages,
                                  const float* const* row_scales, float* c) {
  const hwy::HWY_NAMESPACE::ScalableTag<float> d;
  constexpr size_t kPage = 16;
  const size_t count = pages ? n / kPage : 1,
               tile_bytes = internal::StoredRows<int8_t>(depth) * (pages ? kPage : n);
  const testing::ScaledPages laid(
      reinterpret_cast<const void* const*>(pages ? pages : &b), count, tile_bytes,
      row_scales, internal::StoredRows<int8_t>(depth));
  const std::vector<const int8_t*> tiles = laid.Pages<int8_t>();
  const RowScaledLoader<int8_t> loader{static_cast<int64_t>(tile_bytes)};
  if (!pages) {
    return TileMatMul(d, loader, rows, n, depth, a, depth, tiles[0], depth, c, n,
                      /*accumulate=*/false);
  }
  if (StripColumns(d) % kPage == 0) {
    return TilePagesMatMul(d, loader, rows, n, depth, a, depth, tiles.data(),
                           tiles.data(), kPage, depth, c, n, /*accumulate=*/false);
  }
  for (size_t i = 0; i < n / kPage; ++i) {
    TileMatMul(d, loader, rows, kPage, depth, a, depth, tiles[i], depth, c + i * kPage, n,
               /*accumulate=*/false);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "hwy/tests/hwy_gtest.h"
#include "tests/kv/append_rows.h"
#include "tests/test_util.h"

namespace mha {
HWY_EXPORT(Int8TileProductForTest);
HWY_EXPORT(ScaledInt8TileProductForTest);
}  // namespace mha

namespace {

using mha::internal::StoredRows;
using mha::internal::TileOffset;

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
  constexpr int64_t kFirst = 3;
  mha::testing::AppendRows(p, keys.data(), values.data(), kHeadDim, kFirst,
                           kFirst + kRows);
  for (int64_t r = 0; r < kRows; ++r) {
    const int64_t t = r + kFirst, page = t / kPage, offset = t % kPage;
    const float key_scale = mha::internal::KeyTokenScales(p, page)[offset];
    const float value_scale = mha::internal::ValueTokenScales(p, page)[offset];
    const auto* k = reinterpret_cast<const int8_t*>(p.KeyPage(page));
    const auto* v = reinterpret_cast<const int8_t*>(p.ValuePage(page));
    for (int64_t d = 0; d < kHeadDim; ++d) {
      const int8_t key = k[TileOffset<int8_t>(d, offset, kHeadDim)];
      const int8_t value = v[TileOffset<int8_t>(offset, d, kPage)];
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
        std::vector<int8_t> b(StoredRows<int8_t>(depth) * n);  // paired: even rows
        std::vector<double> b_float(depth * n);                // row-major
        for (size_t k = 0; k < depth; ++k) {
          for (size_t j = 0; j < n; ++j) {
            const auto q = static_cast<int8_t>(int((k * 31 + j * 17) % 255) - 127);
            b[TileOffset<int8_t>(k, j, depth)] = q;
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

TEST_P(Int8, TileProductScalesRowsAsTheyLoad) {
  for (const bool paged : {false, true}) {
    for (const size_t rows : {1, 4, 7}) {
      for (const size_t n : {16, 48, 128}) {
        for (const size_t depth : {1, 21, 64}) {
          const std::vector<float> a =
              mha::testing::RandomFloats(rows * depth, uint32_t(rows * n + depth));
          const size_t page_cols = paged ? 16 : n, count = n / page_cols;
          std::vector<std::vector<int8_t>> tiles(
              count, std::vector<int8_t>(StoredRows<int8_t>(depth) * page_cols));
          std::vector<std::vector<float>> scales(count);
          std::vector<const int8_t*> pages;
          std::vector<const float*> row_scales;
          std::vector<double> b_float(depth * n);  // row-major, scaled
          for (size_t i = 0; i < count; ++i) {
            // A scale for a paired tile's padding row too, as pages have (read, not
            // used: tile_loaders-inl.h).
            scales[i] = mha::testing::RandomFloats(StoredRows<int8_t>(depth),
                                                   uint32_t(i + 7), 0.1f);
            pages.push_back(tiles[i].data());
            row_scales.push_back(scales[i].data());
            for (size_t k = 0; k < depth; ++k) {
              for (size_t j = 0; j < page_cols; ++j) {
                const auto q =
                    static_cast<int8_t>(int((k * 31 + j * 17 + i) % 255) - 127);
                tiles[i][TileOffset<int8_t>(k, j, depth)] = q;
                b_float[k * n + i * page_cols + j] =
                    static_cast<double>(q) * scales[i][k];
              }
            }
          }
          std::vector<float> c(rows * n);
          HWY_DYNAMIC_DISPATCH(mha::ScaledInt8TileProductForTest)
          (rows, n, depth, a.data(), tiles[0].data(), paged ? pages.data() : nullptr,
           row_scales.data(), c.data());
          mha::testing::ExpectTileProduct(a, b_float, c, rows, n, depth);
        }
      }
    }
  }
}

// Keys per channel (channel_keys.h): each page's code x channel scale is within half
// a step of the key, the step set by the channel's largest finite entry over the
// page's tokens; a key with a NaN has token scale NaN and leaves the others alone;
// the residual holds the partial last page, and truncation rebuilds it.
class ChannelKeyPages {
 public:
  static constexpr int64_t kHeadDim = 21, kPage = 16;

  ChannelKeyPages() : residual_(kPage * kHeadDim) {
    storage_.Reset(mha::internal::BlockLayout(kPage, 1, kHeadDim,
                                              mha::internal::KvStorage::kInt8ChannelKeys),
                   1, 64);
    pages_ = storage_(0, 0);
    pages_.key_residual = residual_.data();
  }

  // Appends keys rows [first, end) (values alike).
  void Append(const std::vector<float>& keys, int64_t first, int64_t end) const {
    const float* rows = keys.data() + first * kHeadDim;
    mha::testing::AppendRows(pages_, rows, rows, kHeadDim, first, end);
  }

  // Page `page` holds keys rows [page * kPage, page * kPage + count), quantised per
  // channel; `nan_row` (if in the page) has no int8 form.
  void ExpectPage(const std::vector<float>& keys, int64_t page, int64_t count,
                  int64_t nan_row = -1) const {
    const auto* codes = reinterpret_cast<const int8_t*>(pages_.KeyPage(page));
    for (int64_t c = 0; c < kHeadDim; ++c) {
      float max_abs = 0.0f;
      for (int64_t t = page * kPage; t < page * kPage + count; ++t) {
        if (t != nan_row) max_abs = std::max(max_abs, std::fabs(keys[t * kHeadDim + c]));
      }
      const float scale = mha::internal::KeyChannelScales(pages_, page)[c];
      ASSERT_FLOAT_EQ(scale, max_abs / 127.0f) << "page " << page << " channel " << c;
      for (int64_t slot = 0; slot < count; ++slot) {
        const int64_t t = page * kPage + slot;
        const int8_t code = codes[TileOffset<int8_t>(c, slot, kHeadDim)];
        if (t == nan_row) {
          ASSERT_TRUE(std::isnan(mha::internal::KeyTokenScales(pages_, page)[slot]));
          ASSERT_EQ(code, 0);
          continue;
        }
        ASSERT_EQ(mha::internal::KeyTokenScales(pages_, page)[slot], 1.0f) << t;
        ASSERT_NEAR(code * scale, keys[t * kHeadDim + c], scale / 2 + 1e-6f)
            << "token " << t << " channel " << c;
      }
    }
  }

  const mha::internal::KvPages& pages() const { return pages_; }
  const std::vector<float>& residual() const { return residual_; }

 private:
  mha::internal::ContiguousPages storage_;
  std::vector<float> residual_;
  mha::internal::KvPages pages_;
};

TEST_P(Int8, CacheKeysQuantisePerChannelThroughTheResidual) {
  constexpr int64_t kHeadDim = ChannelKeyPages::kHeadDim;
  const ChannelKeyPages cache;
  std::vector<float> keys = mha::testing::RandomFloats(37 * kHeadDim, 5, 2.0f);
  for (int64_t t = 0; t < 37; ++t) keys[t * kHeadDim + 3] *= 40.0f;  // outlier channel
  keys[9 * kHeadDim + 4] = std::numeric_limits<float>::quiet_NaN();
  cache.Append(keys, 0, 20);  // a whole page, then 4 keys of the next
  cache.Append(keys, 20, 37);
  cache.ExpectPage(keys, 0, 16, /*nan_row=*/9);
  cache.ExpectPage(keys, 1, 16);
  cache.ExpectPage(keys, 2, 5);
  for (int64_t i = 0; i < 5 * kHeadDim; ++i) {
    ASSERT_EQ(cache.residual()[i], keys[32 * kHeadDim + i]) << i;
  }
  // Down within the partial page: requantised from the residual's first 3 keys.
  mha::internal::kInt8ChannelKeys.restore(cache.pages(), 37, 35, kHeadDim);
  cache.ExpectPage(keys, 2, 3);
  // Down into a whole page: its first 4 keys dequantised into the residual (within
  // the whole page's step).
  const float* page_scales = mha::internal::KeyChannelScales(cache.pages(), 1);
  const std::vector<float> steps(page_scales, page_scales + kHeadDim);
  mha::internal::kInt8ChannelKeys.restore(cache.pages(), 35, 20, kHeadDim);
  std::vector<float> kept(keys.begin(), keys.begin() + 20 * kHeadDim);
  for (int64_t i = 0; i < 4 * kHeadDim; ++i) {
    ASSERT_NEAR(cache.residual()[i], keys[16 * kHeadDim + i], steps[i % kHeadDim] / 2)
        << i;
    kept[16 * kHeadDim + i] = cache.residual()[i];
  }
  cache.ExpectPage(kept, 1, 4);
}

}  // namespace
#endif  // HWY_ONCE

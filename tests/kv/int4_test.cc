// int4 pages on every SIMD target this CPU supports, against plain loops: the tile
// product widening pairs of int4 rows as it loads them (tile_matmul-inl.h), its rows
// scaled (K^T pages, side by side or not) or scaled per (row, 32-column group) (V
// pages one below the other), and the zero-point terms (zero_points-inl.h), against
// double; and the cache's quantisation (keys per channel with minimums through the
// residual, values per token in groups), each code within half a step.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/kv/int4_test.cc"
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
#include "src/kv/int4_codes.h"
#include "src/kv/value_groups.h"
#include "src/simd/zero_points-inl.h"
#include "tests/kv/scaled_pages.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

using internal::Int4Pair;

// C[rows, n] = A[rows, depth] B, B's row k times row_scales[k]: one [depth, n] tile
// (pages null), or 16-column pages side by side (pages[i], row_scales[i]), several to
// a strip where strips are wider (as the attention kernel), one product each
// otherwise.
void ScaledInt4ProductForTest(size_t rows, size_t n, size_t depth, const float* a,
                              const Int4Pair* tile, const Int4Pair* const* pages,
                              const float* const* row_scales, float* c) {
  const hwy::HWY_NAMESPACE::ScalableTag<float> d;
  constexpr size_t kPage = 16;
  const size_t count = pages ? n / kPage : 1;
  const size_t tile_bytes = (depth + 1) / 2 * (pages ? kPage : n);
  const testing::ScaledPages laid(
      reinterpret_cast<const void* const*>(pages ? pages : &tile), count, tile_bytes,
      row_scales, depth + 1);  // an odd last row's pair reads one more
  const std::vector<const Int4Pair*> tiles = laid.Pages<Int4Pair>();
  const RowScaledLoader<Int4Pair> loader{static_cast<int64_t>(tile_bytes)};
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

void KeyZeroPointsForTest(const float* query, size_t query_stride, size_t rows,
                          const float* mins, size_t head_dim, float* scores,
                          size_t stride, size_t n) {
  AddKeyZeroPoints(hwy::HWY_NAMESPACE::ScalableTag<float>(), query, query_stride, rows,
                   mins, head_dim, scores, stride, n);
}

void ValueZeroPointsForTest(const float* probabilities, size_t stride, size_t rows,
                            const float* const* page_mins, size_t page_size, size_t n,
                            float* context, size_t dim) {
  AddValueZeroPoints(hwy::HWY_NAMESPACE::ScalableTag<float>(), probabilities, stride,
                     rows, page_mins, page_size, n, internal::kValueGroup, context, dim);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "hwy/tests/hwy_gtest.h"
#include "tests/kv/append_rows.h"
#include "tests/test_util.h"

namespace mha {
HWY_EXPORT(ScaledInt4ProductForTest);
HWY_EXPORT(KeyZeroPointsForTest);
HWY_EXPORT(ValueZeroPointsForTest);
}  // namespace mha

namespace {

using mha::internal::GetInt4;
using mha::internal::Int4Pair;
using mha::internal::SetInt4;

class Int4 : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(Int4);

// Code (k, j) of page i of a test's tiles: every value 0..15, rows and columns apart.
uint8_t TestCode(size_t k, size_t j, size_t i) {
  return static_cast<uint8_t>((k * 7 + j * 3 + i) % 16);
}

TEST_P(Int4, TileProductWidensPairsScalingRows) {
  for (const bool paged : {false, true}) {
    for (const size_t rows : {1, 4, 7}) {
      for (const size_t n : {16, 48, 128}) {
        for (const size_t depth : {1, 21, 64}) {  // odd: a last row without its pair
          const std::vector<float> a =
              mha::testing::RandomFloats(rows * depth, uint32_t(rows * n + depth));
          const size_t page_cols = paged ? 16 : n, count = n / page_cols;
          const size_t tile_bytes = (depth + 1) / 2 * page_cols;
          std::vector<std::vector<uint8_t>> tiles(count,
                                                  std::vector<uint8_t>(tile_bytes));
          std::vector<std::vector<float>> scales(count);
          std::vector<const Int4Pair*> pages;
          std::vector<const float*> row_scales;
          std::vector<double> b(depth * n);  // row-major, scaled
          for (size_t i = 0; i < count; ++i) {
            scales[i] = mha::testing::RandomFloats(depth + 1, uint32_t(i + 7), 0.1f);
            pages.push_back(reinterpret_cast<const Int4Pair*>(tiles[i].data()));
            row_scales.push_back(scales[i].data());
            for (size_t k = 0; k < depth; ++k) {
              for (size_t j = 0; j < page_cols; ++j) {
                SetInt4(tiles[i].data(), k, j, depth, TestCode(k, j, i));
                b[k * n + i * page_cols + j] = TestCode(k, j, i) * double{scales[i][k]};
              }
            }
          }
          std::vector<float> c(rows * n);
          HWY_DYNAMIC_DISPATCH(mha::ScaledInt4ProductForTest)
          (rows, n, depth, a.data(), pages[0], paged ? pages.data() : nullptr,
           row_scales.data(), c.data());
          mha::testing::ExpectTileProduct(a, b, c, rows, n, depth);
        }
      }
    }
  }
}

// Every row count around the four summed side by side; scores and context rows
// padded past their ends, which must stay as they were.
TEST_P(Int4, ZeroPointTermsMatchTheirSums) {
  for (const size_t rows : {1, 3, 4, 5, 9}) {
    for (const size_t head_dim : {1, 5, 16, 21, 64}) {  // any length: a query row's
      const size_t query_stride = head_dim + 3, stride = 40, n = 32;
      const std::vector<float> q = mha::testing::RandomFloats(rows * query_stride, 3);
      const std::vector<float> mins = mha::testing::RandomFloats(head_dim, 4);
      std::vector<float> scores(rows * stride, 1.0f);
      HWY_DYNAMIC_DISPATCH(mha::KeyZeroPointsForTest)
      (q.data(), query_stride, rows, mins.data(), head_dim, scores.data(), stride, n);
      for (size_t i = 0; i < rows; ++i) {
        double dot = 0.0;
        for (size_t c = 0; c < head_dim; ++c)
          dot += double{q[i * query_stride + c]} * mins[c];
        for (size_t t = 0; t < stride; ++t) {
          ASSERT_NEAR(scores[i * stride + t], t < n ? 1.0 + dot : 1.0, 1e-5)
              << "rows " << rows << " head_dim " << head_dim << " row " << i;
        }
      }
    }
    // A key tile of 64 keys over pages of 16 or one of 64, each page's groups
    // page_size apart.
    for (const size_t page_size : {16, 64}) {
      for (const size_t dim : {16, 48, 128}) {
        constexpr size_t kKeys = 64, kStride = 72;
        const size_t groups = (dim + 31) / 32, pages = kKeys / page_size;
        const std::vector<float> p = mha::testing::RandomFloats(rows * kStride, 5);
        const std::vector<float> mins =
            mha::testing::RandomFloats(pages * groups * page_size, 6);
        std::vector<const float*> page_mins;
        for (size_t i = 0; i < pages; ++i)
          page_mins.push_back(mins.data() + i * groups * page_size);
        std::vector<float> context(rows * dim + 8, 2.0f);
        HWY_DYNAMIC_DISPATCH(mha::ValueZeroPointsForTest)
        (p.data(), kStride, rows, page_mins.data(), page_size, kKeys, context.data(),
         dim);
        for (size_t i = 0; i < rows; ++i) {
          for (size_t c = 0; c < dim; ++c) {
            double term = 0.0;
            for (size_t t = 0; t < kKeys; ++t) {
              term += double{p[i * kStride + t]} *
                      page_mins[t / page_size][c / 32 * page_size + t % page_size];
            }
            ASSERT_NEAR(context[i * dim + c], 2.0 + term, 1e-5)
                << "rows " << rows << " page_size " << page_size << " dim " << dim
                << " row " << i << " channel " << c;
          }
        }
        for (size_t c = rows * dim; c < context.size(); ++c) ASSERT_EQ(context[c], 2.0f);
      }
    }
  }
}

// Value channel c of token t as the kernel sees it.
float StoredValue(const mha::internal::KvPages& pages, int64_t t, int64_t c) {
  const int64_t page = t / pages.page_size, slot = t % pages.page_size;
  const int64_t at = c / int64_t{mha::internal::kValueGroup} * pages.page_size + slot;
  const uint8_t code =
      GetInt4(pages.ValuePage(page), size_t(slot), size_t(c), size_t(pages.page_size));
  return (code * mha::internal::ValueGroupScales(pages, page)[at] +
          mha::internal::ValueGroupMins(pages, page)[at]) *
         mha::internal::ValueTokenScales(pages, page)[slot];
}

// An int4 cache's pages (head_dim 40: a value group of 32 channels and one of 8,
// padded to 16): each stored key and value within half its step, a NaN marked by a
// NaN token scale, the partial last page's keys in the residual.
TEST_P(Int4, CacheQuantisesKeysPerChannelAndValuesPerGroup) {
  constexpr int64_t kHeadDim = 40, kPage = 16, kRows = 37;
  mha::internal::ContiguousPages storage;
  storage.Reset(
      mha::internal::BlockLayout(kPage, 1, kHeadDim, mha::internal::KvStorage::kInt4), 1,
      64);
  mha::internal::KvPages pages = storage(0, 0);
  std::vector<float> residual(kPage * kHeadDim);
  pages.key_residual = residual.data();
  std::vector<float> keys = mha::testing::RandomFloats(kRows * kHeadDim, 3, 2.0f),
                     values = mha::testing::RandomFloats(kRows * kHeadDim, 4, 2.0f);
  for (int64_t t = 0; t < kRows; ++t) keys[t * kHeadDim + 3] += 30.0f;  // offset channel
  keys[9 * kHeadDim + 4] = std::numeric_limits<float>::quiet_NaN();
  values[20 * kHeadDim + 35] = std::numeric_limits<float>::infinity();
  for (const auto& [first, end] : {std::pair<int64_t, int64_t>{0, 20}, {20, kRows}}) {
    mha::testing::AppendRows(pages, keys.data() + first * kHeadDim,
                             values.data() + first * kHeadDim, kHeadDim, first, end);
  }
  std::vector<float> key(kHeadDim);
  for (int64_t t = 0; t < kRows; ++t) {
    const int64_t page = t / kPage, slot = t % kPage;
    mha::internal::kInt4ChannelKeys.read_key(pages, t, kRows, kHeadDim, key.data());
    for (int64_t c = 0; c < kHeadDim; ++c) {
      const bool residual_page = page == kRows / kPage;  // exact there
      const float key_step =
          residual_page ? 0.0f : mha::internal::KeyChannelScales(pages, page)[c];
      if (t == 9 && !residual_page) {
        ASSERT_TRUE(std::isnan(key[c])) << c;
      } else {
        ASSERT_NEAR(key[c], keys[t * kHeadDim + c], key_step / 2 + 1e-5f)
            << "token " << t << " channel " << c;
      }
      const float value = StoredValue(pages, t, c);
      if (t == 20) {
        ASSERT_TRUE(std::isnan(value)) << c;
        continue;
      }
      const float value_step = mha::internal::ValueGroupScales(
          pages, page)[c / mha::internal::kValueGroup * kPage + slot];
      ASSERT_NEAR(value, values[t * kHeadDim + c], value_step / 2 + 1e-5f)
          << "token " << t << " channel " << c;
    }
  }
  for (int64_t i = 0; i < 5 * kHeadDim; ++i) {
    ASSERT_EQ(residual[i], keys[32 * kHeadDim + i]) << i;
  }
  // The partial page's codes too: dequantised, within its channels' steps.
  const uint8_t* codes = pages.KeyPage(2);
  for (int64_t c = 0; c < kHeadDim; ++c) {
    for (int64_t slot = 0; slot < 5; ++slot) {
      const float scale = mha::internal::KeyChannelScales(pages, 2)[c];
      const float x = GetInt4(codes, c, slot, kHeadDim) * scale +
                      mha::internal::KeyChannelMins(pages, 2)[c];
      ASSERT_NEAR(x, keys[(32 + slot) * kHeadDim + c], scale / 2 + 1e-5f) << c;
    }
  }
}

}  // namespace
#endif  // HWY_ONCE

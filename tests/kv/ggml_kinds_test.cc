// ggml's block kinds (src/kv/kinds/q8_0.cc, q4_0.cc): a cache's codes and fp16 scales are
// those of ggml's reference quantisers, block for block, re-derived here from their
// spec (ggml-common.h's block layouts, quantize_row_*_ref): keys (K^T columns) and
// values (V rows, a partial last block zero-padded), a block with a NaN, an all-zero
// block.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "src/kv/contiguous_pages.h"
#include "src/kv/group_scales.h"
#include "src/kv/int4_codes.h"
#include "tests/kv/append_rows.h"
#include "tests/test_util.h"

namespace {

using mha::internal::Fp16FromFloat;
using mha::internal::KvPages;
using mha::internal::KvStorage;
using mha::internal::TileOffset;

constexpr int64_t kPage = 16, kHeadDim = 72, kRows = 21;  // 72: 2 blocks and 8

// ggml's block_q8_0: the fp16 bits of d, then 32 codes.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};

// ggml's block_q4_0: the fp16 bits of d, then 32 codes 0..15 (ggml packs channels j
// and j + 16 into byte j; here one code per entry).
struct BlockQ4_0 {
  uint16_t d;
  uint8_t q[32];
};

// quantize_row_q4_0_ref of one block (n <= 32 values, zeros after): m the value of
// largest magnitude (the first), d = m / -8, q = min(15, (int8_t)(x * (1 / d) + 8.5)).
BlockQ4_0 ReferenceQ4_0(const float* x, int64_t n) {
  if (!std::all_of(x, x + n, [](float v) { return std::isfinite(v); })) return {};
  float amax = 0.0f, max = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) amax = std::fabs(x[j]), max = x[j];
  }
  const float d = max / -8, id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ4_0 block{Fp16FromFloat(d), {}};
  for (int64_t j = 0; j < 32; ++j) {
    const float v = j < n ? x[j] * id : 0.0f;
    block.q[j] = static_cast<uint8_t>(
        std::min(15, static_cast<int>(static_cast<int8_t>(v + 8.5f))));
  }
  return block;
}

// quantize_row_q8_0_ref of one block (n <= 32 values, zeros after): d = amax / 127,
// q = roundf(x * (1 / d)).
BlockQ8_0 ReferenceQ8_0(const float* x, int64_t n) {
  if (!std::all_of(x, x + n, [](float v) { return std::isfinite(v); })) return {};
  float amax = 0.0f;
  for (int64_t j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ8_0 block{Fp16FromFloat(d), {}};
  for (int64_t j = 0; j < n; ++j)
    block.qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  return block;
}

// Pages of `kind` holding kRows tokens of keys and values: token 4's key with a NaN
// in block 1, token 7's value zeros, token 9's key with ties.
struct Filled {
  mha::internal::ContiguousPages pages;
  std::vector<float> keys, values;
  KvPages p;

  explicit Filled(KvStorage kind)
      : keys(mha::testing::RandomFloats(kRows * kHeadDim, 3, 2.0f)),
        values(mha::testing::RandomFloats(kRows * kHeadDim, 4, 2.0f)) {
    pages.Reset(mha::internal::BlockLayout(kPage, 1, kHeadDim, kind), 1, 64);
    keys[4 * kHeadDim + 40] = std::numeric_limits<float>::quiet_NaN();
    // Token 9's first key block: d = 1 exactly, and halves that round away from 0.
    keys[9 * kHeadDim] = 127.0f, keys[9 * kHeadDim + 1] = 2.5f;
    keys[9 * kHeadDim + 2] = -2.5f;
    keys[9 * kHeadDim + 3] = -127.0f;  // q4_0: the first of equal magnitudes sets d
    std::fill(values.begin() + 7 * kHeadDim, values.begin() + 8 * kHeadDim, 0.0f);
    p = pages(0, 0);
    mha::testing::AppendRows(p, keys.data(), values.data(), kHeadDim, 0, kRows);
  }
};

TEST(GgmlKinds, Q8_0HoldsGgmlsBlocks) {
  const Filled cache(KvStorage::kQ8_0);
  const auto* tie = reinterpret_cast<const int8_t*>(cache.p.KeyPage(0));
  EXPECT_EQ(tie[TileOffset<int8_t>(1, 9, kHeadDim)], 3);  // roundf: halves away from zero
  EXPECT_EQ(tie[TileOffset<int8_t>(2, 9, kHeadDim)], -3);
  const int64_t padded =
      cache.p.padded_value_head_dim;  // 80: the last block's 8 + 8 zeros
  for (int64_t t = 0; t < kRows; ++t) {
    const int64_t page = t / kPage, slot = t % kPage;
    const auto* k = reinterpret_cast<const int8_t*>(cache.p.KeyPage(page));
    const auto* v = reinterpret_cast<const int8_t*>(cache.p.ValuePage(page));
    for (int64_t b = 0; b * 32 < padded; ++b) {
      const int64_t first = b * 32;
      if (first < kHeadDim) {
        const BlockQ8_0 key = ReferenceQ8_0(&cache.keys[t * kHeadDim + first],
                                            std::min<int64_t>(32, kHeadDim - first));
        const uint16_t d = mha::internal::KeyGroupScales(cache.p, page)[b * kPage + slot];
        if (t == 4 && b == 1) {  // a NaN: no q8_0 form
          ASSERT_TRUE(std::isnan(mha::internal::FloatFromFp16(d)));
        } else {
          ASSERT_EQ(d, key.d) << "key " << t << " block " << b;
        }
        for (int64_t j = 0; j < std::min<int64_t>(32, kHeadDim - first); ++j) {
          ASSERT_EQ(k[TileOffset<int8_t>(first + j, slot, kHeadDim)],
                    t == 4 && b == 1 ? 0 : key.qs[j])
              << "key " << t << " channel " << first + j;
        }
      }
      const BlockQ8_0 value = ReferenceQ8_0(&cache.values[t * kHeadDim + first],
                                            std::clamp<int64_t>(kHeadDim - first, 0, 32));
      ASSERT_EQ(mha::internal::ValueGroupScales(cache.p, page)[b * kPage + slot], value.d)
          << "value " << t << " block " << b;
      for (int64_t j = 0; j < 32 && first + j < padded; ++j) {
        ASSERT_EQ(v[TileOffset<int8_t>(slot, first + j, kPage)], value.qs[j])
            << "value " << t << " channel " << first + j;
      }
    }
  }
}

TEST(GgmlKinds, Q4_0HoldsGgmlsBlocks) {
  const Filled cache(KvStorage::kQ4_0);
  const int64_t padded = cache.p.padded_value_head_dim;
  EXPECT_EQ(mha::internal::KeyGroupScales(cache.p, 0)[9], Fp16FromFloat(-127.0f / 8));
  for (int64_t t = 0; t < kRows; ++t) {
    const int64_t page = t / kPage, slot = t % kPage;
    const uint8_t* k = cache.p.KeyPage(page);
    const uint8_t* v = cache.p.ValuePage(page);
    for (int64_t b = 0; b * 32 < padded; ++b) {
      const int64_t first = b * 32;
      if (first < kHeadDim) {
        const int64_t n = std::min<int64_t>(32, kHeadDim - first);
        const BlockQ4_0 key = ReferenceQ4_0(&cache.keys[t * kHeadDim + first], n);
        const uint16_t d = mha::internal::KeyGroupScales(cache.p, page)[b * kPage + slot];
        const bool nan = t == 4 && b == 1;  // no q4_0 form: codes 8 (0), scale NaN
        if (nan) {
          ASSERT_TRUE(std::isnan(mha::internal::FloatFromFp16(d)));
        } else {
          ASSERT_EQ(d, key.d) << "key " << t << " block " << b;
        }
        for (int64_t j = 0; j < n; ++j) {
          ASSERT_EQ(mha::internal::GetInt4(k, first + j, slot, kHeadDim),
                    nan ? 8 : key.q[j])
              << "key " << t << " channel " << first + j;
        }
      }
      const BlockQ4_0 value = ReferenceQ4_0(&cache.values[t * kHeadDim + first],
                                            std::clamp<int64_t>(kHeadDim - first, 0, 32));
      ASSERT_EQ(mha::internal::ValueGroupScales(cache.p, page)[b * kPage + slot], value.d)
          << "value " << t << " block " << b;
      for (int64_t j = 0; j < 32 && first + j < padded; ++j) {
        ASSERT_EQ(mha::internal::GetInt4(v, slot, first + j, kPage), value.q[j])
            << "value " << t << " channel " << first + j;
      }
    }
  }
}

}  // namespace

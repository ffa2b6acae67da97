// query_codes-inl.h on every SIMD target this CPU supports, against a plain loop:
// codes and scale over counts that end in a partial vector, every code limit the
// kernel uses (int8's 127 to 16 bits), ties (to even), the row's largest entry on
// its limit, quantising in place, rows of zeros, rows whose largest entry is
// near the smallest normal float, and rows with an infinity or a NaN (codes 0, scale
// NaN); and the weights' codes (QuantizeWeightRow) against their own plain loop.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/simd/query_codes_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "hwy/highway.h"
#include "src/simd/query_codes-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

float QuantizeQueryRowForTest(const float* in, size_t count, int32_t limit,
                              float* code_values, int16_t* codes) {
  return QuantizeQueryRow(hwy::HWY_NAMESPACE::ScalableTag<float>(), in, count, limit,
                          code_values, codes);
}

float QuantizeWeightRowForTest(const float* in, size_t count, int32_t limit,
                               int16_t* codes) {
  return QuantizeWeightRow(hwy::HWY_NAMESPACE::ScalableTag<float>(), in, count, limit,
                           codes);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "hwy/tests/hwy_gtest.h"
#include "src/kernel/int8_tile_matmul.h"
#include "tests/test_util.h"

namespace mha {
HWY_EXPORT(QuantizeQueryRowForTest);
HWY_EXPORT(QuantizeWeightRowForTest);
}  // namespace mha

namespace {

struct Quantised {
  std::vector<int16_t> codes;
  std::vector<float> code_values;
  float scale;
};

Quantised Quantise(const std::vector<float>& row, int32_t limit) {
  Quantised q{std::vector<int16_t>(row.size() + 1, 99),
              std::vector<float>(row.size() + 1, 99.0f), 0.0f};
  q.scale = HWY_DYNAMIC_DISPATCH(mha::QuantizeQueryRowForTest)(
      row.data(), row.size(), limit, q.code_values.data(), q.codes.data());
  return q;
}

// The definition, one value at a time.
int16_t ExpectedCode(float x, float max, int32_t limit) {
  if (!(max > 0.0f) || !std::isfinite(max)) return 0;
  const float top = static_cast<float>(limit);
  return static_cast<int16_t>(std::clamp(std::nearbyint(x / max * top), -top, top));
}

class QueryCodes : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(QueryCodes);

TEST_P(QueryCodes, RoundToNearestWithinTheLimitAndScaleByTheLargestEntry) {
  int ties = 0;
  for (const int32_t limit : {int32_t{127}, mha::internal::QueryCodeLimit(128),
                              mha::internal::QueryCodeLimit(576), int32_t{32767}}) {
    for (const size_t count : {1, 7, 16, 33, 64, 100, 128}) {
      std::vector<float> row =
          mha::testing::RandomFloats(count, uint32_t(count + limit), 3.0f);
      float max = 0.0f;
      for (float x : row) max = std::max(max, std::fabs(x));
      // A tie: a float within 32 ulps of 2.5 * max / limit whose x / max * limit
      // rounds to exactly 2.5, where there is one.
      bool tie = false;
      if (count > 2) {
        const float near = 2.5f * max / static_cast<float>(limit);
        float down = near, up = near;
        for (int step = 0; step < 32 && !tie; ++step) {
          for (const float x : {down, up}) {
            if (!tie && x / max * static_cast<float>(limit) == 2.5f) {
              tie = true;
              row[1] = x;
            }
          }
          down = std::nextafter(down, 0.0f);
          up = std::nextafter(up, max);
        }
        ties += tie;
      }
      const Quantised q = Quantise(row, limit);
      EXPECT_EQ(q.scale, max / static_cast<float>(limit));
      for (size_t i = 0; i < count; ++i) {
        const int16_t expected = ExpectedCode(row[i], max, limit);
        ASSERT_EQ(q.codes[i], expected)
            << "limit " << limit << " count " << count << " i " << i;
        ASSERT_EQ(q.code_values[i], static_cast<float>(expected));
        if (std::fabs(row[i]) == max) {
          ASSERT_EQ(std::abs(q.codes[i]), limit);
        }
      }
      if (tie) {
        EXPECT_EQ(q.codes[1], 2) << "a tie rounds to even";
      }
      EXPECT_EQ(q.codes[count], 99) << "wrote past the row";
      EXPECT_EQ(q.code_values[count], 99.0f) << "wrote past the row";
    }
  }
  EXPECT_GT(ties, 10) << "ties tried";
}

TEST_P(QueryCodes, QuantiseInPlace) {
  std::vector<float> row = mha::testing::RandomFloats(37, 5);
  const Quantised apart = Quantise(row, 1032);
  std::vector<int16_t> codes(row.size());
  const float scale = HWY_DYNAMIC_DISPATCH(mha::QuantizeQueryRowForTest)(
      row.data(), row.size(), 1032, row.data(), codes.data());
  EXPECT_EQ(scale, apart.scale);
  for (size_t i = 0; i < row.size(); ++i) {
    ASSERT_EQ(row[i], apart.code_values[i]) << i;
    ASSERT_EQ(codes[i], apart.codes[i]) << i;
  }
}

TEST_P(QueryCodes, ZerosTinyAndNonFiniteRows) {
  for (const size_t count : {5, 16, 40}) {
    const Quantised zeros = Quantise(std::vector<float>(count, 0.0f), 1032);
    EXPECT_EQ(zeros.scale, 0.0f);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(zeros.codes[i], 0);

    // Largest entry near the smallest normal float, where limit / max overflows:
    // codes still span the limit.
    std::vector<float> tiny(count, 0.0f);
    tiny[count - 1] = -1e-38f;
    const Quantised small = Quantise(tiny, 1032);
    EXPECT_EQ(small.codes[count - 1], -1032);
    EXPECT_EQ(small.codes[0], 0);
    EXPECT_GT(small.scale, 0.0f);

    for (const float bad :
         {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
          std::numeric_limits<float>::quiet_NaN()}) {
      for (const size_t at : {size_t{0}, count - 1}) {
        std::vector<float> row = mha::testing::RandomFloats(count, uint32_t(count));
        row[at] = bad;
        const Quantised q = Quantise(row, 1032);
        EXPECT_TRUE(std::isnan(q.scale)) << bad << " at " << at;
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(q.codes[i], 0) << bad << " " << i;
      }
    }
  }
}

// Weights (probabilities times value scales: >= 0, or of either sign where q4_0's
// scales are negative) to codes, one value at a time: w x (limit / max |w|) rounded
// to nearest, or w / max x limit where limit / max overflows; 99 past the row stays.
void ExpectWeightCodes(const std::vector<float>& weights, int32_t limit) {
  std::vector<int16_t> codes(weights.size() + 1, 99);
  const float scale = HWY_DYNAMIC_DISPATCH(mha::QuantizeWeightRowForTest)(
      weights.data(), weights.size(), limit, codes.data());
  float max = 0.0f;
  for (const float w : weights) max = std::max(max, std::fabs(w));
  ASSERT_GT(max, 0.0f) << "a zero row has no codes to compare";
  const float top = static_cast<float>(limit), factor = top / max;
  EXPECT_EQ(scale, max / top);
  for (size_t i = 0; i < weights.size(); ++i) {
    const float x = std::isinf(factor) ? weights[i] / max * top : weights[i] * factor;
    const int16_t expected = static_cast<int16_t>(std::nearbyint(x));
    ASSERT_GE(expected, -limit);
    ASSERT_LE(expected, limit);
    ASSERT_EQ(codes[i], expected) << "limit " << limit << " weight " << i << " of "
                                  << weights.size() << ": " << weights[i];
  }
  EXPECT_EQ(codes[weights.size()], 99) << "wrote past the row";
}

TEST_P(QueryCodes, WeightCodesSpanTheLimit) {
  uint32_t seed = 40;
  for (const int32_t limit : {int32_t{127}, mha::internal::kProbabilityCodeLimit}) {
    for (const size_t count : {1, 7, 16, 33, 256}) {
      for (const bool either_sign : {false, true}) {
        std::vector<float> weights = mha::testing::RandomFloats(count, ++seed);
        for (float& w : weights) w = (either_sign ? w : std::fabs(w)) * 3.0f;
        if (count > 1) weights[count / 2] = 0.0f;  // a masked key (zero rows: below)
        ExpectWeightCodes(weights, limit);
        // A largest weight near the smallest normal float: limit / max overflows.
        for (float& w : weights) w *= 1e-38f;
        ExpectWeightCodes(weights, limit);
      }
    }
  }
  // Ties: w x factor exactly k + 0.5 rounds to the even k.
  std::vector<int16_t> codes(4);
  const float ties[] = {2.5f, 3.5f, 0.5f, 127.0f};  // max 127, limit 127: factor 1
  HWY_DYNAMIC_DISPATCH(mha::QuantizeWeightRowForTest)(ties, 4, 127, codes.data());
  EXPECT_EQ(codes[0], 2);
  EXPECT_EQ(codes[1], 4);
  EXPECT_EQ(codes[2], 0);
  EXPECT_EQ(codes[3], 127);
}

TEST_P(QueryCodes, WeightRowsOfZerosOrNaN) {
  for (const size_t count : {5, 16, 40}) {
    std::vector<int16_t> codes(count, 99);
    const std::vector<float> zeros(count, 0.0f);
    EXPECT_EQ(HWY_DYNAMIC_DISPATCH(mha::QuantizeWeightRowForTest)(zeros.data(), count,
                                                                  32767, codes.data()),
              0.0f);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(codes[i], 0);
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity()}) {
      std::vector<float> weights(count, 0.25f);
      weights[count - 1] = bad;
      std::fill(codes.begin(), codes.end(), int16_t{99});
      EXPECT_TRUE(std::isnan(HWY_DYNAMIC_DISPATCH(mha::QuantizeWeightRowForTest)(
          weights.data(), count, 32767, codes.data())))
          << bad;
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(codes[i], 0) << bad << " " << i;
    }
  }
}

}  // namespace
#endif  // HWY_ONCE

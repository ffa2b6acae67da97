// logits-inl.h on every SIMD target this CPU supports, against plain double-precision
// loops: soft-capping over many magnitudes (Highway's Tanh is within 4 ULP) and ALiBi's
// bias for keys before, at and after the query, over every whole-vector length.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/kernel/logits_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cmath>
#include <vector>

#include "hwy/highway.h"
#include "src/kernel/logits-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

void SoftCapForTest(float* row, size_t n, float cap) {
  SoftCap(hwy::HWY_NAMESPACE::ScalableTag<float>(), row, n, cap);
}

void AddAlibiForTest(float* row, size_t n, float slope, int64_t distance) {
  AddAlibi(hwy::HWY_NAMESPACE::ScalableTag<float>(), row, n, slope, distance);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "hwy/tests/hwy_gtest.h"
#include "tests/test_util.h"

namespace mha {
HWY_EXPORT(SoftCapForTest);
HWY_EXPORT(AddAlibiForTest);
}  // namespace mha

namespace {

// Rows are whole panels of 16 floats: a whole number of vectors on every target.
constexpr size_t kPanel = 16;

class Logits : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(Logits);

TEST_P(Logits, SoftCapIsCapTimesTanh) {
  for (size_t n = kPanel; n <= 8 * kPanel; n += kPanel) {
    for (const float cap : {0.5f, 5.0f, 50.0f}) {
      std::vector<float> row =
          mha::testing::RandomFloats(n, static_cast<uint32_t>(n), 4 * cap);
      row[0] = 1e30f;  // saturates at cap
      row[1] = -1e30f;
      row[2] = 0.0f;
      const std::vector<float> x = row;
      HWY_DYNAMIC_DISPATCH(mha::SoftCapForTest)(row.data(), n, cap);
      for (size_t k = 0; k < n; ++k) {
        const double expected = cap * std::tanh(double{x[k]} / cap);
        ASSERT_NEAR(row[k], expected, 1e-6 * cap)
            << "n " << n << " cap " << cap << " k " << k;
      }
    }
  }
}

TEST_P(Logits, AddAlibiAddsSlopeTimesDistance) {
  for (size_t n = kPanel; n <= 8 * kPanel; n += kPanel) {
    for (const int64_t distance : {int64_t{-300}, int64_t{-5}, int64_t{0}, int64_t{17}}) {
      const float slope = 0.0625f;
      std::vector<float> row =
          mha::testing::RandomFloats(n, static_cast<uint32_t>(n + 1));
      const std::vector<float> x = row;
      HWY_DYNAMIC_DISPATCH(mha::AddAlibiForTest)(row.data(), n, slope, distance);
      for (size_t k = 0; k < n; ++k) {
        const double expected = x[k] + double{slope} * double(distance + int64_t(k));
        ASSERT_NEAR(row[k], expected, 1e-6 * (1.0 + std::fabs(expected)))
            << "n " << n << " distance " << distance << " k " << k;
      }
    }
  }
}

}  // namespace
#endif  // HWY_ONCE

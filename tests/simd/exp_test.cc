// exp-inl.h on every SIMD target this CPU supports, against double-precision exp:
// a dense sweep of [-104, 8] (every reduced argument's interval many times over,
// the positive arguments a lagging running max gives, the cut-off at -86 and the
// range below it); exactly 1 at 0 and 0 at -inf.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/simd/exp_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "src/simd/exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

// x[0, n) to exp(x) in place; n a whole number of vectors.
void SoftmaxExpForTest(float* x, size_t n) {
  const hwy::HWY_NAMESPACE::ScalableTag<float> d;
  for (size_t i = 0; i < n; i += hwy::HWY_NAMESPACE::Lanes(d)) {
    hwy::HWY_NAMESPACE::StoreU(SoftmaxExp(d, hwy::HWY_NAMESPACE::LoadU(d, x + i)), d,
                               x + i);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "hwy/tests/hwy_gtest.h"

namespace mha {
HWY_EXPORT(SoftmaxExpForTest);
}  // namespace mha

namespace {

class Exp : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(Exp);

// Runs the kernel on xs, padded to 16 (a whole number of vectors on every target).
std::vector<float> ExpOf(std::vector<float> xs) {
  xs.resize((xs.size() + 15) / 16 * 16, 0.0f);
  HWY_DYNAMIC_DISPATCH(mha::SoftmaxExpForTest)(xs.data(), xs.size());
  return xs;
}

TEST_P(Exp, WithinTwoTenMillionthsRelativeFromEightDownToMinus86ZeroBelow) {
  std::vector<float> xs;
  for (float x = mha::kMaxExpArgument; x >= -104.0f; x -= 0.000731f) {
    xs.push_back(x);
  }
  const std::vector<float> results = ExpOf(xs);
  double worst = 0.0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double expected = std::exp(double{xs[i]});
    if (xs[i] >= -86.0f) {
      const double relative = std::fabs(results[i] / expected - 1.0);
      ASSERT_LE(relative, 2e-7) << "x " << xs[i] << " got " << results[i];
      worst = std::max(worst, relative);
    } else {
      ASSERT_EQ(results[i], 0.0f) << "x " << xs[i];
      ASSERT_LE(expected, 4.5e-38) << "x " << xs[i];
    }
  }
  EXPECT_GT(worst, 0.0);  // the sweep reached the polynomial's error
}

TEST_P(Exp, ExactAtZeroAndZeroAtMinusInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> results = ExpOf({0.0f, -0.0f, -inf, -FLT_MAX, -1000.0f});
  EXPECT_EQ(results[0], 1.0f);
  EXPECT_EQ(results[1], 1.0f);
  EXPECT_EQ(results[2], 0.0f);
  EXPECT_EQ(results[3], 0.0f);
  EXPECT_EQ(results[4], 0.0f);
}

}  // namespace
#endif  // HWY_ONCE

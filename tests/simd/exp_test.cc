// exp-inl.h on every SIMD target this CPU supports, at both precisions, against
// double-precision exp: a dense sweep of [-104, 8] (every reduced argument's interval
// many times over, the positive arguments a lagging running max gives, the cut-off at
// -86 and the range below it); exactly 1 at 0 and 0 at -inf.
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

// x[0, n) to exp(x) in place, at float precision or (for_bf16) bfloat16's; n a
// whole number of vectors.
void SoftmaxExpForTest(float* x, size_t n, bool for_bf16) {
  const hwy::HWY_NAMESPACE::ScalableTag<float> d;
  for (size_t i = 0; i < n; i += hwy::HWY_NAMESPACE::Lanes(d)) {
    const auto v = hwy::HWY_NAMESPACE::LoadU(d, x + i);
    hwy::HWY_NAMESPACE::StoreU(
        for_bf16 ? SoftmaxExp<ExpPrecision::kBfloat16>(d, v) : SoftmaxExp(d, v), d,
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
std::vector<float> ExpOf(std::vector<float> xs, bool for_bf16) {
  xs.resize((xs.size() + 15) / 16 * 16, 0.0f);
  HWY_DYNAMIC_DISPATCH(mha::SoftmaxExpForTest)(xs.data(), xs.size(), for_bf16);
  return xs;
}

// The worst relative error over the sweep; 0 below -86 (and below exp(-86)).
double WorstRelativeError(bool for_bf16, double bound) {
  std::vector<float> xs;
  for (float x = mha::kMaxExpArgument; x >= -104.0f; x -= 0.000731f) {
    xs.push_back(x);
  }
  const std::vector<float> results = ExpOf(xs, for_bf16);
  double worst = 0.0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double expected = std::exp(double{xs[i]});
    if (xs[i] >= -86.0f) {
      const double relative = std::fabs(results[i] / expected - 1.0);
      EXPECT_LE(relative, bound) << "x " << xs[i] << " got " << results[i];
      if (relative > bound) return relative;
      worst = std::max(worst, relative);
    } else {
      EXPECT_EQ(results[i], 0.0f) << "x " << xs[i];
      EXPECT_LE(expected, 4.5e-38) << "x " << xs[i];
    }
  }
  return worst;
}

TEST_P(Exp, WithinTwoTenMillionthsRelativeFromEightDownToMinus86ZeroBelow) {
  EXPECT_GT(WorstRelativeError(false, 2e-7), 0.0);  // the sweep reached the error
}

// Bfloat16's precision: under its half ulp (2^-9 = 2e-3) by more than 2^8.
TEST_P(Exp, ForBfloat16WithinSixMillionthsRelativeFromEightDownToMinus86ZeroBelow) {
  EXPECT_GT(WorstRelativeError(true, 6e-6), 2e-7);  // the shorter polynomial's error
}

TEST_P(Exp, ExactAtZeroAndZeroAtMinusInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  for (bool for_bf16 : {false, true}) {
    const std::vector<float> results =
        ExpOf({0.0f, -0.0f, -inf, -FLT_MAX, -1000.0f}, for_bf16);
    EXPECT_EQ(results[0], 1.0f);
    EXPECT_EQ(results[1], 1.0f);
    EXPECT_EQ(results[2], 0.0f);
    EXPECT_EQ(results[3], 0.0f);
    EXPECT_EQ(results[4], 0.0f);
  }
}

}  // namespace
#endif  // HWY_ONCE

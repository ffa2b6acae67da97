// head_norm-inl.h's NormRotateRow on every SIMD target this CPU supports, against
// transformers' order of operations in double: RMSNorm with its weight, then the
// rotation, then the scale. Head sizes around the vector widths, both pairings, no
// table (QK-norm alone), and a zero row (eps keeps it finite).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/simd/head_norm_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cmath>
#include <vector>

#include "hwy/highway.h"
#include "src/simd/head_norm-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

void NormRotateRowForTest(const float* src, size_t head_dim,
                          const internal::HeadNorm& norm, const RotaryEmbedding* rotary,
                          int64_t position, float scale, float* dst) {
  NormRotateRow(hwy::HWY_NAMESPACE::ScalableTag<float>(), src, head_dim, norm, rotary,
                position, scale, dst);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "hwy/tests/hwy_gtest.h"
#include "tests/test_util.h"

namespace mha {
HWY_EXPORT(NormRotateRowForTest);
}  // namespace mha

namespace {

using mha::RotaryConfig;
using mha::RotaryEmbedding;
using mha::RotaryPairing;
using mha::internal::HeadNorm;

// x * weight / sqrt(mean(x^2) + eps), rotated as Hugging Face does, times scale.
std::vector<double> PlainNormRotation(const std::vector<float>& x,
                                      const std::vector<float>& weight, double eps,
                                      const RotaryEmbedding* rotary, int64_t position,
                                      double scale) {
  double squares = 0.0;
  for (const float v : x) squares += static_cast<double>(v) * v;
  const double inverse_rms = 1.0 / std::sqrt(squares / x.size() + eps);
  std::vector<double> normed(x.size());
  for (size_t k = 0; k < x.size(); ++k) normed[k] = x[k] * inverse_rms * weight[k];
  std::vector<double> out = normed;
  const size_t half = rotary ? static_cast<size_t>(rotary->rotary_dim()) / 2 : 0;
  for (size_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(position) * rotary->inv_freq()[i];
    const bool split = rotary->pairing() == RotaryPairing::kHalfSplit;
    const size_t a = split ? i : 2 * i, b = split ? i + half : 2 * i + 1;
    out[a] = normed[a] * std::cos(angle) - normed[b] * std::sin(angle);
    out[b] = normed[b] * std::cos(angle) + normed[a] * std::sin(angle);
  }
  for (double& v : out) v *= scale;
  return out;
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& expected,
                const char* what) {
  for (size_t k = 0; k < expected.size(); ++k) {
    ASSERT_NEAR(got[k], expected[k], 4e-6 * (1.0 + std::fabs(expected[k])))
        << what << ": head_dim " << expected.size() << " k " << k;
  }
}

class HeadNormRow : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(HeadNormRow);

TEST_P(HeadNormRow, MatchesNormThenRotationInDouble) {
  for (const RotaryPairing pairing :
       {RotaryPairing::kHalfSplit, RotaryPairing::kInterleaved}) {
    for (const size_t head_dim : {2, 7, 16, 34, 64, 128, 130}) {
      RotaryConfig config;
      config.pairing = pairing;
      config.rotary_dim = static_cast<int64_t>(head_dim & ~size_t{1});
      config.max_positions = 64;
      const RotaryEmbedding rotary(config, static_cast<int64_t>(head_dim));
      const std::vector<float> x =
          mha::testing::RandomFloats(head_dim, static_cast<uint32_t>(head_dim));
      std::vector<float> weight =
          mha::testing::RandomFloats(head_dim, static_cast<uint32_t>(head_dim + 9));
      for (float& w : weight) w += 1.0f;  // Gemma's 1 + w, folded
      const HeadNorm norm{weight.data(), 1e-6f};
      std::vector<float> dst(head_dim);
      for (const int64_t position : {0, 5, 63}) {
        HWY_DYNAMIC_DISPATCH(mha::NormRotateRowForTest)
        (x.data(), head_dim, norm, &rotary, position, 0.125f, dst.data());
        ExpectNear(dst, PlainNormRotation(x, weight, 1e-6, &rotary, position, 0.125),
                   "rotated");
      }
      HWY_DYNAMIC_DISPATCH(mha::NormRotateRowForTest)
      (x.data(), head_dim, norm, nullptr, 0, 1.0f, dst.data());
      ExpectNear(dst, PlainNormRotation(x, weight, 1e-6, nullptr, 0, 1.0), "no table");
    }
  }
}

TEST_P(HeadNormRow, ZeroRowStaysZero) {
  const std::vector<float> zeros(40, 0.0f), weight(40, 2.0f);
  std::vector<float> dst(40, -1.0f);
  HWY_DYNAMIC_DISPATCH(mha::NormRotateRowForTest)
  (zeros.data(), 40, HeadNorm{weight.data(), 1e-6f}, nullptr, 0, 1.0f, dst.data());
  for (const float v : dst) ASSERT_EQ(v, 0.0f);
}

TEST_P(HeadNormRow, LargeRowDoesNotOverflowItsNorm) {
  std::vector<float> x(64, 1e18f), weight(64, 1.0f), dst(64);
  HWY_DYNAMIC_DISPATCH(mha::NormRotateRowForTest)
  (x.data(), 64, HeadNorm{weight.data(), 1e-6f}, nullptr, 0, 1.0f, dst.data());
  for (const float v : dst) ASSERT_NEAR(v, 1.0f, 1e-5f);
}

}  // namespace
#endif  // HWY_ONCE

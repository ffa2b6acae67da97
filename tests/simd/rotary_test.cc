// rotary-inl.h's RotateRow on every SIMD target this CPU supports, against a plain
// double-precision rotation: both pairings, partial rotation, odd head sizes, every
// alignment of source and destination, scaled and unscaled, without a table.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/simd/rotary_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cmath>
#include <vector>

#include "hwy/highway.h"
#include "src/simd/rotary-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

void RotateRowForTest(const float* src, size_t head_dim, const RotaryEmbedding* rotary,
                      int64_t position, float scale, float* dst) {
  RotateRow(hwy::HWY_NAMESPACE::ScalableTag<float>(), src, head_dim, rotary, position,
            scale, dst);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "hwy/tests/hwy_gtest.h"
#include "tests/test_util.h"

namespace mha {
HWY_EXPORT(RotateRowForTest);
}  // namespace mha

namespace {

using mha::RotaryConfig;
using mha::RotaryEmbedding;
using mha::RotaryPairing;

// Hugging Face's rotation of one row, in double, from the table's frequencies.
std::vector<double> PlainRotation(const std::vector<float>& x,
                                  const RotaryEmbedding* rotary, int64_t position,
                                  double scale) {
  std::vector<double> out(x.begin(), x.end());
  const size_t half = rotary ? static_cast<size_t>(rotary->rotary_dim()) / 2 : 0;
  for (size_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(position) * rotary->inv_freq()[i];
    const double c = std::cos(angle) * rotary->attention_factor(),
                 s = std::sin(angle) * rotary->attention_factor();
    const bool split = rotary->pairing() == RotaryPairing::kHalfSplit;
    const size_t a = split ? i : 2 * i, b = split ? i + half : 2 * i + 1;
    out[a] = x[a] * c - x[b] * s;
    out[b] = x[b] * c + x[a] * s;
  }
  for (double& v : out) v *= scale;
  return out;
}

class Rotary : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(Rotary);

TEST_P(Rotary, RotateRowMatchesPlainRotation) {
  for (const RotaryPairing pairing :
       {RotaryPairing::kHalfSplit, RotaryPairing::kInterleaved}) {
    for (const size_t head_dim : {2, 3, 6, 17, 34, 64, 130}) {
      for (size_t rotary_dim = 2; rotary_dim <= head_dim;
           rotary_dim += 2 * (1 + rotary_dim / 6)) {
        RotaryConfig config;
        config.pairing = pairing;
        config.rotary_dim = static_cast<int64_t>(rotary_dim);
        config.max_positions = 300;
        config.attention_factor = 1.25;
        const RotaryEmbedding rotary(config, static_cast<int64_t>(head_dim));
        for (const size_t align : {0, 1, 3}) {  // floats past an aligned start
          const std::vector<float> x = mha::testing::RandomFloats(
              head_dim, static_cast<uint32_t>(head_dim + align));
          std::vector<float> src(align + head_dim), dst(align + head_dim, -7.0f);
          std::copy(x.begin(), x.end(), src.begin() + align);
          for (const int64_t position : {0, 1, 299}) {
            for (const float scale : {1.0f, 0.125f}) {
              HWY_DYNAMIC_DISPATCH(mha::RotateRowForTest)
              (src.data() + align, head_dim, &rotary, position, scale,
               dst.data() + align);
              const std::vector<double> expected =
                  PlainRotation(x, &rotary, position, scale);
              for (size_t k = 0; k < head_dim; ++k) {
                ASSERT_NEAR(dst[align + k], expected[k],
                            2e-6 * (1.0 + std::fabs(expected[k])))
                    << "head_dim " << head_dim << " rotary_dim " << rotary_dim << " k "
                    << k;
              }
              for (size_t k = 0; k < align; ++k)
                ASSERT_EQ(dst[k], -7.0f) << "wrote before";
            }
          }
        }
      }
    }
  }
}

TEST_P(Rotary, WithoutATableOnlyScales) {
  const std::vector<float> x = mha::testing::RandomFloats(37, 5);
  std::vector<float> dst(37);
  HWY_DYNAMIC_DISPATCH(mha::RotateRowForTest)
  (x.data(), 37, nullptr, 12, 0.5f, dst.data());
  for (size_t k = 0; k < 37; ++k) ASSERT_EQ(dst[k], x[k] * 0.5f);
}

}  // namespace
#endif  // HWY_ONCE

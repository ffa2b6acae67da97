// The per-target softmax kernel against a plain double-precision softmax, on every
// SIMD target this CPU supports, over odd lengths, -inf (masked) entries, fully
// masked rows and large magnitudes; and the whole layer on each target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/kernels/softmax_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cmath>
#include <limits>
#include <vector>

#include "hwy/highway.h"
#include "src/kernels/softmax-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

bool SoftmaxRowForTest(float* row, size_t n) {
  return SoftmaxRow(hwy::HWY_NAMESPACE::ScalableTag<float>(), row, n);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "hwy/tests/hwy_gtest.h"
#include "tests/test_util.h"

namespace mha {
HWY_EXPORT(SoftmaxRowForTest);
}  // namespace mha

// Outside namespace mha: Highway's test macros name ::testing unqualified.
namespace {

using mha::AttentionInputs;
using mha::AttentionMasks;
using mha::MutableTensorView;
using mha::Shape;
using mha::TensorView;
using mha::testing::ExpectClose;
using mha::testing::LayerSpec;
using mha::testing::MakeLayer;
using mha::testing::OwnedLayer;
using mha::testing::RandomFloats;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> PlainSoftmax(const std::vector<float>& row) {
  double max = -std::numeric_limits<double>::infinity();
  for (float v : row) max = std::max(max, double{v});
  std::vector<float> out(row.size(), 0.0f);
  if (std::isinf(max)) return out;
  double sum = 0.0;
  for (float v : row) sum += std::exp(double{v} - max);
  for (size_t i = 0; i < row.size(); ++i)
    out[i] = float(std::exp(double{row[i]} - max) / sum);
  return out;
}

class SoftmaxKernel : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(SoftmaxKernel);

TEST_P(SoftmaxKernel, MatchesPlainSoftmaxOverOddLengths) {
  for (size_t n = 1; n <= 70; ++n) {
    for (int pattern = 0; pattern < 3; ++pattern) {
      std::vector<float> row = RandomFloats(n, static_cast<uint32_t>(n * 3 + pattern),
                                            pattern == 2 ? 80.0f : 4.0f);
      if (pattern == 1) {
        for (size_t i = 0; i < n; i += 3) row[i] = kNegInf;
        row[n - 1] = 0.5f;  // at least one key stays open
      }
      const std::vector<float> expected = PlainSoftmax(row);
      std::vector<float> actual = row;
      ASSERT_TRUE(HWY_DYNAMIC_DISPATCH(mha::SoftmaxRowForTest)(actual.data(), n));
      ExpectClose(actual, expected, "softmax", 1e-6);
      double sum = 0.0;
      for (float p : actual) sum += p;
      EXPECT_NEAR(sum, 1.0, 1e-5) << "n=" << n;
    }
  }
}

TEST_P(SoftmaxKernel, FullyMaskedRowBecomesZeros) {
  for (size_t n : {1, 7, 16, 33}) {
    std::vector<float> row(n, kNegInf);
    EXPECT_FALSE(HWY_DYNAMIC_DISPATCH(mha::SoftmaxRowForTest)(row.data(), n));
    for (float p : row) EXPECT_EQ(p, 0.0f);
  }
}

// The whole layer on this target, against the naive baseline, over the head_dim
// values whose tails differ per vector width.
TEST_P(SoftmaxKernel, LayerMatchesBaselineOnThisTarget) {
  for (int64_t head_dim : {1, 3, 5, 17, 64}) {
    LayerSpec spec;
    spec.num_heads = 3;
    spec.head_dim = head_dim;
    spec.query_dim = 13;
    const OwnedLayer layer = MakeLayer(spec, 9);
    const std::vector<float> x = RandomFloats(2 * 19 * 13, 4);
    AttentionMasks masks;
    masks.is_causal = true;
    const AttentionInputs inputs{TensorView(x.data(), Shape{2, 19, 13}), {}, {}};
    std::vector<float> out(2 * 19 * 13), ref(out.size());
    mha::MultiheadAttention(layer.config, layer.weights)
        .Forward(inputs, masks, {MutableTensorView(out.data(), Shape{2, 19, 13}), {}});
    mha::NaiveMultiheadAttention(layer.config, layer.weights, inputs, masks,
                                 {MutableTensorView(ref.data(), Shape{2, 19, 13}), {}});
    ExpectClose(out, ref, "output");
  }
}

}  // namespace
#endif  // HWY_ONCE

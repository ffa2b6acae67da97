// The per-target kernels against plain double-precision loops, on every SIMD target
// this CPU supports: the online softmax over odd lengths and block splits, masked and
// fully masked rows; the tile product over odd shapes; the whole layer; and the
// attention core with every decoder feature.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/kernel/kernels_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "hwy/highway.h"
#include "src/base/cpu_features.h"
#include "src/kernel/tile_matmul-inl.h"
#include "src/simd/bf16_convert.h"
#include "src/simd/softmax-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

// Softmax of row[0, n) computed `block` keys at a time, as AttendHead does: each
// block padded to 16 with -inf, earlier outputs rescaled, then normalised.
void SteppedSoftmaxForTest(float* row, size_t n, size_t block) {
  const hwy::HWY_NAMESPACE::ScalableTag<float> d;
  float max = kNegInf, sum = 0.0f;
  std::vector<float> padded;
  for (size_t first = 0; first < n; first += block) {
    const size_t count = std::min(block, n - first);
    padded.assign((count + 15) / 16 * 16, kNegInf);
    std::copy(row + first, row + first + count, padded.begin());
    const float rescale =
        OnlineSoftmaxStep(d, padded.data(), padded.size(),
                          RowMax(d, padded.data(), padded.size()), max, sum);
    for (size_t i = 0; i < first; ++i) row[i] *= rescale;
    std::copy(padded.begin(), padded.begin() + count, row + first);
  }
  for (size_t i = 0; i < n; ++i) row[i] = sum > 0.0f ? row[i] / sum : 0.0f;
}

// One block of 16 keys, all masked but one of score `score`, through the softmax
// step; returns its rescale factor.
float SoftmaxStepForTest(float score, float& running_max, float& running_sum) {
  const hwy::HWY_NAMESPACE::ScalableTag<float> d;
  std::vector<float> block(16, kNegInf);
  block[3] = score;
  return OnlineSoftmaxStep(d, block.data(), block.size(),
                           RowMax(d, block.data(), block.size()), running_max,
                           running_sum);
}

// ExpAndSumToBf16 of row[0, n) against max into bits, returning its sum; exps: the
// same exps unrounded. False where this target does not run it: an AVX-512 target
// on a CPU without AVX512_BF16 (the kernel's bf16 products need it there too).
bool ExpToBf16ForTest(const float* row, size_t n, float max, uint16_t* bits, float* exps,
                      float* sum) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> d;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if (!internal::CpuHasAvx512Bf16()) return false;
#endif
  *sum = ExpAndSumToBf16(d, row, n, max, bits);
  for (size_t i = 0; i < n; i += hn::Lanes(d)) {
    const auto x = hn::Sub(hn::LoadU(d, row + i), hn::Set(d, max));
    hn::StoreU(SoftmaxExp<ExpPrecision::kBfloat16>(d, x), d, exps + i);
  }
  return true;
}

// b: a [b_rows, >= n] tile in column panels, as KV pages are stored.
void TileMatMulForTest(size_t rows, size_t n, size_t depth, const float* a, size_t lda,
                       const float* b, size_t b_rows, float* c, size_t ldc,
                       bool accumulate) {
  TileMatMul(hwy::HWY_NAMESPACE::ScalableTag<float>(), rows, n, depth, a, lda, b, b_rows,
             c, ldc, accumulate);
}

// B as bfloat16 bits, as a bf16 KV cache stores it.
void TileMatMulBf16ForTest(size_t rows, size_t n, size_t depth, const float* a,
                           size_t lda, const uint16_t* b, size_t b_rows, float* c,
                           size_t ldc) {
  TileMatMul(hwy::HWY_NAMESPACE::ScalableTag<float>(), rows, n, depth, a, lda,
             reinterpret_cast<const hwy::bfloat16_t*>(b), b_rows, c, ldc, false);
}

// C over `count` pages of page_cols columns, each a [depth, page_cols] tile of T,
// twice: several pages per strip (TilePagesMatMul) into `grouped`, and a page at a
// time (TileMatMul) into `single`. False where this target's strips are too narrow
// for pages to share them (the kernel then never groups).
template <typename T>
bool PagedProductsForTest(size_t rows, size_t count, size_t page_cols, size_t n,
                          size_t depth, const float* a, const T* const* pages,
                          float* grouped, float* single) {
  const hwy::HWY_NAMESPACE::ScalableTag<float> d;
  if (StripColumns(d) % page_cols != 0 || page_cols >= StripColumns(d)) return false;
  TilePagesMatMul(d, CodesLoader<T>(), rows, n, depth, a, depth, pages, pages, page_cols,
                  depth, grouped, n, /*accumulate=*/false);
  for (size_t i = 0; i < count; ++i) {
    const size_t column = i * page_cols, cols = std::min(page_cols, n - column);
    TileMatMul(d, rows, cols, depth, a, depth, pages[i], depth, single + column, n,
               /*accumulate=*/false);
  }
  return true;
}
bool PagedProductsFloatForTest(size_t rows, size_t count, size_t page_cols, size_t n,
                               size_t depth, const float* a, const float* const* pages,
                               float* grouped, float* single) {
  return PagedProductsForTest(rows, count, page_cols, n, depth, a, pages, grouped,
                              single);
}
bool PagedProductsBf16ForTest(size_t rows, size_t count, size_t page_cols, size_t n,
                              size_t depth, const float* a, const uint16_t* const* pages,
                              float* grouped, float* single) {
  return PagedProductsForTest(rows, count, page_cols, n, depth, a,
                              reinterpret_cast<const hwy::bfloat16_t* const*>(pages),
                              grouped, single);
}

// C[rows, n] = A B with B's depth rows in pages of page_rows, as one product
// (`grouped`) and as one accumulated product per page (`single`).
template <typename T>
void DepthPagesForTest(size_t rows, size_t count, size_t page_rows, size_t n,
                       size_t depth, const float* a, const T* const* pages,
                       float* grouped, float* single) {
  const hwy::HWY_NAMESPACE::ScalableTag<float> d;
  TileDepthPagesMatMul(d, CodesLoader<T>(), rows, n, depth, a, depth, pages, page_rows,
                       grouped, n, /*accumulate=*/false, static_cast<const T*>(nullptr));
  for (size_t i = 0; i < count; ++i) {
    const size_t first = i * page_rows;
    TileMatMul(d, rows, n, std::min(page_rows, depth - first), a + first, depth, pages[i],
               page_rows, single, n, /*accumulate=*/i > 0);
  }
}
void DepthPagesFloatForTest(size_t rows, size_t count, size_t page_rows, size_t n,
                            size_t depth, const float* a, const float* const* pages,
                            float* grouped, float* single) {
  DepthPagesForTest(rows, count, page_rows, n, depth, a, pages, grouped, single);
}
void DepthPagesBf16ForTest(size_t rows, size_t count, size_t page_rows, size_t n,
                           size_t depth, const float* a, const uint16_t* const* pages,
                           float* grouped, float* single) {
  DepthPagesForTest(rows, count, page_rows, n, depth, a,
                    reinterpret_cast<const hwy::bfloat16_t* const*>(pages), grouped,
                    single);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "hwy/tests/hwy_gtest.h"
#include "tests/test_util.h"

namespace mha {
HWY_EXPORT(SteppedSoftmaxForTest);
HWY_EXPORT(SoftmaxStepForTest);
HWY_EXPORT(ExpToBf16ForTest);
HWY_EXPORT(TileMatMulForTest);
HWY_EXPORT(TileMatMulBf16ForTest);
HWY_EXPORT(PagedProductsFloatForTest);
HWY_EXPORT(PagedProductsBf16ForTest);
HWY_EXPORT(DepthPagesFloatForTest);
HWY_EXPORT(DepthPagesBf16ForTest);
}  // namespace mha

// Outside namespace mha: Highway's test macros name ::testing unqualified.
namespace {

using mha::AttentionInputs;
using mha::AttentionMasks;
using mha::CoreOptions;
using mha::HeadLayout;
using mha::MutableTensorView;
using mha::RotaryConfig;
using mha::RotaryEmbedding;
using mha::RotaryPairing;
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

class Kernels : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(Kernels);

TEST_P(Kernels, OnlineSoftmaxMatchesPlainSoftmax) {
  for (size_t n = 1; n <= 70; ++n) {
    for (int pattern = 0; pattern < 3; ++pattern) {
      std::vector<float> row = RandomFloats(n, static_cast<uint32_t>(n * 3 + pattern),
                                            pattern == 2 ? 80.0f : 4.0f);
      if (pattern == 1) {
        for (size_t i = 0; i < n; i += 3) row[i] = kNegInf;
        row[n - 1] = 0.5f;  // at least one key stays open
      }
      const std::vector<float> expected = PlainSoftmax(row);
      for (size_t block : {size_t{16}, size_t{5}, n}) {
        std::vector<float> actual = row;
        HWY_DYNAMIC_DISPATCH(mha::SteppedSoftmaxForTest)(actual.data(), n, block);
        ExpectClose(actual, expected, "softmax", 1e-6);
      }
    }
  }
}

// The running max lags the true one by up to 8: rising scores (a ramp of 0.25 to 0.75
// per key, so blocks' maxima grow by 4 to 12) take both branches of the rule, and
// exps of positive arguments up to 8, and still give the plain softmax.
TEST_P(Kernels, OnlineSoftmaxWithALaggingMaxMatchesPlainSoftmax) {
  for (float step : {0.25f, 0.5f, 0.75f}) {
    std::vector<float> row(300);
    for (size_t i = 0; i < row.size(); ++i) row[i] = step * static_cast<float>(i) - 30.0f;
    const std::vector<float> expected = PlainSoftmax(row);
    for (size_t block : {size_t{16}, size_t{48}}) {
      std::vector<float> actual = row;
      HWY_DYNAMIC_DISPATCH(mha::SteppedSoftmaxForTest)(actual.data(), row.size(), block);
      ExpectClose(actual, expected, "ramp softmax", 1e-6);
    }
  }
}

// A block whose max exceeds the running max by at most 8 leaves the max, and the
// context (factor exactly 1), as they were; one beyond moves the max to its own.
TEST_P(Kernels, RunningMaxMovesOnlyBeyondTheLag) {
  float max = 0.0f, sum = 1.0f;  // one key so far, of score 0 (a sink, say)
  EXPECT_EQ(HWY_DYNAMIC_DISPATCH(mha::SoftmaxStepForTest)(7.9f, max, sum), 1.0f);
  EXPECT_EQ(max, 0.0f);
  EXPECT_NEAR(sum / (1.0 + std::exp(7.9)), 1.0, 1e-6);
  const float rescale = HWY_DYNAMIC_DISPATCH(mha::SoftmaxStepForTest)(20.0f, max, sum);
  EXPECT_EQ(max, 20.0f);
  EXPECT_NEAR(rescale / std::exp(-20.0), 1.0, 1e-6);
  EXPECT_NEAR(sum, (1.0 + std::exp(7.9)) * std::exp(-20.0) + 1.0, 1e-6);
}

// The probabilities bf16 products multiply: each exp rounded to nearest even (on
// AVX-512, by AVX512_BF16's instruction: the same bits as the plain rounding), and
// the sum of exactly those rounded values. Scores from the row max down past the
// exp's cut-off at -86, masked keys (-inf) and lagging-max arguments up to +8.
TEST_P(Kernels, ExpToBf16IsTheRoundedExpAndSumsIt) {
  const size_t n = 512;
  std::vector<float> row = RandomFloats(n, 7, 54.0f);
  for (float& score : row) score -= 46.0f;  // [-100, 8]
  for (size_t i = 0; i < n; i += 7) row[i] = kNegInf;
  row[3] = 8.0f;
  row[5] = 0.0f;
  std::vector<uint16_t> bits(n);
  std::vector<float> exps(n);
  float sum = 0.0f;
  if (!HWY_DYNAMIC_DISPATCH(mha::ExpToBf16ForTest)(row.data(), n, 0.0f, bits.data(),
                                                   exps.data(), &sum)) {
    GTEST_SKIP() << "an AVX-512 target on a CPU without AVX512_BF16";
  }
  double expected_sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(bits[i], mha::internal::RoundToBf16Bits(exps[i])) << "key " << i;
    float rounded = 0.0f;
    mha::internal::Bf16ToFloat(&bits[i], 1, &rounded);
    expected_sum += rounded;
    if (row[i] >= -86.0f) {
      EXPECT_NEAR(rounded / std::exp(double{row[i]}), 1.0, 1.0 / 256) << "key " << i;
    } else {
      EXPECT_EQ(bits[i], 0) << "key " << i;
    }
  }
  EXPECT_EQ(bits[5], 0x3F80);  // exp(0) = 1 exactly
  EXPECT_NEAR(sum / expected_sum, 1.0, 1e-6);
}

TEST_P(Kernels, FullyMaskedRowBecomesZeros) {
  for (size_t n : {1, 7, 16, 33}) {
    std::vector<float> row(n, kNegInf);
    HWY_DYNAMIC_DISPATCH(mha::SteppedSoftmaxForTest)(row.data(), n, 16);
    for (float p : row) EXPECT_EQ(p, 0.0f);
  }
}

TEST_P(Kernels, TileMatMulMatchesPlainProduct) {
  for (size_t rows : {1, 5, 6, 7, 13}) {
    for (size_t n : {16, 32, 48, 80, 144}) {
      for (size_t depth : {1, 3, 17, 64}) {
        for (bool accumulate : {false, true}) {
          // B has more rows and columns than the product uses.
          const size_t lda = depth + 3, b_rows = depth + 5, b_cols = n + 16, ldc = n + 32;
          const std::vector<float> a = RandomFloats(rows * lda, 1),
                                   b = RandomFloats(b_rows * b_cols, 2);
          std::vector<float> c = RandomFloats(rows * ldc, 3), expected = c;
          for (size_t i = 0; i < rows; ++i) {
            for (size_t j = 0; j < n; ++j) {
              double sum = accumulate ? expected[i * ldc + j] : 0.0;
              for (size_t k = 0; k < depth; ++k)
                sum +=
                    double{a[i * lda + k]} * b[mha::internal::PanelOffset(k, j, b_rows)];
              expected[i * ldc + j] = static_cast<float>(sum);
            }
          }
          HWY_DYNAMIC_DISPATCH(mha::TileMatMulForTest)
          (rows, n, depth, a.data(), lda, b.data(), b_rows, c.data(), ldc, accumulate);
          ExpectClose(c, expected, "tile product", 1e-5);
        }
      }
    }
  }
}

TEST_P(Kernels, TileMatMulWidensBf16Panels) {
  for (size_t rows : {1, 4, 7}) {
    for (size_t n : {16, 48, 128}) {
      // An odd depth: the paired tile's last row is half a pair.
      const size_t depth = 33, lda = depth, b_rows = depth, b_cols = n + 16, ldc = n;
      const std::vector<float> a = RandomFloats(rows * lda, 1);
      const std::vector<float> b = RandomFloats(b_rows * b_cols, 2);
      std::vector<uint16_t> b16(b.size());
      mha::internal::FloatToBf16(b.data(), b.size(), b16.data());
      std::vector<float> widened(b.size()), c(rows * ldc), expected(rows * ldc);
      mha::internal::Bf16ToFloat(b16.data(), b16.size(), widened.data());
      for (size_t i = 0; i < rows; ++i) {
        for (size_t j = 0; j < n; ++j) {
          double sum = 0.0;
          for (size_t k = 0; k < depth; ++k) {
            sum += double{a[i * lda + k]} *
                   widened[mha::internal::PairedOffset(k, j, b_rows)];
          }
          expected[i * ldc + j] = static_cast<float>(sum);
        }
      }
      HWY_DYNAMIC_DISPATCH(mha::TileMatMulBf16ForTest)
      (rows, n, depth, a.data(), lda, b16.data(), b_rows, c.data(), ldc);
      ExpectClose(c, expected, "bf16 tile product", 1e-5);
    }
  }
}

// `count` random pages of `size` floats, and the same rounded to bfloat16 (`extra`
// more zeros each), as the arrays of page pointers the tile products take.
class RandomPages {
 public:
  RandomPages(size_t count, size_t size, size_t extra) {
    for (size_t i = 0; i < count; ++i) {
      float_pages_.push_back(RandomFloats(size, 10 + uint32_t(i)));
      bf16_pages_.emplace_back(size + extra);
      mha::internal::FloatToBf16(float_pages_.back().data(), size,
                                 bf16_pages_.back().data());
    }
    for (size_t i = 0; i < count; ++i) {
      floats.push_back(float_pages_[i].data());
      bf16.push_back(bf16_pages_[i].data());
    }
  }
  std::vector<const float*> floats;
  std::vector<const uint16_t*> bf16;

 private:
  std::vector<std::vector<float>> float_pages_;
  std::vector<std::vector<uint16_t>> bf16_pages_;
};

// Pages sharing strips give the same bits as one page at a time: every element's
// products are added in the same order (a decode step's Q K^T over 16-token pages),
// for float and paired bfloat16 pages, a last page partly used, any row count.
TEST_P(Kernels, PagesSharingStripsMatchOnePageAtATime) {
  for (size_t page_cols : {16, 32}) {
    for (size_t count : {1, 3, 8}) {
      for (size_t rows : {1, 4, 6, 7}) {
        const size_t depth = 33, n = count * page_cols - (count > 1 ? 16 : 0);
        const std::vector<float> a = RandomFloats(rows * depth, 3);
        // Paired: an odd depth has one more row.
        const RandomPages pages(count, depth * page_cols, page_cols);
        std::vector<float> grouped(rows * n), single(rows * n);
        const std::string what = "page_cols " + std::to_string(page_cols) + " count " +
                                 std::to_string(count) + " rows " + std::to_string(rows);
        if (!HWY_DYNAMIC_DISPATCH(mha::PagedProductsFloatForTest)(
                rows, count, page_cols, n, depth, a.data(), pages.floats.data(),
                grouped.data(), single.data())) {
          return;  // strips too narrow on this target
        }
        ASSERT_EQ(grouped, single) << "float " << what;
        HWY_DYNAMIC_DISPATCH(mha::PagedProductsBf16ForTest)
        (rows, count, page_cols, n, depth, a.data(), pages.bf16.data(), grouped.data(),
         single.data());
        ASSERT_EQ(grouped, single) << "bf16 " << what;
      }
    }
  }
}

// Pages one below the other give the same bits as one accumulated product per page:
// the accumulators stay in registers in between (a decode step's P V over 16-token
// pages), for float and paired bfloat16 pages, a last page partly used (an odd depth
// there), any row count and strip width.
TEST_P(Kernels, DepthPagesMatchOnePageAtATime) {
  for (size_t page_rows : {16, 32}) {
    for (size_t count : {1, 3, 5}) {
      for (size_t rows : {1, 4, 7}) {
        for (size_t n : {16, 48, 128}) {
          const size_t depth = count * page_rows - (count > 1 ? 5 : 0);
          const std::vector<float> a = RandomFloats(rows * depth, 3);
          const RandomPages pages(count, page_rows * n, 0);
          std::vector<float> grouped(rows * n), single(rows * n);
          const std::string what = "page_rows " + std::to_string(page_rows) + " count " +
                                   std::to_string(count) + " rows " +
                                   std::to_string(rows) + " n " + std::to_string(n);
          HWY_DYNAMIC_DISPATCH(mha::DepthPagesFloatForTest)
          (rows, count, page_rows, n, depth, a.data(), pages.floats.data(),
           grouped.data(), single.data());
          ASSERT_EQ(grouped, single) << "float " << what;
          HWY_DYNAMIC_DISPATCH(mha::DepthPagesBf16ForTest)
          (rows, count, page_rows, n, depth, a.data(), pages.bf16.data(), grouped.data(),
           single.data());
          ASSERT_EQ(grouped, single) << "bf16 " << what;
        }
      }
    }
  }
}

// The whole layer on this target, against the naive baseline, over the head_dim
// values whose tails differ per vector width.
TEST_P(Kernels, LayerMatchesBaselineOnThisTarget) {
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

// Every decoder feature on this target (soft-cap's Tanh, ALiBi's ramp, the window's
// masking, sinks, both RoPE pairings with vector tails), through the attention core.
TEST_P(Kernels, DecoderFeaturesMatchBaselineOnThisTarget) {
  for (int64_t head_dim : {3, 17, 64}) {
    for (RotaryPairing pairing :
         {RotaryPairing::kHalfSplit, RotaryPairing::kInterleaved}) {
      const int64_t batch = 2, heads = 4, seq = 45;
      const std::vector<float> q = RandomFloats(batch * heads * seq * head_dim, 1),
                               kv = RandomFloats(batch * 2 * seq * head_dim, 2),
                               sinks = RandomFloats(heads, 3);
      const TensorView query(q.data(), Shape{batch, heads, seq, head_dim});
      const TensorView key(kv.data(), Shape{batch, 2, seq, head_dim});
      RotaryConfig rotary_config;
      rotary_config.pairing = pairing;
      rotary_config.rotary_dim = head_dim == 3 ? 2 : head_dim == 17 ? 10 : 0;
      const RotaryEmbedding rotary(rotary_config, head_dim);
      CoreOptions options;
      options.features.softcap = 3.0f;
      options.features.alibi = true;
      options.features.sliding_window = 20;
      options.sinks = TensorView(sinks.data(), Shape{heads});
      options.rotary = &rotary;
      AttentionMasks masks;
      masks.is_causal = true;
      std::vector<float> out(q.size()), ref(q.size());
      ScaledDotProductAttention(query, key, key, masks,
                                MutableTensorView(out.data(), query.shape), options);
      NaiveScaledDotProductAttention(query, key, key, masks,
                                     MutableTensorView(ref.data(), query.shape), options);
      ExpectClose(out, ref, "core output");
    }
  }
}

}  // namespace
#endif  // HWY_ONCE

// The NaN/Inf policy (docs/errors.md): a non-finite input reaches exactly the outputs
// that attend to it, as NaN, never zeros; two finite masks never add up to a fully
// masked row. (Masks holding NaN or +inf are errors: errors_test.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tests/kv_kinds.h"
#include "tests/test_util.h"

namespace mha::testing {
namespace {

constexpr int64_t kBatch = 2, kLen = 5, kEmbed = 8;
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

struct Result {
  std::vector<float> output, weights;  // weights averaged over heads: [B, Sq, Sk]
};

// One forward of a 2-head layer: self-attention when `key` is empty.
Result Forward(const std::vector<float>& query, const std::vector<float>& key,
               const AttentionMasks& masks) {
  const OwnedLayer layer = MakeLayer(LayerSpec{}, 3);
  const MultiheadAttention attention(layer.config, layer.weights);
  Result result{std::vector<float>(kBatch * kLen * kEmbed),
                std::vector<float>(kBatch * kLen * kLen)};
  AttentionInputs inputs{TensorView(query.data(), Shape{kBatch, kLen, kEmbed}), {}, {}};
  if (!key.empty()) {
    inputs.key = inputs.value = TensorView(key.data(), Shape{kBatch, kLen, kEmbed});
  }
  attention.Forward(
      inputs, masks,
      {MutableTensorView(result.output.data(), Shape{kBatch, kLen, kEmbed}),
       MutableTensorView(result.weights.data(), Shape{kBatch, kLen, kLen})});
  return result;
}

bool RowIsNaN(const std::vector<float>& values, int64_t row, int64_t width) {
  for (int64_t i = 0; i < width; ++i) {
    if (!std::isnan(values[row * width + i])) return false;
  }
  return true;
}

bool RowEquals(const std::vector<float>& a, const std::vector<float>& b, int64_t row,
               int64_t width) {
  for (int64_t i = 0; i < width; ++i) {
    if (a[row * width + i] != b[row * width + i]) return false;
  }
  return true;
}

// Rows (b, i) for which `poisoned(b, i)` holds are NaN in output and weights; every
// other row is bitwise the clean run's.
template <class Predicate>
void ExpectNaNExactlyWhere(const Result& result, const Result& clean,
                           const Predicate& poisoned) {
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t i = 0; i < kLen; ++i) {
      const int64_t row = b * kLen + i;
      if (poisoned(b, i)) {
        EXPECT_TRUE(RowIsNaN(result.output, row, kEmbed))
            << "output row " << b << ", " << i;
        EXPECT_TRUE(RowIsNaN(result.weights, row, kLen))
            << "weights row " << b << ", " << i;
      } else {
        EXPECT_TRUE(RowEquals(result.output, clean.output, row, kEmbed))
            << "output row " << b << ", " << i;
        EXPECT_TRUE(RowEquals(result.weights, clean.weights, row, kLen))
            << "weights row " << b << ", " << i;
      }
    }
  }
}

class NonFiniteValue : public ::testing::TestWithParam<float> {};

// Cross-attention: a bad query element spoils its own row only.
TEST_P(NonFiniteValue, InAQueryReachesOnlyItsRow) {
  const std::vector<float> clean_query = RandomFloats(kBatch * kLen * kEmbed, 1),
                           key = RandomFloats(kBatch * kLen * kEmbed, 2);
  std::vector<float> query = clean_query;
  query[(1 * kLen + 2) * kEmbed + 3] = GetParam();
  ExpectNaNExactlyWhere(Forward(query, key, {}), Forward(clean_query, key, {}),
                        [](int64_t b, int64_t i) { return b == 1 && i == 2; });
}

// Cross-attention: a bad key token spoils every row of its batch that attends it,
// and none for which key_lengths masks it.
TEST_P(NonFiniteValue, InAKeyReachesTheRowsAttendingIt) {
  const std::vector<float> query = RandomFloats(kBatch * kLen * kEmbed, 1),
                           clean_key = RandomFloats(kBatch * kLen * kEmbed, 2);
  std::vector<float> key = clean_key;
  key[(0 * kLen + 3) * kEmbed + 5] = GetParam();
  ExpectNaNExactlyWhere(Forward(query, key, {}), Forward(query, clean_key, {}),
                        [](int64_t b, int64_t) { return b == 0; });
  const std::vector<int64_t> lengths = {3, kLen};
  AttentionMasks masks;
  masks.key_lengths = TensorView(lengths.data(), DType::kInt64, Shape{kBatch});
  ExpectNaNExactlyWhere(Forward(query, key, masks), Forward(query, clean_key, masks),
                        [](int64_t, int64_t) { return false; });
}

// Self-attention, causal: token 2 is a query, a key and a value. Later rows are NaN;
// earlier rows never weigh it. (Their context may still be NaN: a masked value row
// inside a key tile is multiplied by its weight 0, and 0 x NaN is NaN, as in
// PyTorch's matmul; docs/errors.md.)
TEST_P(NonFiniteValue, InACausalSelfAttentionTokenReachesLaterRows) {
  const std::vector<float> clean = RandomFloats(kBatch * kLen * kEmbed, 1);
  std::vector<float> query = clean;
  query[(1 * kLen + 2) * kEmbed + 0] = GetParam();
  AttentionMasks masks;
  masks.is_causal = true;
  const Result result = Forward(query, {}, masks), expected = Forward(clean, {}, masks);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t i = 0; i < kLen; ++i) {
      const int64_t row = b * kLen + i;
      if (b == 1 && i >= 2) {
        EXPECT_TRUE(RowIsNaN(result.output, row, kEmbed))
            << "output row " << b << ", " << i;
        EXPECT_TRUE(RowIsNaN(result.weights, row, kLen))
            << "weights row " << b << ", " << i;
      } else {
        EXPECT_TRUE(RowEquals(result.weights, expected.weights, row, kLen))
            << "weights row " << b << ", " << i;
        if (b == 0) {
          EXPECT_TRUE(RowEquals(result.output, expected.output, row, kEmbed));
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Values, NonFiniteValue, ::testing::Values(kNaN, kInf, -kInf),
                         [](const auto& info) {
                           return std::isnan(info.param) ? std::string("nan")
                                  : info.param > 0       ? std::string("plus_inf")
                                                         : std::string("minus_inf");
                         });

// PyTorch's -3.4e38 fill in both masks: each alone makes the row uniform, and so do
// both together (their sum overflows to -inf, which would mask the row to zeros).
TEST(MaskSums, TwoLargestNegativeFillsGiveAUniformRowNotAMaskedOne) {
  const std::vector<float> query = RandomFloats(kBatch * kLen * kEmbed, 1);
  const float fill = std::numeric_limits<float>::lowest();
  std::vector<float> attn_mask(kLen * kLen, 0.0f), padding(kBatch * kLen, 0.0f);
  for (int64_t k = 0; k < kLen; ++k) {
    attn_mask[1 * kLen + k] = fill;  // query 1 of every batch
    padding[0 * kLen + k] = fill;    // every key of batch 0
  }
  AttentionMasks masks;
  masks.attn_mask = TensorView(attn_mask.data(), Shape{kLen, kLen});
  masks.key_padding_mask = TensorView(padding.data(), Shape{kBatch, kLen});
  const Result result = Forward(query, {}, masks);
  for (int64_t i = 0; i < kLen; ++i) {  // batch 0: uniform rows, the overflowing one too
    for (int64_t k = 0; k < kLen; ++k) {
      EXPECT_FLOAT_EQ(result.weights[i * kLen + k], 1.0f / kLen) << "row " << i;
    }
  }
  for (int64_t k = 0; k < kLen; ++k) {  // batch 1, query 1: one fill, uniform
    EXPECT_FLOAT_EQ(result.weights[(kLen + 1) * kLen + k], 1.0f / kLen);
  }
}

// Keys and values far below 1 but finite (down to subnormals): every quantised cache
// stores them (or zeros) and gives finite outputs, as the fp32 cache does; no code of
// 0 x an infinite inverse scale (NaN), no NaN cast to int8.
TEST(TinyKeysAndValues, EveryCacheStorageGivesFiniteOutputsNearTheFp32Ones) {
  LayerSpec spec;
  spec.qkv_bias = false;  // keys and values as tiny as the hidden states
  const OwnedLayer layer = MakeLayer(spec, 4);
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<KvKindSpelling>& kinds = AllKvKinds();
  for (const float magnitude : {1e-40f, 1e-37f, 1e-35f, 1e-30f}) {
    std::vector<float> x = RandomFloats(3 * kEmbed, 5);
    for (float& v : x) v *= magnitude;
    const auto run = [&](const KvKindSpelling& kind) {
      KvCache cache(layer.config, 1, 8, kind.storage, kind.scales);
      std::vector<float> out(x.size());
      attention.ForwardWithCache(TensorView(x.data(), Shape{1, 3, kEmbed}), {}, cache,
                                 MutableTensorView(out.data(), Shape{1, 3, kEmbed}));
      return out;
    };
    const std::vector<float> expected = run(kinds[0]);
    for (const KvKindSpelling& kind : kinds) {
      const std::vector<float> out = run(kind);
      for (float v : out) ASSERT_TRUE(std::isfinite(v)) << kind.name;
      ExpectClose(out, expected, kind.name, 1e-5);
    }
  }
}

}  // namespace
}  // namespace mha::testing

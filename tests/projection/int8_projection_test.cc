// int8 projections (dynamic quantisation): the layer against the fp32
// double-precision baseline within the bound docs/serving.md states, over self- and
// cross-attention, GQA, decoding through a cache, and inputs of zeros.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "mha/kv_cache.hpp"
#include "tests/test_util.h"

namespace mha::testing {
namespace {

class Int8Weights : public ::testing::TestWithParam<WeightDtypeCase> {};

TEST_P(Int8Weights, WithinBoundOfFp32Baseline) {
  ExpectWeightDtypeWithinBound(GetParam(), DType::kInt8, kInt8Bound, 23);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Int8Weights,
    ::testing::Values(WeightDtypeCase{"self", 4, 0, 16, 64, 0, 2, 37, 37, false},
                      WeightDtypeCase{"gqa_causal", 8, 2, 32, 128, 0, 2, 65, 65, true},
                      WeightDtypeCase{"cross_kdim", 4, 0, 8, 32, 20, 3, 9, 40, false},
                      WeightDtypeCase{"bert_like", 12, 0, 64, 768, 0, 1, 48, 48, false},
                      WeightDtypeCase{"decode_rows", 4, 2, 16, 64, 0, 3, 1, 1, false}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Int8Weights, DecodeThroughCacheMatchesFp32Forward) {
  LayerSpec spec;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  spec.head_dim = 16;
  spec.query_dim = 64;
  OwnedLayer layer = MakeLayer(spec, 29);
  const AttentionConfig fp32_config = layer.config;
  layer.config.weight_dtype = DType::kInt8;
  const MultiheadAttention attention(layer.config, layer.weights);
  const int64_t steps = 20;
  const std::vector<float> x = RandomFloats(steps * spec.query_dim, 8);
  KvCache cache(layer.config, 1, steps);
  std::vector<float> out(x.size()), ref(x.size());
  for (int64_t t = 0; t < steps; ++t) {
    attention.ForwardWithCache(
        TensorView(x.data() + t * spec.query_dim, Shape{1, 1, spec.query_dim}), {}, cache,
        MutableTensorView(out.data() + t * spec.query_dim, Shape{1, 1, spec.query_dim}));
  }
  AttentionMasks masks;
  masks.is_causal = true;
  const Shape shape{1, steps, spec.query_dim};
  NaiveMultiheadAttention(fp32_config, layer.weights,
                          {TensorView(x.data(), shape), {}, {}}, masks,
                          {MutableTensorView(ref.data(), shape), {}});
  ExpectClose(out, ref, "int8 decode", kInt8Bound);
}

// An all-zero input quantises exactly: the output is the projections' biases carried
// through attention, as in fp32.
TEST(Int8Weights, ZeroInputGivesTheFp32Output) {
  LayerSpec spec;
  spec.num_heads = 2;
  spec.head_dim = 8;
  spec.query_dim = 16;
  OwnedLayer layer = MakeLayer(spec, 31);
  const AttentionConfig fp32_config = layer.config;
  layer.config.weight_dtype = DType::kInt8;
  const std::vector<float> x(2 * 5 * spec.query_dim, 0.0f);
  const Shape shape{2, 5, spec.query_dim};
  std::vector<float> out(x.size()), ref(x.size());
  MultiheadAttention(layer.config, layer.weights)
      .Forward({TensorView(x.data(), shape), {}, {}}, {},
               {MutableTensorView(out.data(), shape), {}});
  NaiveMultiheadAttention(fp32_config, layer.weights,
                          {TensorView(x.data(), shape), {}, {}}, {},
                          {MutableTensorView(ref.data(), shape), {}});
  ExpectClose(out, ref, "zero input", kInt8Bound);
}

}  // namespace
}  // namespace mha::testing

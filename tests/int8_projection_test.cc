// int8 projections (dynamic quantisation): the layer against the fp32
// double-precision baseline within the bound the README states, over self- and
// cross-attention, GQA, decoding through a cache, and inputs of zeros.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "mha/kv_cache.hpp"
#include "tests/test_util.h"

namespace mha::testing {
namespace {

struct Int8Case {
  const char* name;
  int64_t num_heads, num_kv_heads, head_dim, query_dim, key_dim, batch, query_len,
      key_len;
  bool causal;
};

class Int8Weights : public ::testing::TestWithParam<Int8Case> {};

TEST_P(Int8Weights, WithinBoundOfFp32Baseline) {
  const Int8Case& c = GetParam();
  LayerSpec spec;
  spec.num_heads = c.num_heads;
  spec.num_kv_heads = c.num_kv_heads;
  spec.head_dim = c.head_dim;
  spec.query_dim = c.query_dim;
  spec.key_dim = spec.value_dim = c.key_dim;
  OwnedLayer layer = MakeLayer(spec, 23);
  const AttentionConfig fp32_config = layer.config;
  layer.config.weight_dtype = DType::kInt8;
  const MultiheadAttention attention(layer.config, layer.weights);

  const int64_t kv_dim = c.key_dim ? c.key_dim : c.query_dim;
  const std::vector<float> q = RandomFloats(c.batch * c.query_len * c.query_dim, 5);
  const std::vector<float> kv = RandomFloats(c.batch * c.key_len * kv_dim, 6);
  AttentionInputs inputs{
      TensorView(q.data(), Shape{c.batch, c.query_len, c.query_dim}), {}, {}};
  if (c.key_dim) {
    inputs.key = inputs.value = TensorView(kv.data(), Shape{c.batch, c.key_len, kv_dim});
  }
  AttentionMasks masks;
  masks.is_causal = c.causal;
  const Shape out_shape{c.batch, c.query_len, c.query_dim};
  std::vector<float> out(c.batch * c.query_len * c.query_dim), ref(out.size());
  attention.Forward(inputs, masks, {MutableTensorView(out.data(), out_shape), {}});
  NaiveMultiheadAttention(fp32_config, layer.weights, inputs, masks,
                          {MutableTensorView(ref.data(), out_shape), {}});
  ExpectClose(out, ref, c.name, kInt8Bound);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Int8Weights,
    ::testing::Values(Int8Case{"self", 4, 0, 16, 64, 0, 2, 37, 37, false},
                      Int8Case{"gqa_causal", 8, 2, 32, 128, 0, 2, 65, 65, true},
                      Int8Case{"cross_kdim", 4, 0, 8, 32, 20, 3, 9, 40, false},
                      Int8Case{"bert_like", 12, 0, 64, 768, 0, 1, 48, 48, false},
                      Int8Case{"decode_rows", 4, 2, 16, 64, 0, 3, 1, 1, false}),
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

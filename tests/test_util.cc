// Test helpers shared by every test binary.
#include "tests/test_util.h"

#include <algorithm>
#include <cmath>

#include <sys/resource.h>

namespace mha::testing {

std::vector<float> RandomFloats(size_t count, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

namespace {

Shape InputWeightShape(WeightLayout layout, int64_t in, int64_t heads, int64_t head_dim) {
  const int64_t width = heads * head_dim;
  switch (layout) {
    case WeightLayout::kOutIn:
      return Shape{width, in};
    case WeightLayout::kInOut:
      return Shape{in, width};
    default:
      return Shape{heads, in, head_dim};
  }
}

}  // namespace

std::vector<float> NaiveCausal(const OwnedLayer& layer, const std::vector<float>& x) {
  const int64_t embed = layer.config.query_dim;
  const int64_t tokens = static_cast<int64_t>(x.size()) / embed;
  const TensorView& output_weight = layer.weights.output.weight;
  const int64_t output_dim =
      !output_weight.present() ? layer.config.num_heads * layer.config.head_dim
      : layer.weights.output.layout == WeightLayout::kOutIn ? output_weight.shape[0]
                                                            : output_weight.shape[1];
  std::vector<float> out(tokens * output_dim);
  AttentionMasks causal;
  causal.is_causal = true;
  NaiveMultiheadAttention(
      layer.config, layer.weights,
      {TensorView(x.data(), Shape{1, tokens, embed}), {}, {}}, causal,
      {MutableTensorView(out.data(), Shape{1, tokens, output_dim}), {}});
  return out;
}

OwnedLayer MakeLayer(const LayerSpec& spec, uint32_t seed) {
  OwnedLayer layer;
  layer.config.num_heads = spec.num_heads;
  layer.config.head_dim = spec.head_dim;
  layer.config.query_dim = spec.query_dim;
  layer.config.key_dim = spec.key_dim;
  layer.config.value_dim = spec.value_dim;
  layer.config.num_kv_heads = spec.num_kv_heads;
  const int64_t model = spec.num_heads * spec.head_dim;
  const int64_t heads[3] = {spec.num_heads, layer.config.resolved_num_kv_heads(),
                            layer.config.resolved_num_kv_heads()};
  const int64_t ins[3] = {spec.query_dim, layer.config.resolved_key_dim(),
                          layer.config.resolved_value_dim()};
  Projection* projections[3] = {&layer.weights.query, &layer.weights.key,
                                &layer.weights.value};
  const float init = 1.0f / std::sqrt(static_cast<float>(spec.query_dim));
  for (int i = 0; i < 3; ++i) {
    const int64_t width = heads[i] * spec.head_dim;
    layer.storage[i] = RandomFloats(ins[i] * width, seed + i, init);
    projections[i]->weight =
        TensorView(layer.storage[i].data(),
                   InputWeightShape(spec.layout, ins[i], heads[i], spec.head_dim));
    projections[i]->layout = spec.layout;
    if (spec.qkv_bias) {
      layer.storage[4 + i] = RandomFloats(width, seed + 10 + i, 0.5f);
      projections[i]->bias = TensorView(layer.storage[4 + i].data(), Shape{width});
    }
  }
  if (spec.output_projection) {
    const int64_t out = spec.output_dim ? spec.output_dim : spec.query_dim;
    layer.storage[3] = RandomFloats(model * out, seed + 3, init);
    layer.weights.output.layout = spec.output_layout;
    layer.weights.output.weight =
        TensorView(layer.storage[3].data(), spec.output_layout == WeightLayout::kOutIn
                                                ? Shape{out, model}
                                                : Shape{model, out});
    if (spec.output_bias) {
      layer.storage[7] = RandomFloats(out, seed + 13, 0.5f);
      layer.weights.output.bias = TensorView(layer.storage[7].data(), Shape{out});
    }
  }
  return layer;
}

void ExpectClose(const std::vector<float>& actual, const std::vector<float>& expected,
                 const char* what, double relative) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double max_ref = 0.0, max_err = 0.0;
  size_t worst = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_FALSE(std::isnan(actual[i])) << what << ": NaN at " << i;
    ASSERT_FALSE(std::isnan(expected[i])) << what << ": NaN expected at " << i;
    if (std::isinf(expected[i])) {  // -inf log-sum-exps: exactly
      ASSERT_EQ(actual[i], expected[i]) << what << " at " << i;
      continue;
    }
    max_ref = std::max(max_ref, std::fabs(double{expected[i]}));
    const double err = std::fabs(double{actual[i]} - double{expected[i]});
    if (err > max_err) max_err = err, worst = i;
  }
  const double tolerance = relative * std::max(1.0, max_ref);
  EXPECT_LE(max_err, tolerance) << what << ": worst index " << worst << " got "
                                << actual[worst] << " want " << expected[worst];
}

void ExpectTileProduct(const std::vector<float>& a, const std::vector<double>& b,
                       const std::vector<float>& c, size_t rows, size_t n, size_t depth) {
  for (size_t i = 0; i < rows; ++i) {
    for (size_t j = 0; j < n; ++j) {
      double expected = 0.0, magnitude = 0.0;
      for (size_t k = 0; k < depth; ++k) {
        expected += double{a[i * depth + k]} * b[k * n + j];
        magnitude += std::fabs(double{a[i * depth + k]} * b[k * n + j]);
      }
      ASSERT_NEAR(c[i * n + j], expected, 1e-5 * (magnitude + 1.0))
          << "rows " << rows << " n " << n << " depth " << depth << " at " << i << ", "
          << j;
    }
  }
}

void ExpectWeightDtypeWithinBound(const WeightDtypeCase& c, DType weight_dtype,
                                  double bound, uint32_t seed) {
  LayerSpec spec;
  spec.num_heads = c.num_heads;
  spec.num_kv_heads = c.num_kv_heads;
  spec.head_dim = c.head_dim;
  spec.query_dim = c.query_dim;
  spec.key_dim = spec.value_dim = c.key_dim;
  OwnedLayer layer = MakeLayer(spec, seed);
  const AttentionConfig fp32_config = layer.config;
  layer.config.weight_dtype = weight_dtype;
  const MultiheadAttention attention(layer.config, layer.weights);

  const int64_t kv_dim = c.key_dim ? c.key_dim : c.query_dim;
  const std::vector<float> q =
      RandomFloats(c.batch * c.query_len * c.query_dim, seed + 1);
  const std::vector<float> kv = RandomFloats(c.batch * c.key_len * kv_dim, seed + 2);
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
  ExpectClose(out, ref, c.name, bound);
}

long MaxResidentKiB() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

}  // namespace mha::testing

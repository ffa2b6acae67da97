// WeightLayout addressing and shape checks; the one place that knows the layouts.
#include "src/projection/weight_layout.h"

#include "src/base/check.h"
#include "src/validation/problem.h"

namespace mha::internal {

WeightReader::WeightReader(const Projection& projection, int64_t in_dim, int64_t out_dim,
                           int64_t head_dim)
    : weight_(projection.weight.floats()),
      bias_(projection.bias.floats()),
      layout_(projection.layout),
      in_dim_(in_dim),
      out_dim_(out_dim),
      head_dim_(head_dim) {}

float WeightReader::At(int64_t out, int64_t in) const {
  switch (layout_) {
    case WeightLayout::kOutIn:
      return weight_[out * in_dim_ + in];
    case WeightLayout::kInOut:
      return weight_[in * out_dim_ + out];
    case WeightLayout::kHeadsInHeadDim:
      return weight_[((out / head_dim_) * in_dim_ + in) * head_dim_ + out % head_dim_];
  }
  return 0.0f;
}

float WeightReader::BiasAt(int64_t out) const { return bias_ ? bias_[out] : 0.0f; }

namespace {

void ValidateBias(const char* name, const Projection& projection, int64_t out_dim) {
  if (!projection.bias.present()) return;
  const std::string bias_name = std::string(name) + ".bias";
  CheckTensor(bias_name.c_str(), projection.bias, DType::kFloat32, Shape{out_dim});
}

}  // namespace

void ValidateInputProjection(const char* name, const Projection& projection,
                             int64_t in_dim, int64_t num_heads, int64_t head_dim) {
  const std::string weight_name = std::string(name) + ".weight";
  const int64_t out_dim = num_heads * head_dim;
  Shape expected;
  switch (projection.layout) {
    case WeightLayout::kOutIn:
      expected = Shape{out_dim, in_dim};
      break;
    case WeightLayout::kInOut:
      expected = Shape{in_dim, out_dim};
      break;
    case WeightLayout::kHeadsInHeadDim:
      expected = Shape{num_heads, in_dim, head_dim};
      break;
    default:
      Fail(weight_name, ": unknown layout ", static_cast<int>(projection.layout));
  }
  CheckTensor(weight_name.c_str(), projection.weight, DType::kFloat32, expected);
  ValidateBias(name, projection, out_dim);
}

int64_t ValidateOutputProjection(const Projection& projection, int64_t model_dim) {
  if (!projection.present()) {
    if (projection.bias.present()) Fail("weights.output.bias: given without a weight");
    return model_dim;
  }
  const Shape& shape = projection.weight.shape;
  int64_t out_dim = 0;
  if (projection.layout != WeightLayout::kOutIn &&
      projection.layout != WeightLayout::kInOut &&
      projection.layout != WeightLayout::kHeadsInHeadDim) {
    Fail("weights.output.weight: unknown layout ", static_cast<int>(projection.layout));
  }
  if (projection.layout == WeightLayout::kOutIn && shape.rank() == 2) {
    out_dim = shape[0];
  } else if (projection.layout == WeightLayout::kInOut && shape.rank() == 2) {
    out_dim = shape[1];
  } else if (projection.layout == WeightLayout::kHeadsInHeadDim) {
    Fail("weights.output.weight: layout kHeadsInHeadDim is for input projections only");
  } else {
    Fail("weights.output.weight: expected rank 2, got shape ", shape.ToString());
  }
  if (out_dim < 1)
    Fail("weights.output.weight: empty output width in ", shape.ToString());
  const Shape expected = projection.layout == WeightLayout::kOutIn
                             ? Shape{out_dim, model_dim}
                             : Shape{model_dim, out_dim};
  CheckTensor("weights.output.weight", projection.weight, DType::kFloat32, expected);
  ValidateBias("weights.output", projection, out_dim);
  return out_dim;
}

int64_t ValidateLayer(const AttentionConfig& config, const AttentionWeights& weights) {
  ValidateConfig(config);
  ValidateInputProjection("weights.query", weights.query, config.query_dim,
                          config.num_heads, config.head_dim);
  ValidateInputProjection("weights.key", weights.key, config.resolved_key_dim(),
                          config.resolved_num_kv_heads(), config.head_dim);
  ValidateInputProjection("weights.value", weights.value, config.resolved_value_dim(),
                          config.resolved_num_kv_heads(), config.head_dim);
  return ValidateOutputProjection(weights.output, config.model_dim());
}

}  // namespace mha::internal

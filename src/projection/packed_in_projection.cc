// FromPackedInProjection: views into nn.MultiheadAttention's packed in_proj tensors.
#include "mha/weights.hpp"
#include "src/base/check.h"

namespace mha {

using internal::CheckTensor;
using internal::Fail;

AttentionWeights FromPackedInProjection(TensorView in_proj_weight,
                                        TensorView in_proj_bias,
                                        TensorView out_proj_weight,
                                        TensorView out_proj_bias) {
  const Shape& shape = in_proj_weight.shape;
  // E is bounded before 3 * E is formed, so that the product cannot overflow.
  if (shape.rank() != 2 || shape[1] < 1 || shape[1] > INT64_MAX / 3 ||
      shape[0] != 3 * shape[1]) {
    Fail("in_proj_weight: expected shape [3 * E, E], got ", shape.ToString());
  }
  const int64_t embed_dim = shape[1];
  CheckTensor("in_proj_weight", in_proj_weight, DType::kFloat32, shape);
  if (in_proj_bias.present()) {
    CheckTensor("in_proj_bias", in_proj_bias, DType::kFloat32, Shape{3 * embed_dim});
  }
  AttentionWeights weights;
  Projection* parts[3] = {&weights.query, &weights.key, &weights.value};
  for (int64_t i = 0; i < 3; ++i) {
    parts[i]->weight = TensorView(in_proj_weight.floats() + i * embed_dim * embed_dim,
                                  Shape{embed_dim, embed_dim});
    if (in_proj_bias.present()) {
      parts[i]->bias =
          TensorView(in_proj_bias.floats() + i * embed_dim, Shape{embed_dim});
    }
  }
  weights.output.weight = out_proj_weight;
  weights.output.bias = out_proj_bias;
  return weights;
}

}  // namespace mha

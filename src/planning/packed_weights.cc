// Weight packing: any WeightLayout in, [in, out] row-major out.
#include "src/planning/packed_weights.h"

#include <cmath>

#include "src/kernels/bf16_convert.h"
#include "src/planning/weight_layout.h"

namespace mha::internal {

PackedWeights::PackedWeights(const AttentionConfig& config,
                             const AttentionWeights& weights, int64_t output_dim,
                             bool bf16_matmul)
    : in_dims_{config.query_dim, config.resolved_key_dim(), config.resolved_value_dim()},
      out_dims_{config.model_dim(), config.kv_dim(), config.kv_dim()},
      fused_width_(config.model_dim() + 2 * config.kv_dim()),
      model_dim_(config.model_dim()),
      output_dim_(output_dim) {
  qkv_fused_ = in_dims_[kQuery] == in_dims_[kKey] && in_dims_[kKey] == in_dims_[kValue];
  PackInputs(config, weights);
  PackOutput(weights, model_dim_);
  if (config.weight_dtype == DType::kBFloat16) RoundToBf16(bf16_matmul);
}

void PackedWeights::RoundToBf16(bool keep_bits) {
  std::vector<float>* floats[2] = {&input_weights_, &output_weights_};
  std::vector<uint16_t>* bits[2] = {&input_weights_bf16_, &output_weights_bf16_};
  for (int i = 0; i < 2; ++i) {
    bits[i]->resize(floats[i]->size());
    FloatToBf16(floats[i]->data(), floats[i]->size(), bits[i]->data());
    if (keep_bits) {
      std::vector<float>().swap(*floats[i]);  // free the fp32 copy
    } else {
      Bf16ToFloat(bits[i]->data(), bits[i]->size(), floats[i]->data());
      std::vector<uint16_t>().swap(*bits[i]);
    }
  }
  bf16_bits_ = keep_bits;
}

const void* PackedWeights::Weights(const std::vector<float>& floats,
                                   const std::vector<uint16_t>& bits,
                                   int64_t offset) const {
  if (bf16_bits_) return bits.empty() ? nullptr : bits.data() + offset;
  return floats.empty() ? nullptr : floats.data() + offset;
}

void PackedWeights::PackInputs(const AttentionConfig& config,
                               const AttentionWeights& weights) {
  const Projection* sources[3] = {&weights.query, &weights.key, &weights.value};
  const float scale = config.scale
                          ? *config.scale
                          : 1.0f / std::sqrt(static_cast<float>(config.head_dim));
  const bool has_bias = sources[0]->bias.present() || sources[1]->bias.present() ||
                        sources[2]->bias.present();
  int64_t total = 0;
  for (int input = kQuery; input <= kValue; ++input)
    total += in_dims_[input] * out_dims_[input];
  input_weights_.assign(total, 0.0f);
  if (has_bias) input_bias_.assign(fused_width_, 0.0f);
  for (int input = kQuery; input <= kValue; ++input) {
    const Input which = static_cast<Input>(input);
    const int64_t out_dim = out_dims_[input];
    const WeightReader reader(*sources[input], in_dims_[input], out_dim, config.head_dim);
    const float factor = input == kQuery ? scale : 1.0f;
    float* out = input_weights_.data() + InputOffset(which);
    for (int64_t in = 0; in < in_dims_[input]; ++in) {
      for (int64_t col = 0; col < out_dim; ++col) {
        out[in * InputStride(which) + col] = reader.At(col, in) * factor;
      }
    }
    if (has_bias) {
      for (int64_t col = 0; col < out_dim; ++col) {
        input_bias_[FusedColumn(which) + col] = reader.BiasAt(col) * factor;
      }
    }
  }
}

void PackedWeights::PackOutput(const AttentionWeights& weights, int64_t model_dim) {
  if (!weights.output.present()) return;
  const WeightReader reader(weights.output, model_dim, output_dim_, model_dim);
  output_weights_.resize(model_dim * output_dim_);
  for (int64_t in = 0; in < model_dim; ++in) {
    for (int64_t col = 0; col < output_dim_; ++col) {
      output_weights_[in * output_dim_ + col] = reader.At(col, in);
    }
  }
  if (weights.output.bias.present()) {
    output_bias_.resize(output_dim_);
    for (int64_t col = 0; col < output_dim_; ++col)
      output_bias_[col] = reader.BiasAt(col);
  }
}

int64_t PackedWeights::FusedColumn(Input input) const {
  int64_t column = 0;
  for (int previous = kQuery; previous < input; ++previous) column += out_dims_[previous];
  return column;
}

int64_t PackedWeights::InputOffset(Input input) const {
  // Fused: column block `input` of the shared [in, fused_width] matrix.
  if (qkv_fused_) return FusedColumn(input);
  int64_t offset = 0;
  for (int previous = kQuery; previous < input; ++previous) {
    offset += in_dims_[previous] * out_dims_[previous];
  }
  return offset;
}

int64_t PackedWeights::InputStride(Input input) const {
  return qkv_fused_ ? fused_width_ : out_dims_[input];
}

PackedProjection PackedWeights::FusedQkv() const {
  return {Weights(input_weights_, input_weights_bf16_, 0),
          input_bias_.empty() ? nullptr : input_bias_.data(),
          in_dims_[kQuery],
          fused_width_,
          fused_width_,
          bf16_bits_};
}

PackedProjection PackedWeights::InputProjection(Input input) const {
  return {Weights(input_weights_, input_weights_bf16_, InputOffset(input)),
          input_bias_.empty() ? nullptr : input_bias_.data() + FusedColumn(input),
          in_dims_[input],
          out_dims_[input],
          InputStride(input),
          bf16_bits_};
}

PackedProjection PackedWeights::OutputProjection() const {
  const void* weights = Weights(output_weights_, output_weights_bf16_, 0);
  if (!weights) return {};
  return {weights,     output_bias_.empty() ? nullptr : output_bias_.data(),
          model_dim_,  output_dim_,
          output_dim_, bf16_bits_};
}

}  // namespace mha::internal

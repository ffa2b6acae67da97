// Weight packing: any WeightLayout in, [in, out] row-major out.
#include "src/projection/packed_weights.h"

#include <algorithm>
#include <cmath>

#include "src/projection/weight_layout.h"
#include "src/simd/bf16_convert.h"

namespace mha::internal {

PackedWeights::PackedWeights(const AttentionConfig& config,
                             const AttentionWeights& weights, int64_t output_dim,
                             bool bf16_matmul, int int8_levels)
    : in_dims_{config.query_dim, config.resolved_key_dim(), config.resolved_value_dim()},
      out_dims_{config.model_dim(), config.kv_dim(), config.kv_dim()},
      fused_width_(config.model_dim() + 2 * config.kv_dim()),
      model_dim_(config.model_dim()),
      output_dim_(output_dim) {
  qkv_fused_ = in_dims_[kQuery] == in_dims_[kKey] && in_dims_[kKey] == in_dims_[kValue];
  PackInputs(config, weights);
  PackOutput(weights, model_dim_);
  if (config.weight_dtype == DType::kBFloat16) RoundToBf16(bf16_matmul);
  if (config.weight_dtype == DType::kInt8) QuantizeToInt8(int8_levels);
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
  if (keep_bits) storage_ = WeightStorage::kBFloat16;
}

namespace {

// Quantises W[rows, cols] (row stride `stride`) into `out` with values in
// [-levels, levels], column n's scale into scales[n].
void QuantizeColumns(const float* w, int64_t rows, int64_t cols, int64_t stride,
                     int levels, int8_t* out, float* scales) {
  for (int64_t n = 0; n < cols; ++n) {
    float max_abs = 0.0f;
    for (int64_t k = 0; k < rows; ++k)
      max_abs = std::max(max_abs, std::fabs(w[k * stride + n]));
    // An all-zero column keeps scale 1: its products are 0 whatever the scale.
    scales[n] = max_abs > 0.0f ? max_abs / static_cast<float>(levels) : 1.0f;
    const float inverse = 1.0f / scales[n];
    for (int64_t k = 0; k < rows; ++k) {
      out[k * stride + n] =
          static_cast<int8_t>(std::nearbyint(w[k * stride + n] * inverse));
    }
  }
}

}  // namespace

void PackedWeights::QuantizeToInt8(int levels) {
  input_weights_int8_.resize(input_weights_.size());
  input_scales_.resize(fused_width_);
  for (int input = kQuery; input <= kValue; ++input) {
    const Input which = static_cast<Input>(input);
    const int64_t offset = InputOffset(which);
    QuantizeColumns(input_weights_.data() + offset, in_dims_[input], out_dims_[input],
                    InputStride(which), levels, input_weights_int8_.data() + offset,
                    input_scales_.data() + FusedColumn(which));
  }
  output_weights_int8_.resize(output_weights_.size());
  output_scales_.resize(output_weights_.empty() ? 0 : output_dim_);
  if (!output_weights_.empty()) {
    QuantizeColumns(output_weights_.data(), model_dim_, output_dim_, output_dim_, levels,
                    output_weights_int8_.data(), output_scales_.data());
  }
  std::vector<float>().swap(input_weights_);  // free the fp32 copies
  std::vector<float>().swap(output_weights_);
  storage_ = WeightStorage::kInt8;
}

const void* PackedWeights::Weights(bool output, int64_t offset) const {
  switch (storage_) {
    case WeightStorage::kBFloat16: {
      const auto& bits = output ? output_weights_bf16_ : input_weights_bf16_;
      return bits.empty() ? nullptr : bits.data() + offset;
    }
    case WeightStorage::kInt8: {
      const auto& values = output ? output_weights_int8_ : input_weights_int8_;
      return values.empty() ? nullptr : values.data() + offset;
    }
    case WeightStorage::kFloat32:
      break;
  }
  const auto& floats = output ? output_weights_ : input_weights_;
  return floats.empty() ? nullptr : floats.data() + offset;
}

void PackedWeights::PackInputs(const AttentionConfig& config,
                               const AttentionWeights& weights) {
  const Projection* sources[3] = {&weights.query, &weights.key, &weights.value};
  const float scale = config.scale
                          ? *config.scale
                          : 1.0f / std::sqrt(static_cast<float>(config.head_dim));
  if (config.features.qk_norm) unfolded_query_scale_ = scale;
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
    const float factor = input == kQuery && !config.features.qk_norm ? scale : 1.0f;
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
  return {Weights(false, 0),
          input_bias_.empty() ? nullptr : input_bias_.data(),
          in_dims_[kQuery],
          fused_width_,
          fused_width_,
          storage_,
          input_scales_.empty() ? nullptr : input_scales_.data()};
}

PackedProjection PackedWeights::InputProjection(Input input) const {
  return {Weights(false, InputOffset(input)),
          input_bias_.empty() ? nullptr : input_bias_.data() + FusedColumn(input),
          in_dims_[input],
          out_dims_[input],
          InputStride(input),
          storage_,
          input_scales_.empty() ? nullptr : input_scales_.data() + FusedColumn(input)};
}

PackedProjection PackedWeights::OutputProjection() const {
  const void* weights = Weights(true, 0);
  if (!weights) return {};
  return {weights,
          output_bias_.empty() ? nullptr : output_bias_.data(),
          model_dim_,
          output_dim_,
          output_dim_,
          storage_,
          output_scales_.empty() ? nullptr : output_scales_.data()};
}

}  // namespace mha::internal

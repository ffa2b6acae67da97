// LinearPrimitive's input in the weights' type: a bf16 input widened for fp32 or
// int8 weights, an fp32 input rounded for bf16 weights, or (int8 weights) quantised
// with one scale for the whole input, with the per-column dequantisation scales and
// the bias divided by them.
#include "src/projection/linear_primitive.h"
#include "src/simd/bf16_convert.h"
#include "src/simd/int8_quantize.h"

namespace mha::internal {

const void* LinearPrimitive::PrepareInput(const void* input, bool input_bf16,
                                          int64_t rows, LinearCall& call) const {
  const size_t count = static_cast<size_t>(rows * shape_.in_dim);
  if (input_bf16 && storage_ != WeightStorage::kBFloat16) {
    if (call.float_input.size() < count) call.float_input.resize(count);
    Bf16ToFloat(static_cast<const uint16_t*>(input), count, call.float_input.data());
    input = call.float_input.data();
  }
  if (storage_ == WeightStorage::kBFloat16 && !input_bf16) {
    if (call.bf16_input.size() < count) call.bf16_input.resize(count);
    FloatToBf16(static_cast<const float*>(input), count, call.bf16_input.data());
    return call.bf16_input.data();
  }
  if (storage_ != WeightStorage::kInt8) return input;
  const float* values = static_cast<const float*>(input);
  const float max_abs = MaxAbs(values, count);
  // An all-zero input quantises to zeros whatever the scale: keep 1.
  const float scale = max_abs > 0.0f ? max_abs / 127.0f : 1.0f;
  if (call.int8_input.size() < count) call.int8_input.resize(count);
  QuantizeInt8(values, count, 1.0f / scale, call.int8_input.data());
  const size_t columns = static_cast<size_t>(shape_.out_dim);
  call.output_scales.resize(columns);
  call.scaled_bias.resize(bias_ ? columns : 0);
  for (size_t n = 0; n < columns; ++n) {
    call.output_scales[n] = scale * scales_[n];
    if (bias_) call.scaled_bias[n] = bias_[n] / call.output_scales[n];
  }
  return call.int8_input.data();
}

}  // namespace mha::internal

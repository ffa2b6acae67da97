// Symmetric int8 quantisation of projection inputs (dynamic quantisation for int8
// weights), dispatched to the best SIMD target.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mha::internal {

// max |in[i]| over count values.
float MaxAbs(const float* in, size_t count);

// out[i] = in[i] * inverse_scale rounded to nearest, clamped to [-127, 127].
void QuantizeInt8(const float* in, size_t count, float inverse_scale, int8_t* out);

}  // namespace mha::internal

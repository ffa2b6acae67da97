// RmsNormRows: OLMo 2's QK-norm, an RMSNorm spanning every head of a token, applied
// in place to the layer's projected rows before the kernel stages them (a norm
// within one head is fused into staging instead: head_norm-inl.h).
#pragma once

#include <cstdint>

namespace mha::internal {

// Row r (at rows + r * stride, `width` floats) becomes x * weight / sqrt(mean(x^2)
// + eps), for r < count.
void RmsNormRows(float* rows, int64_t count, int64_t stride, int64_t width,
                 const float* weight, float eps);

}  // namespace mha::internal

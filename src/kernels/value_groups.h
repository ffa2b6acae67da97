// Values quantised per token in groups of channels (KvStorage::kInt4): each
// kValueGroup channels of a token's value get their own int4 scale and minimum, so a
// large channel coarsens its group only. Scalar: run once per written token.
#pragma once

#include <cstdint>

#include "src/kernels/kv_pages.h"

namespace mha::internal {

// Token `position`'s value (value_dim floats) into its page: codes, the token scale
// (1, or NaN with zero codes and group scales for a value with a non-finite
// element: every context it enters is NaN, as with float pages) and the groups'.
void QuantizeValueGroups(const KvPages& pages, int64_t position, const float* value,
                         int64_t value_dim);

}  // namespace mha::internal

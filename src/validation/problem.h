// Problem: the sizes of one forward call, derived from and checked against its
// arguments before anything is computed.
#pragma once

#include <cstdint>

#include "mha/attention.hpp"
#include "src/features/mask_plan.h"

namespace mha::internal {

struct Problem : CallSizes {
  bool self_attention = false;   // key and value are the query tensor itself
  TensorView query, key, value;  // key/value resolved to query when absent
};

void ValidateConfig(const AttentionConfig& config);

// Checks inputs, outputs and options; fails naming the argument and values seen.
Problem ValidateForward(const AttentionConfig& config, int64_t output_dim,
                        const AttentionInputs& inputs, const AttentionOutputs& outputs,
                        const ForwardOptions& options);

}  // namespace mha::internal

// The naive baseline: plain loops in double precision, the yardstick for tests and
// benchmarks. Same arguments and validation as MultiheadAttention::Forward.
#pragma once

#include "mha/attention.hpp"

namespace mha {

void NaiveMultiheadAttention(const AttentionConfig& config,
                             const AttentionWeights& weights,
                             const AttentionInputs& inputs, const AttentionMasks& masks,
                             const AttentionOutputs& outputs,
                             const ForwardOptions& options = {});

}  // namespace mha

// MergeSplits: the splits of a decoding task's key range (task_plan.h), each a context
// normalised over its own keys plus its log-sum-exp, combined into the task's rows.
#pragma once

#include "src/core/task_plan.h"
#include "src/kernel/attention_params.h"

namespace mha::internal {

// Writes the context rows (and log-sum-exp, if asked) of group.whole from its splits'
// partial results at partials + group.offset: their average weighted by
// exp(lse_split - lse). The same bits on every SIMD target.
void MergeSplits(const AttentionParams& params, const SplitGroup& group,
                 const float* partials);

}  // namespace mha::internal

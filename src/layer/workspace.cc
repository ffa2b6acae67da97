// Workspace::bytes: what a pooled workspace holds.
#include "src/layer/workspace.h"

#include "src/layer/packed_step.h"

namespace mha::internal {

size_t Workspace::bytes() const {
  size_t total = linear_threads.scratchpads.capacity() +
                 linear_threads.partial_sums.capacity() * sizeof(float) +
                 (positions.capacity() + new_lengths.capacity() +
                  rotary_positions.capacity() + rotary_starts.capacity()) *
                     sizeof(int64_t) +
                 rotation.bytes() + step.impl().bytes();
  for (const std::vector<float>& buffer : buffers)
    total += buffer.capacity() * sizeof(float);
  for (const std::vector<float>* buffer : {&per_head_weights, &staged_output}) {
    total += buffer->capacity() * sizeof(float);
  }
  total +=
      (core.scratch.capacity() + core.partials.capacity()) * sizeof(float) +
      (core.plan.tasks.capacity() + core.plan.unsplit.capacity()) * sizeof(CoreTask) +
      core.plan.groups.capacity() * sizeof(SplitGroup) + core.kv_pages.bytes() +
      (core.rotation_scratch.capacity()) * sizeof(float) +
      core.key_counts.capacity() * sizeof(int64_t);
  return total;
}

}  // namespace mha::internal

// WorkspacePool: a mutex-guarded free list; a new workspace only when all are busy.
#include "src/attention/workspace.h"

namespace mha::internal {

size_t Workspace::bytes() const {
  size_t total =
      linear_threads.scratchpads.capacity() +
      linear_threads.partial_sums.capacity() * sizeof(float) +
      (positions.capacity() + new_lengths.capacity() + rotary_positions.capacity() +
       batch_rows.capacity() + sequence_ids.capacity() + rotary_lengths.capacity() +
       rotary_starts.capacity() + tree_depths.capacity() + tree_intervals.capacity()) *
          sizeof(int64_t);
  for (const std::vector<float>* buffer :
       {&projections, &merged_heads, &per_head_weights, &chunks, &staged_output}) {
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

size_t WorkspacePool::idle_bytes() {
  const std::lock_guard<std::mutex> lock(mutex_);
  size_t total = 0;
  for (const auto& workspace : free_) total += workspace->bytes();
  return total;
}

WorkspacePool::Lease WorkspacePool::Acquire() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      std::unique_ptr<Workspace> workspace = std::move(free_.back());
      free_.pop_back();
      return Lease(*this, std::move(workspace));
    }
  }
  std::unique_ptr<Workspace> workspace = std::make_unique<Workspace>();
  const std::lock_guard<std::mutex> lock(mutex_);
  free_.reserve(created_ + 1);  // may throw: nothing is leased yet
  ++created_;
  return Lease(*this, std::move(workspace));
}

void WorkspacePool::Release(std::unique_ptr<Workspace> workspace) {
  workspace->tile_rule = TileRule::kByRows;  // each call sets its own
  const std::lock_guard<std::mutex> lock(mutex_);
  free_.push_back(std::move(workspace));  // within the capacity Acquire reserved
}

}  // namespace mha::internal

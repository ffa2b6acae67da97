// WorkspacePool: a mutex-guarded free list; a new workspace only when all are busy.
#include "src/attention/workspace.h"

namespace mha::internal {

WorkspacePool::Lease WorkspacePool::Acquire() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      std::unique_ptr<Workspace> workspace = std::move(free_.back());
      free_.pop_back();
      return Lease(*this, std::move(workspace));
    }
  }
  return Lease(*this, std::make_unique<Workspace>(engine_));
}

void WorkspacePool::Release(std::unique_ptr<Workspace> workspace) {
  const std::lock_guard<std::mutex> lock(mutex_);
  // The list keeps its capacity, so once every concurrent caller has released a
  // workspace once, this push_back no longer allocates.
  free_.push_back(std::move(workspace));
}

}  // namespace mha::internal

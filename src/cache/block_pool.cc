// BlockPool: free list and reference counts.
#include "src/cache/block_pool.h"

namespace mha::internal {

BlockPool::BlockPool(int64_t num_blocks) : references_(num_blocks, 0) {
  free_.reserve(num_blocks);
  // Popped from the back: block 0 first, so a fresh pool fills in order.
  for (int64_t block = num_blocks - 1; block >= 0; --block) {
    free_.push_back(static_cast<int32_t>(block));
  }
}

int32_t BlockPool::Allocate() {
  const int32_t block = free_.back();
  free_.pop_back();
  references_[block] = 1;
  return block;
}

void BlockPool::Share(int32_t block) {
  if (++references_[block] == 2) ++shared_;
}

void BlockPool::Release(int32_t block) {
  const int32_t left = --references_[block];
  if (left == 1) --shared_;
  if (left == 0) free_.push_back(block);
}

}  // namespace mha::internal

// BlockPool: the ids of a paged cache's blocks, reference-counted so that forked
// sequences share blocks. Allocation pops a free list preallocated for every block,
// so it never allocates memory. Not thread-safe (the cache guards it).
#pragma once

#include <cstdint>
#include <vector>

namespace mha::internal {

class BlockPool {
 public:
  explicit BlockPool(int64_t num_blocks);

  int64_t num_blocks() const { return static_cast<int64_t>(references_.size()); }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t shared_blocks() const { return shared_; }
  int32_t references(int32_t block) const { return references_[block]; }

  int32_t Allocate();  // one reference; needs free_blocks() > 0
  void Share(int32_t block);
  void Release(int32_t block);  // drops one reference; at none the block is free

 private:
  std::vector<int32_t> free_, references_;
  int64_t shared_ = 0;  // blocks with more than one reference
};

}  // namespace mha::internal

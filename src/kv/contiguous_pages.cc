// ContiguousPages: sizing and the identity block table.
#include "src/kv/contiguous_pages.h"

namespace mha::internal {

void ContiguousPages::Reset(const BlockLayout& layout, int64_t sequences,
                            int64_t capacity, uint8_t* values_at,
                            int64_t sequence_value_bytes) {
  layout_ = layout;
  blocks_ = (capacity + layout.page_size - 1) / layout.page_size;
  const size_t blocks = static_cast<size_t>(sequences * blocks_);
  if (key_storage_.size() < blocks * layout.block_key_bytes()) {
    key_storage_.resize(blocks * layout.block_key_bytes());
  }
  if (!values_at && value_storage_.size() < blocks * layout.block_value_bytes()) {
    value_storage_.resize(blocks * layout.block_value_bytes());
  }
  keys_ = key_storage_.data();
  values_ = values_at ? values_at : value_storage_.data();
  sequence_value_bytes_ =
      values_at ? sequence_value_bytes : blocks_ * layout.block_value_bytes();
}

KvPages ContiguousPages::operator()(int64_t sequence, int64_t kv_head) const {
  const int64_t first_block = sequence * blocks_;
  return layout_.Pages(keys_ + first_block * layout_.block_key_bytes(),
                       values_ + sequence * sequence_value_bytes_, kv_head);
}

size_t ContiguousPages::bytes() const {
  return key_storage_.capacity() + value_storage_.capacity();
}

}  // namespace mha::internal

// ResolvePositions and CallRotation::Resolve.
#include "src/features/call_rotation.h"

#include <algorithm>
#include <numeric>

#include "src/base/check.h"

namespace mha::internal {

void ResolvePositions(const char* name, const TensorView& position_ids, int64_t batch,
                      int64_t length, bool batched, const int64_t* offsets,
                      const RotaryEmbedding& rotary, int64_t* positions) {
  if (position_ids.present()) {
    if (position_ids.dtype != DType::kInt32 && position_ids.dtype != DType::kInt64) {
      Fail(name, ": expected dtype int32 or int64, got ", DTypeName(position_ids.dtype));
    }
    CheckTensor(name, position_ids, position_ids.dtype,
                batched ? Shape{batch, length} : Shape{length});
  }
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < length; ++i) {
      const int64_t index = b * length + i;
      int64_t position = (offsets ? offsets[b] : 0) + i;
      if (position_ids.present()) {
        position = position_ids.dtype == DType::kInt32
                       ? static_cast<const int32_t*>(position_ids.data)[index]
                       : static_cast<const int64_t*>(position_ids.data)[index];
      }
      if (position < 0 || position >= rotary.max_positions()) {
        Fail(name, "[", b, ", ", i, "]: position ", position,
             " is outside the rotary table [0, ", rotary.max_positions(),
             ") (rotary.max_positions)");
      }
      positions[index] = position;
    }
  }
}

RotaryRows CallRotation::Resolve(const RotaryEmbedding& rotary, const int64_t* positions,
                                 int64_t rows, const int64_t* starts,
                                 const int64_t* counts, int64_t sequences,
                                 const int64_t* lengths) {
  if (!rotary.dynamic()) return {positions, &rotary};
  row_lengths_.resize(static_cast<size_t>(rows));
  for (int64_t s = 0; s < sequences; ++s) {
    const int64_t end = counts ? starts[s] + counts[s] : starts[s + 1];
    int64_t length = 0;  // transformers' seq_len: the largest position + 1
    for (int64_t r = starts[s]; r < end; ++r) length = std::max(length, positions[r] + 1);
    if (lengths) length = lengths[s];
    std::fill(row_lengths_.begin() + starts[s], row_lengths_.begin() + starts[s + 1],
              length);
  }
  rotary.CallTable(positions, row_lengths_.data(), rows, table_);
  row_indices_.resize(static_cast<size_t>(rows));
  std::iota(row_indices_.begin(), row_indices_.end(), int64_t{0});
  return {row_indices_.data(), &*table_};
}

}  // namespace mha::internal

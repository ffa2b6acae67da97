// ResolvePositions: checked rotary positions.
#include "src/rotary/positions.h"

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

}  // namespace mha::internal

// AttendHead: scaled dot-product attention for one (batch, head), dispatched at run
// time to the best SIMD target (Highway). The caller has already folded the scale
// into the query projection.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/masks/mask_plan.h"

namespace mha::internal {

struct HeadTask {
  int64_t batch = 0, head = 0;
  int64_t query_len = 0, key_len = 0, head_dim = 0;
  // Rows of this head inside the projection matrices; row r starts at
  // pointer + r * stride and holds head_dim floats.
  const float* query = nullptr;
  const float* key = nullptr;
  const float* value = nullptr;
  int64_t query_stride = 0, key_stride = 0, value_stride = 0;
  // Context rows are written the same way, into the merged [Sq, model_dim] matrix.
  float* context = nullptr;
  int64_t context_stride = 0;
  // Optional [Sq, Sk] attention probabilities of this head.
  float* probabilities = nullptr;
};

// Floats of per-thread scratch AttendHead needs for a task of these sizes.
size_t AttendHeadScratchFloats(int64_t key_len, int64_t head_dim);

void AttendHead(const HeadTask& task, const MaskPlan& masks, float* scratch);

}  // namespace mha::internal

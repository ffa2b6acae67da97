// HeadNorm: QK-norm (Qwen 3, Gemma 3) as the kernel sees it: the RMSNorm weight of
// one head's row, applied to a query or key row as it is staged, before rotation.
#pragma once

namespace mha::internal {

struct HeadNorm {
  const float* weight = nullptr;  // [head_dim], Gemma's 1 + w folded in; null: none
  float eps = 0.0f;

  bool enabled() const { return weight != nullptr; }
};

}  // namespace mha::internal

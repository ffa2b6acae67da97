// MaskPlan: every mask of one forward call, checked once and read per (batch, head,
// query) row. Causal and length masks become a key range [0, KeyEnd) so that the
// kernels skip masked keys instead of computing and discarding them; tensor masks
// are added to the scores (0, -inf or the float given).
#pragma once

#include <algorithm>
#include <cstdint>

#include "mha/masks.hpp"
#include "src/api/problem.h"

namespace mha::internal {

class MaskPlan {
 public:
  MaskPlan(const AttentionMasks& masks, const Problem& problem, int64_t num_heads);

  // Decoding over a KV cache: causal, bottom-right aligned. Query i of batch b sits at
  // position first_positions[b] + i and sees keys 0 .. first_positions[b] + i.
  static MaskPlan ForCache(const int64_t* first_positions, int64_t key_capacity);

  // Keys at index >= KeyEnd(batch, query) are masked (by is_causal or key_lengths).
  int64_t KeyEnd(int64_t batch, int64_t query) const {
    const int64_t end = key_lengths_ ? std::min(KeyLength(batch), key_len_) : key_len_;
    if (!is_causal_) return end;
    const int64_t position = (first_positions_ ? first_positions_[batch] : 0) + query;
    return std::min(end, position + 1);
  }

  // True when attn_mask or key_padding_mask is given.
  bool has_tensor_masks() const { return attn_.data || padding_.data; }

  // Additive value of the tensor masks for one score: 0, -inf, or attn_mask's and
  // key_padding_mask's floats summed (kTorch convention).
  float TensorMaskAt(int64_t batch, int64_t head, int64_t query, int64_t key) const;

  // row[k] += TensorMaskAt(batch, head, query, first_key + k) for k in [0, count).
  void AddTensorMasks(int64_t batch, int64_t head, int64_t query, int64_t first_key,
                      int64_t count, float* row) const;

 private:
  MaskPlan() = default;

  // A bool or float mask addressed by (batch, head, query, key) strides; a zero
  // stride broadcasts that axis.
  struct StridedMask {
    const void* data = nullptr;
    DType dtype = DType::kFloat32;
    int64_t stride[4] = {};
    float At(int64_t offset, MaskConvention convention) const;
  };

  static StridedMask PlanAttnMask(const TensorView& mask, const Problem& problem,
                                  int64_t num_heads);
  static StridedMask PlanKeyPaddingMask(const TensorView& mask, const Problem& problem);
  void PlanKeyLengths(const TensorView& lengths, const Problem& problem);
  int64_t KeyLength(int64_t batch) const;  // key_lengths[batch], or Sk without them

  bool is_causal_ = false;
  int64_t key_len_ = 0;
  const int64_t* first_positions_ = nullptr;  // per batch, with ForCache
  const void* key_lengths_ = nullptr;
  DType key_lengths_dtype_ = DType::kInt64;
  MaskConvention convention_ = MaskConvention::kTorch;
  StridedMask attn_, padding_;
};

}  // namespace mha::internal

// MaskPlan: mask validation, conventions and addressing.
#include "src/features/mask_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "src/base/check.h"

namespace mha::internal {
namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();
constexpr float kUnmaskable = std::numeric_limits<float>::infinity();
constexpr float kLargest = std::numeric_limits<float>::max();

void CheckMaskDType(const char* name, const TensorView& mask) {
  if (mask.dtype != DType::kBool && mask.dtype != DType::kFloat32) {
    Fail(name, ": expected dtype bool or float32, got ", DTypeName(mask.dtype));
  }
}

std::string IndexOf(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.rank());
  for (int axis = shape.rank() - 1; axis >= 0; --axis) {
    index[axis] = flat % shape[axis];
    flat /= shape[axis];
  }
  std::string text;
  for (const int64_t i : index) text += (text.empty() ? "" : ", ") + std::to_string(i);
  return "[" + text + "]";
}

// A float mask holds numbers to add or zero / non-zero: NaN means neither, and an
// added +inf would turn its scores into NaN.
void CheckMaskValues(const char* name, const TensorView& mask, bool floats_added) {
  if (mask.dtype != DType::kFloat32) return;
  const float* values = mask.floats();
  const int64_t count = CheckedNumElements(name, mask.shape, sizeof(float));
  for (int64_t i = 0; i < count; ++i) {
    const float value = values[i];
    if (std::isnan(value) || (floats_added && value == kUnmaskable)) {
      Fail(name, IndexOf(i, mask.shape), ": ", value,
           " is not a mask value (NaN and +inf are refused; -inf masks)");
    }
  }
}

}  // namespace

MaskPlan::MaskReading MaskPlan::ReadingOf(MaskConvention convention, bool attn_mask) {
  switch (convention) {
    case MaskConvention::kTorch:
      return {true, true};
    case MaskConvention::kSdpa:  // key_padding_mask keeps nn.MultiheadAttention's
      return {!attn_mask, true};
    case MaskConvention::kZeroMeansMasked:
      return {false, false};
  }
  Fail("masks.convention: unknown value ", static_cast<int>(convention));
}

float MaskPlan::StridedMask::At(int64_t offset) const {
  if (dtype == DType::kBool) {
    // Read as a byte: any non-zero byte is true, without relying on bool's values.
    const bool value = static_cast<const uint8_t*>(data)[offset] != 0;
    return value == reading.true_masks ? kMasked : 0.0f;
  }
  const float value = static_cast<const float*>(data)[offset];
  if (reading.floats_added) return value;
  return value == 0.0f ? kMasked : 0.0f;
}

MaskPlan::MaskPlan(const AttentionMasks& masks, const AttentionFeatures& features,
                   const CallSizes& sizes, int64_t num_heads)
    : is_causal_(masks.is_causal), key_len_(sizes.key_len) {
  const MaskReading attn_reading = ReadingOf(masks.convention, true);
  const MaskReading padding_reading = ReadingOf(masks.convention, false);
  if (masks.causal_alignment == CausalAlignment::kBottomRight) {
    query_offset_ = sizes.key_len - sizes.query_len;
  } else if (masks.causal_alignment != CausalAlignment::kTopLeft) {
    Fail("masks.causal_alignment: unknown value ",
         static_cast<int>(masks.causal_alignment));
  }
  PlanWindow(features);
  if (masks.attn_mask.present()) {
    attn_ = PlanAttnMask(masks.attn_mask, sizes, num_heads);
    attn_.reading = attn_reading;
    CheckMaskValues("masks.attn_mask", masks.attn_mask, attn_reading.floats_added);
  }
  if (masks.key_padding_mask.present()) {
    padding_ = PlanKeyPaddingMask(masks.key_padding_mask, sizes);
    padding_.reading = padding_reading;
    CheckMaskValues("masks.key_padding_mask", masks.key_padding_mask,
                    padding_reading.floats_added);
  }
  if (masks.key_lengths.present()) PlanKeyLengths(masks.key_lengths, sizes);
}

MaskPlan MaskPlan::ForCache(const int64_t* first_positions, int64_t key_capacity,
                            const AttentionFeatures& features, const TokenTree& tree) {
  MaskPlan plan;
  plan.is_causal_ = true;
  plan.key_len_ = key_capacity;
  plan.first_positions_ = first_positions;
  plan.PlanWindow(features);
  plan.tree_ = tree;
  return plan;
}

void MaskPlan::PlanWindow(const AttentionFeatures& features) {
  // Windows wider than any position difference mask nothing more: clamped, so that
  // position +- window cannot overflow.
  constexpr int64_t kWidest = int64_t{1} << 62;
  window_ = std::min(features.sliding_window.value_or(0), kWidest);
  window_right_ = std::min(features.sliding_window_right.value_or(-1), kWidest);
  chunk_ = std::min(features.attention_chunk_size.value_or(0), kWidest);
}

MaskPlan::StridedMask MaskPlan::PlanAttnMask(const TensorView& mask,
                                             const CallSizes& sizes, int64_t num_heads) {
  CheckMaskDType("masks.attn_mask", mask);
  const int64_t b = sizes.batch_size, h = num_heads, sq = sizes.query_len,
                sk = sizes.key_len;
  const Shape& shape = mask.shape;
  StridedMask plan{mask.data, mask.dtype, {0, 0, sk, 1}, {}};
  if (shape.rank() == 2 && shape == Shape{sq, sk}) {
    // [Sq, Sk]: shared by every batch and head.
  } else if (shape.rank() == 3 && shape == Shape{b * h, sq, sk}) {
    plan.stride[0] = h * sq * sk;
    plan.stride[1] = sq * sk;
  } else if (shape.rank() == 4) {
    const int64_t target[4] = {b, h, sq, sk};
    int64_t stride = 1;
    for (int axis = 3; axis >= 0; --axis) {
      if (shape[axis] != target[axis] && shape[axis] != 1) {
        Fail("masks.attn_mask: shape ", shape.ToString(), " does not broadcast to [", b,
             ", ", h, ", ", sq, ", ", sk, "] (axis ", axis, ")");
      }
      plan.stride[axis] = shape[axis] == 1 ? 0 : stride;
      stride *= shape[axis];
    }
  } else {
    Fail("masks.attn_mask: expected shape [", sq, ", ", sk, "], [", b * h, ", ", sq, ", ",
         sk, "] or [", b, " or 1, ", h, " or 1, ", sq, " or 1, ", sk, " or 1], got ",
         shape.ToString());
  }
  CheckTensor("masks.attn_mask", mask, mask.dtype, shape);
  return plan;
}

MaskPlan::StridedMask MaskPlan::PlanKeyPaddingMask(const TensorView& mask,
                                                   const CallSizes& sizes) {
  CheckMaskDType("masks.key_padding_mask", mask);
  const Shape expected =
      sizes.batched ? Shape{sizes.batch_size, sizes.key_len} : Shape{sizes.key_len};
  CheckTensor("masks.key_padding_mask", mask, mask.dtype, expected);
  return StridedMask{mask.data, mask.dtype, {sizes.key_len, 0, 0, 1}, {}};
}

void MaskPlan::PlanKeyLengths(const TensorView& lengths, const CallSizes& sizes) {
  if (lengths.dtype != DType::kInt32 && lengths.dtype != DType::kInt64) {
    Fail("masks.key_lengths: expected dtype int32 or int64, got ",
         DTypeName(lengths.dtype));
  }
  CheckTensor("masks.key_lengths", lengths, lengths.dtype, Shape{sizes.batch_size});
  key_lengths_ = lengths.data;
  key_lengths_dtype_ = lengths.dtype;
  for (int64_t b = 0; b < sizes.batch_size; ++b) {
    const int64_t length = KeyLength(b);
    if (length < 0 || length > sizes.key_len) {
      Fail("masks.key_lengths[", b, "]: must be in [0, ", sizes.key_len, "], got ",
           length);
    }
  }
}

int64_t MaskPlan::KeyLength(int64_t batch) const {
  if (!key_lengths_) return key_len_;
  return key_lengths_dtype_ == DType::kInt32
             ? static_cast<const int32_t*>(key_lengths_)[batch]
             : static_cast<const int64_t*>(key_lengths_)[batch];
}

float MaskPlan::TensorMaskAt(int64_t batch, int64_t head, int64_t query,
                             int64_t key) const {
  const float attn = attn_.data
                         ? attn_.At(batch * attn_.stride[0] + head * attn_.stride[1] +
                                    query * attn_.stride[2] + key * attn_.stride[3])
                         : 0.0f;
  const float padding =
      padding_.data ? padding_.At(batch * padding_.stride[0] + key * padding_.stride[3])
                    : 0.0f;
  const float sum = attn + padding;
  // Only -inf masks: two finite values whose sum overflows stay finite, as each
  // alone would (PyTorch's -3.4e38 fills make a row uniform, not masked).
  if (std::isinf(sum) && std::isfinite(attn) && std::isfinite(padding)) {
    return std::copysign(kLargest, sum);
  }
  return sum;
}

void MaskPlan::AddTensorMasks(int64_t batch, int64_t head, int64_t query,
                              int64_t first_key, int64_t count, float* row) const {
  if (attn_.data || padding_.data) {
    for (int64_t k = 0; k < count; ++k)
      row[k] += TensorMaskAt(batch, head, query, first_key + k);
  }
  if (!tree_.present()) return;
  // Cached keys are all visible; of the new ones, the query's ancestors.
  const int64_t first_new = first_positions_[batch];
  const int64_t key_row = tree_.rows[batch] + first_key - first_new;  // key k's: + k
  const int64_t place = tree_.preorder[tree_.rows[batch] + query];
  for (int64_t k = std::max<int64_t>(0, first_new - first_key); k < count; ++k) {
    const int64_t key = key_row + k;
    if (!(tree_.preorder[key] <= place && place < tree_.subtree_end[key])) {
      row[k] = kMasked;
    }
  }
}

}  // namespace mha::internal

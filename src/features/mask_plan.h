// MaskPlan: every mask of one forward call, checked once and read per (batch, head,
// query) row. Causal, length and sliding-window masks become a key range
// [KeyBegin, KeyEnd) so that the kernels skip masked keys instead of computing and
// discarding them; tensor masks are added to the scores (0, -inf or the float given).
#pragma once

#include <algorithm>
#include <cstdint>

#include "mha/features.hpp"
#include "mha/masks.hpp"
#include "mha/tensor.hpp"

namespace mha::internal {

// The sizes masks are checked against: B, Sq and Sk, and whether the call's tensors
// have a batch axis.
struct CallSizes {
  int64_t batch_size = 0;
  int64_t query_len = 0;  // Sq
  int64_t key_len = 0;    // Sk
  bool batched = true;    // false: [S, dim] inputs, outputs without the batch axis
};

// Token trees (speculative decoding, PackedBatch::tree_parents): among the new keys
// of batch b (from its first position on), its query i sees only its ancestors and
// itself. Each row holds its place in a depth-first order of its sequence's tree and
// the end of its subtree there, so key t is an ancestor of query i when
// preorder[t] <= preorder[i] < subtree_end[t] (rows: rows[b] + t, rows[b] + i):
// two numbers a token, where ancestor bits would cost tokens^2 / 8 bytes.
struct TokenTree {
  const int64_t* preorder = nullptr;
  const int64_t* subtree_end = nullptr;
  const int64_t* rows = nullptr;  // batch b's first row
  bool present() const { return preorder != nullptr; }
};

class MaskPlan {
 public:
  // features: the sliding window and the attention chunk (checked by
  // ValidateFeatures).
  MaskPlan(const AttentionMasks& masks, const AttentionFeatures& features,
           const CallSizes& sizes, int64_t num_heads);

  // Decoding over a KV cache: causal, bottom-right aligned. Query i of batch b sits at
  // position first_positions[b] + i and sees keys 0 .. first_positions[b] + i (and
  // only the window's and the chunk's).
  // With a token tree, new keys outside a query's ancestors are masked too.
  static MaskPlan ForCache(const int64_t* first_positions, int64_t key_capacity,
                           const AttentionFeatures& features, const TokenTree& tree = {});

  // Position of a query among the keys (causal alignment, or a cache's offset).
  int64_t QueryPosition(int64_t batch, int64_t query) const {
    return (first_positions_ ? first_positions_[batch] : query_offset_) + query;
  }

  // Keys at index < KeyBegin(batch, query) are masked (by the sliding window or the
  // attention chunk).
  int64_t KeyBegin(int64_t batch, int64_t query) const {
    const int64_t position = QueryPosition(batch, query);
    int64_t begin = 0;
    if (window_ > 0) begin = std::max<int64_t>(begin, position - window_ + 1);
    if (chunk_ > 0) begin = std::max<int64_t>(begin, ChunkStart(position));
    return begin;
  }

  // Keys at index >= KeyEnd(batch, query) are masked (by is_causal, key_lengths, the
  // window's right side or the attention chunk).
  int64_t KeyEnd(int64_t batch, int64_t query) const {
    int64_t end = key_lengths_ ? std::min(KeyLength(batch), key_len_) : key_len_;
    const int64_t position = QueryPosition(batch, query);
    if (is_causal_) end = std::min(end, position + 1);
    if (window_right_ >= 0) end = std::min(end, position + window_right_ + 1);
    if (chunk_ > 0) end = std::min(end, ChunkStart(position) + chunk_);
    return std::max<int64_t>(0, end);
  }

  // True when attn_mask, key_padding_mask or a token tree is given.
  bool has_tensor_masks() const { return attn_.data || padding_.data || tree_.present(); }

  // Additive value of the tensor masks for one score: 0, -inf, or attn_mask's and
  // key_padding_mask's floats summed (as the convention reads them).
  float TensorMaskAt(int64_t batch, int64_t head, int64_t query, int64_t key) const;

  // row[k] += TensorMaskAt(batch, head, query, first_key + k) for k in [0, count).
  void AddTensorMasks(int64_t batch, int64_t head, int64_t query, int64_t first_key,
                      int64_t count, float* row) const;

 private:
  MaskPlan() = default;

  // How a mask's elements read under its convention (mha/masks.hpp): whether a true
  // bool masks, and whether floats are added (else zero masks).
  struct MaskReading {
    bool true_masks = true;
    bool floats_added = true;
  };
  static MaskReading ReadingOf(MaskConvention convention, bool attn_mask);

  // A bool or float mask addressed by (batch, head, query, key) strides; a zero
  // stride broadcasts that axis.
  struct StridedMask {
    const void* data = nullptr;
    DType dtype = DType::kFloat32;
    int64_t stride[4] = {};
    MaskReading reading;
    float At(int64_t offset) const;
  };

  static StridedMask PlanAttnMask(const TensorView& mask, const CallSizes& sizes,
                                  int64_t num_heads);
  static StridedMask PlanKeyPaddingMask(const TensorView& mask, const CallSizes& sizes);
  void PlanKeyLengths(const TensorView& lengths, const CallSizes& sizes);
  int64_t KeyLength(int64_t batch) const;  // key_lengths[batch], or Sk without them

  void PlanWindow(const AttentionFeatures& features);
  // C * floor(position / C) for the attention chunk C, rounding down below 0 too.
  int64_t ChunkStart(int64_t position) const {
    const int64_t chunk =
        position >= 0 ? position / chunk_ : -((-position - 1) / chunk_) - 1;
    return chunk * chunk_;
  }

  bool is_causal_ = false;
  int64_t key_len_ = 0;
  int64_t query_offset_ = 0;  // Sk - Sq when bottom-right aligned
  int64_t window_ = 0, window_right_ = -1;
  int64_t chunk_ = 0;                         // attention chunk size; 0: none
  const int64_t* first_positions_ = nullptr;  // per batch, with ForCache
  const void* key_lengths_ = nullptr;
  DType key_lengths_dtype_ = DType::kInt64;
  StridedMask attn_, padding_;
  TokenTree tree_;
};

}  // namespace mha::internal

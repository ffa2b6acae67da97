// MaskPlan read directly: the key range [KeyBegin, KeyEnd) of every row equals the
// keys a plain per-key predicate leaves open (causal either aligned, key lengths,
// windows left and right, a KV cache's positions), empty where none is; tensor masks
// broadcast over size-1 axes and read both conventions.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "src/features/mask_plan.h"
#include "tests/test_util.h"

namespace mha::testing {
namespace {

using internal::CallSizes;
using internal::MaskPlan;

struct RangeCase {
  int64_t batch, query_len, key_len;
  bool causal, bottom_right;
  int64_t window, window_right;  // 0 / -1: none
  bool lengths;
};

bool Open(const RangeCase& c, int64_t length, int64_t position, int64_t j) {
  if (j >= length) return false;
  if (c.causal && j > position) return false;
  if (c.window > 0 && position - j >= c.window) return false;
  return !(c.window_right >= 0 && j - position > c.window_right);
}

TEST(MaskPlan, KeyRangesAreExactlyTheOpenKeys) {
  std::mt19937 rng(5);
  auto pick = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 400; ++trial) {
    const RangeCase c{pick(1, 3),
                      pick(1, 20),
                      pick(1, 40),
                      pick(0, 1) == 1,
                      pick(0, 1) == 1,
                      pick(0, 2) ? 0 : pick(1, 12),
                      pick(0, 2) ? -1 : pick(0, 8),
                      pick(0, 1) == 1};
    std::vector<int64_t> lengths;
    for (int64_t b = 0; b < c.batch; ++b) lengths.push_back(pick(0, c.key_len));
    AttentionMasks masks;
    masks.is_causal = c.causal;
    if (c.bottom_right) masks.causal_alignment = CausalAlignment::kBottomRight;
    if (c.lengths) {
      masks.key_lengths = TensorView(lengths.data(), DType::kInt64, Shape{c.batch});
    }
    AttentionFeatures features;
    if (c.window > 0) features.sliding_window = c.window;
    if (c.window_right >= 0) features.sliding_window_right = c.window_right;
    CallSizes sizes;
    sizes.batch_size = c.batch, sizes.query_len = c.query_len, sizes.key_len = c.key_len;
    const MaskPlan plan(masks, features, sizes, 2);
    for (int64_t b = 0; b < c.batch; ++b) {
      const int64_t length = c.lengths ? lengths[b] : c.key_len;
      for (int64_t i = 0; i < c.query_len; ++i) {
        const int64_t position = i + (c.bottom_right ? c.key_len - c.query_len : 0);
        ASSERT_EQ(plan.QueryPosition(b, i), position);
        const int64_t begin = plan.KeyBegin(b, i), end = plan.KeyEnd(b, i);
        for (int64_t j = 0; j < c.key_len; ++j) {
          ASSERT_EQ(j >= begin && j < end, Open(c, length, position, j))
              << "trial " << trial << " batch " << b << " query " << i << " key " << j;
        }
      }
    }
  }
}

TEST(MaskPlan, CachePositionsAreCausalFromEachSequencesOffset) {
  const int64_t first_positions[2] = {0, 30};
  AttentionFeatures features;
  features.sliding_window = 8;
  const MaskPlan plan = MaskPlan::ForCache(first_positions, 64, features);
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t i = 0; i < 5; ++i) {
      const int64_t p = first_positions[b] + i;
      EXPECT_EQ(plan.QueryPosition(b, i), p);
      EXPECT_EQ(plan.KeyEnd(b, i), p + 1);
      EXPECT_EQ(plan.KeyBegin(b, i), std::max<int64_t>(0, p - 7));
    }
  }
}

TEST(MaskPlan, TensorMasksBroadcastAndFollowTheirConvention) {
  CallSizes sizes;
  sizes.batch_size = 2, sizes.query_len = 3, sizes.key_len = 4;
  // [1, H=2, 1, Sk] float: broadcast over batch and queries.
  const std::vector<float> attn = {0.5f, -INFINITY, 0.0f, 2.0f, 1.0f, 1.0f, -1.0f, 0.0f};
  const uint8_t padding[8] = {0, 0, 0, 1, 1, 0, 0, 0};  // [B, Sk] bool: true = masked
  AttentionMasks masks;
  masks.attn_mask = TensorView(attn.data(), Shape{1, 2, 1, 4});
  masks.key_padding_mask = TensorView(padding, DType::kBool, Shape{2, 4});
  const MaskPlan plan(masks, {}, sizes, 2);
  ASSERT_TRUE(plan.has_tensor_masks());
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t i = 0; i < 3; ++i) {
        for (int64_t j = 0; j < 4; ++j) {
          const float expected = padding[b * 4 + j] ? -INFINITY : attn[h * 4 + j];
          ASSERT_EQ(plan.TensorMaskAt(b, h, i, j), expected) << b << h << i << j;
        }
      }
    }
  }
  // Zero means masked: non-zero floats and true bools attend (add 0).
  masks.convention = MaskConvention::kZeroMeansMasked;
  const MaskPlan zero(masks, {}, sizes, 2);
  EXPECT_EQ(zero.TensorMaskAt(0, 0, 0, 0), -INFINITY);  // padding false: masked
  EXPECT_EQ(zero.TensorMaskAt(0, 0, 1, 3), 0.0f);       // 2.0 and true: open
  EXPECT_EQ(zero.TensorMaskAt(1, 0, 2, 2), -INFINITY);  // attn 0.0: masked
}

}  // namespace
}  // namespace mha::testing

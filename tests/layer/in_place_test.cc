// The output may be the query's own memory (docs/api.md, "In place"): Forward (whole,
// and with queries run in chunks under a small workspace budget, where causal
// self-attention keeps V pages in the output buffer), ForwardWithCache and
// ForwardPacked write the same bits into the query's buffer as into a separate one.
#include <gtest/gtest.h>

#include <vector>

#include "tests/test_util.h"

namespace mha::testing {
namespace {

constexpr int64_t kBatch = 2, kSeq = 160, kDim = 32;

OwnedLayer Layer() {
  return MakeLayer(LayerSpec{4, 8, 2, kDim, 0, 0, WeightLayout::kOutIn, true, true,
                             WeightLayout::kOutIn, kDim, true},
                   7);
}

TEST(InPlace, ForwardWritesTheSameBitsOverItsQuery) {
  const OwnedLayer layer = Layer();
  const MultiheadAttention attention(layer.config, layer.weights);
  const Shape shape{kBatch, kSeq, kDim};
  for (const bool causal : {false, true}) {
    for (const double budget : {64.0 * (1 << 20), 16.0 * 1024}) {  // whole; chunked
      ForwardOptions options;
      options.workspace_budget_bytes = budget;
      AttentionMasks masks;
      masks.is_causal = causal;
      std::vector<float> x = RandomFloats(kBatch * kSeq * kDim, 3);
      std::vector<float> separate(x.size());
      attention.Forward({TensorView(x.data(), shape), {}, {}}, masks,
                        {MutableTensorView(separate.data(), shape), {}}, options);
      attention.Forward({TensorView(x.data(), shape), {}, {}}, masks,
                        {MutableTensorView(x.data(), shape), {}}, options);
      EXPECT_EQ(x, separate) << "causal " << causal << ", budget " << budget;
    }
  }
}

TEST(InPlace, CachedAndPackedStepsWriteTheSameBitsOverTheirQuery) {
  const OwnedLayer layer = Layer();
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<float> tokens = RandomFloats(kSeq * kDim, 4);
  std::vector<float> separate(tokens.size()), in_place = tokens;
  KvCache first(layer.config, 1, kSeq), second(layer.config, 1, kSeq);
  const Shape prompt{1, kSeq - 1, kDim}, step{1, 1, kDim};
  attention.ForwardWithCache(TensorView(tokens.data(), prompt), {}, first,
                             MutableTensorView(separate.data(), prompt));
  attention.ForwardWithCache(TensorView(in_place.data(), prompt), {}, second,
                             MutableTensorView(in_place.data(), prompt));
  const size_t last = (kSeq - 1) * kDim;
  attention.ForwardWithCache(TensorView(tokens.data() + last, step), {}, first,
                             MutableTensorView(separate.data() + last, step));
  attention.ForwardWithCache(TensorView(in_place.data() + last, step), {}, second,
                             MutableTensorView(in_place.data() + last, step));
  EXPECT_EQ(in_place, separate);

  // Two sequences in one packed step, into a separate buffer and over the query.
  PagedKvCacheOptions options;
  options.num_blocks = 2 * (kSeq / 16 + 1), options.max_sequences = 2;
  std::vector<int64_t> ids = {0, 1}, counts = {kSeq, kSeq}, starts = {0, kSeq, 2 * kSeq};
  const PackedBatch batch{TensorView(ids.data(), DType::kInt64, Shape{2}),
                          TensorView(starts.data(), DType::kInt64, Shape{3})};
  const Shape rows{2 * kSeq, kDim};
  std::vector<float> packed = RandomFloats(2 * kSeq * kDim, 5);
  std::vector<float> packed_separate(packed.size());
  for (std::vector<float>* out : {&packed_separate, &packed}) {
    PagedKvCache paged(layer.config, options);
    paged.AddSequence(0);
    paged.AddSequence(1);
    paged.AppendSlots(ids.data(), counts.data(), 2);
    attention.ForwardPacked(TensorView(packed.data(), rows), batch, paged, 0,
                            MutableTensorView(out->data(), rows));
  }
  EXPECT_EQ(packed, packed_separate);
}

}  // namespace
}  // namespace mha::testing

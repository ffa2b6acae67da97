// Head sharding: the shards' outputs sum to the full layer's output, in every weight
// layout, with GQA, features, sinks and KV caches; bad shards are clear errors.
#include <gtest/gtest.h>

#include <vector>

#include "tests/test_util.h"

namespace mha::testing {
namespace {

struct ShardCase {
  const char* name;
  LayerSpec spec;
  int64_t world_size;
  bool alibi, sinks, rotary;
};

void PrintTo(const ShardCase& c, std::ostream* os) { *os << c.name; }

// Sinks owned beside the layer they are attached to.
struct FeaturedLayer {
  OwnedLayer layer;
  std::vector<float> sinks;
};

FeaturedLayer MakeFeaturedLayer(const ShardCase& c) {
  FeaturedLayer featured{MakeLayer(c.spec, 11), {}};
  AttentionConfig& config = featured.layer.config;
  config.features.alibi = c.alibi;
  config.features.sliding_window = 5;
  if (c.rotary) config.rotary.pairing = RotaryPairing::kHalfSplit;
  if (c.sinks) {
    featured.sinks = RandomFloats(c.spec.num_heads, 12);
    featured.layer.weights.sinks =
        TensorView(featured.sinks.data(), Shape{c.spec.num_heads});
  }
  return featured;
}

// The sum (or, without an output projection, the concatenation) of every shard's
// output for `query` [B, S, query_dim] under a causal mask.
std::vector<float> ShardedForward(const OwnedLayer& full, int64_t world_size,
                                  const std::vector<float>& query, const Shape& shape) {
  const MultiheadAttention reference(full.config, full.weights);
  const int64_t rows = shape[0] * shape[1], width = reference.output_dim();
  std::vector<float> combined(rows * width, 0.0f);
  AttentionMasks masks;
  masks.is_causal = true;
  for (int64_t rank = 0; rank < world_size; ++rank) {
    const AttentionShard shard = ShardHeads(full.config, full.weights,
                                            EvenHeadShard(full.config, rank, world_size));
    const MultiheadAttention layer(shard.config, shard.weights);
    std::vector<float> output(rows * layer.output_dim());
    layer.Forward(
        {TensorView(query.data(), shape), {}, {}}, masks,
        {MutableTensorView(output.data(), Shape{shape[0], shape[1], layer.output_dim()}),
         {}});
    const bool gather = !full.weights.output.present();
    const int64_t offset = gather ? shard.heads.first_head * full.config.head_dim : 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < layer.output_dim(); ++c) {
        combined[r * width + offset + c] += output[r * layer.output_dim() + c];
      }
    }
  }
  return combined;
}

class ShardsSumToFullLayer : public ::testing::TestWithParam<ShardCase> {};

TEST_P(ShardsSumToFullLayer, Forward) {
  const ShardCase& c = GetParam();
  const FeaturedLayer featured = MakeFeaturedLayer(c);
  const OwnedLayer& full = featured.layer;
  const MultiheadAttention layer(full.config, full.weights);
  const Shape shape{2, 7, c.spec.query_dim};
  const std::vector<float> query = RandomFloats(2 * 7 * c.spec.query_dim, 13);
  std::vector<float> expected(2 * 7 * layer.output_dim());
  AttentionMasks masks;
  masks.is_causal = true;
  layer.Forward(
      {TensorView(query.data(), shape), {}, {}}, masks,
      {MutableTensorView(expected.data(), Shape{2, 7, layer.output_dim()}), {}});
  ExpectClose(ShardedForward(full, c.world_size, query, shape), expected, "sharded");
}

LayerSpec Spec(int64_t heads, int64_t kv_heads, WeightLayout layout,
               bool output_projection = true) {
  LayerSpec spec;
  spec.num_heads = heads;
  spec.num_kv_heads = kv_heads;
  spec.head_dim = 8;
  spec.query_dim = 24;
  spec.layout = layout;
  spec.output_layout =
      layout == WeightLayout::kInOut ? WeightLayout::kInOut : WeightLayout::kOutIn;
  spec.output_projection = output_projection;
  spec.output_bias = output_projection;
  return spec;
}

INSTANTIATE_TEST_SUITE_P(
    HeadShard, ShardsSumToFullLayer,
    ::testing::Values(ShardCase{"mha_two_ranks", Spec(4, 0, WeightLayout::kOutIn), 2,
                                false, false, false},
                      ShardCase{"mha_three_uneven_ranks_in_out",
                                Spec(5, 0, WeightLayout::kInOut), 3, false, false, false},
                      ShardCase{"heads_in_head_dim_alibi",
                                Spec(6, 0, WeightLayout::kHeadsInHeadDim), 2, true, false,
                                false},
                      ShardCase{"gqa_8q_4kv_rotary_sinks",
                                Spec(8, 4, WeightLayout::kOutIn), 2, false, true, true},
                      ShardCase{"mqa_one_rank", Spec(4, 1, WeightLayout::kOutIn), 1,
                                false, true, false},
                      ShardCase{"no_output_projection_gathers",
                                Spec(4, 2, WeightLayout::kOutIn, false), 2, false, false,
                                true}),
    [](const ::testing::TestParamInfo<ShardCase>& info) { return info.param.name; });

// Each shard's cache holds its KV heads only, and decoding step by step through the
// shards sums to decoding through the full layer.
TEST(HeadShard, DecodeWithShardCachesSumsToFullDecode) {
  const ShardCase c{"gqa", Spec(8, 4, WeightLayout::kOutIn), 2, false, true, true};
  const FeaturedLayer featured = MakeFeaturedLayer(c);
  const OwnedLayer& full = featured.layer;
  const MultiheadAttention full_layer(full.config, full.weights);
  KvCache full_cache(full.config, 1, 16);
  std::vector<AttentionShard> shards;
  std::vector<MultiheadAttention> layers;
  std::vector<KvCache> caches;
  for (int64_t rank = 0; rank < 2; ++rank) {
    shards.push_back(
        ShardHeads(full.config, full.weights, EvenHeadShard(full.config, rank, 2)));
    EXPECT_EQ(shards.back().config.resolved_num_kv_heads(), 2);
    layers.emplace_back(shards.back().config, shards.back().weights);
    caches.emplace_back(shards.back().config, 1, 16);
  }
  const int64_t width = full_layer.output_dim(), dim = c.spec.query_dim;
  const int64_t steps[] = {5, 1, 1, 3};
  uint32_t seed = 20;
  for (const int64_t tokens : steps) {
    const std::vector<float> query = RandomFloats(tokens * dim, seed++);
    const Shape shape{1, tokens, dim}, out_shape{1, tokens, width};
    std::vector<float> expected(tokens * width), sum(tokens * width, 0.0f),
        part(tokens * width);
    full_layer.ForwardWithCache(TensorView(query.data(), shape), {}, full_cache,
                                MutableTensorView(expected.data(), out_shape));
    for (size_t rank = 0; rank < layers.size(); ++rank) {
      layers[rank].ForwardWithCache(TensorView(query.data(), shape), {}, caches[rank],
                                    MutableTensorView(part.data(), out_shape));
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
    }
    ExpectClose(sum, expected, "decode step");
  }
}

TEST(HeadShard, EvenShardsCoverEveryHeadOnGroupBoundaries) {
  AttentionConfig config;
  config.num_heads = 12;
  config.num_kv_heads = 6;
  int64_t next = 0;
  for (int64_t rank = 0; rank < 4; ++rank) {
    const HeadShard shard = EvenHeadShard(config, rank, 4);
    EXPECT_EQ(shard.first_head, next);
    EXPECT_EQ(shard.first_head % 2, 0);
    EXPECT_EQ(shard.end_head - shard.first_head, rank < 2 ? 4 : 2);
    next = shard.end_head;
  }
  EXPECT_EQ(next, 12);
}

TEST(HeadShard, OutputBiasStaysWithTheShardOfHeadZero) {
  const OwnedLayer full = MakeLayer(Spec(4, 0, WeightLayout::kOutIn), 3);
  EXPECT_TRUE(
      ShardHeads(full.config, full.weights, {0, 2}).weights.output.bias.present());
  EXPECT_FALSE(
      ShardHeads(full.config, full.weights, {2, 4}).weights.output.bias.present());
}

TEST(HeadShard, BadShardsAreErrorsNamingTheRange) {
  const OwnedLayer full = MakeLayer(Spec(8, 4, WeightLayout::kOutIn), 3);
  ExpectErrorMentioning(
      [&] {
        ShardHeads(full.config, full.weights, {1, 4});
      },
      "splits a key/value group");
  ExpectErrorMentioning(
      [&] {
        ShardHeads(full.config, full.weights, {4, 4});
      },
      "got [4, 4)");
  ExpectErrorMentioning(
      [&] {
        ShardHeads(full.config, full.weights, {0, 10});
      },
      "num_heads (8)");
  ExpectErrorMentioning([&] { EvenHeadShard(full.config, 0, 5); }, "world_size 5");
  ExpectErrorMentioning([&] { EvenHeadShard(full.config, 2, 2); }, "rank 2");
  AttentionConfig bad = full.config;
  bad.head_dim = 3;
  ExpectErrorMentioning([&] { ShardHeads(bad, full.weights, {0, 2}); }, "weights.query");
}

}  // namespace
}  // namespace mha::testing

// Cross-layer KV sharing (Gemma 3n's KV-shared layers, ForwardOptions::kv_shared): a
// layer that reads the keys and values an earlier layer wrote in the same step, through
// the contiguous and the paged cache, against the double-precision layer with the
// sharing layer's queries and output over the source layer's keys and values; and
// the calls that must refuse it.
#include <gtest/gtest.h>

#include <string>

#include "tests/cache/paged_test_util.h"

namespace mha::testing {
namespace {

constexpr int64_t kEmbed = 24;

// Source and sharing layers: the same KV shape, their own weights, RoPE, QK-norm
// and value norm, softmax scale 1 (Gemma 3n's layers).
struct SharingLayers {
  SharingLayers() {
    LayerSpec spec;
    spec.num_heads = 4, spec.num_kv_heads = 2, spec.head_dim = 8, spec.query_dim = kEmbed;
    source = MakeLayer(spec, 41);
    shared = MakeLayer(spec, 42);
    query_norm = RandomFloats(8, 43, 0.5f);
    key_norm = RandomFloats(8, 44, 0.5f);
    for (OwnedLayer* layer : {&source, &shared}) {
      layer->config.rotary.pairing = RotaryPairing::kHalfSplit;
      layer->config.rotary.max_positions = 256;
      layer->config.features.sliding_window = 12;
      layer->config.features.qk_norm =
          QkNorm{1e-6, false, QkNormScope::kPerHead, /*value_norm=*/true};
      layer->config.scale = 1.0f;
      layer->weights.query_norm_weight = TensorView(query_norm.data(), Shape{8});
      layer->weights.key_norm_weight = TensorView(key_norm.data(), Shape{8});
    }
    // The reference: the sharing layer's queries and output, the source's keys and
    // values (and key norm: the same weights here).
    reference = shared;
    reference.weights.key = source.weights.key;
    reference.weights.value = source.weights.value;
  }

  // The sharing layer's outputs for its inputs x_shared over keys and values the
  // source layer projected from x_source, causal, rows [first, first + count).
  std::vector<float> Expected(const std::vector<float>& x_source,
                              const std::vector<float>& x_shared) const {
    const int64_t n = static_cast<int64_t>(x_source.size()) / kEmbed;
    std::vector<float> out(x_shared.size());
    AttentionMasks causal;
    causal.is_causal = true;
    NaiveMultiheadAttention(reference.config, reference.weights,
                            {TensorView(x_shared.data(), Shape{1, n, kEmbed}),
                             TensorView(x_source.data(), Shape{1, n, kEmbed}),
                             TensorView(x_source.data(), Shape{1, n, kEmbed})},
                            causal,
                            {MutableTensorView(out.data(), Shape{1, n, kEmbed}), {}});
    return out;
  }

  OwnedLayer source, shared, reference;
  std::vector<float> query_norm, key_norm;
};

std::vector<float> Rows(const std::vector<float>& x, int64_t first, int64_t count) {
  return {x.begin() + first * kEmbed, x.begin() + (first + count) * kEmbed};
}

constexpr int64_t kSteps[] = {19, 1, 1, 9, 1};
constexpr int64_t kTotal = 31;

TEST(KvSharing, ContiguousCacheMatchesReference) {
  const SharingLayers layers;
  const MultiheadAttention source(layers.source.config, layers.source.weights);
  const MultiheadAttention shared(layers.shared.config, layers.shared.weights);
  const std::vector<float> x_source = RandomFloats(kTotal * kEmbed, 45);
  const std::vector<float> x_shared = RandomFloats(kTotal * kEmbed, 46);
  const std::vector<float> expected = layers.Expected(x_source, x_shared);
  for (const DType storage : {DType::kFloat32, DType::kBFloat16}) {
    KvCache cache(layers.source.config, 1, 64, storage);
    ForwardOptions sharing;
    sharing.kv_shared = true;
    int64_t done = 0;
    for (const int64_t step : kSteps) {
      const std::vector<float> in = Rows(x_source, done, step);
      std::vector<float> ignored(in.size()), out(in.size());
      source.ForwardWithCache(TensorView(in.data(), Shape{1, step, kEmbed}), {}, cache,
                              MutableTensorView(ignored.data(), Shape{1, step, kEmbed}));
      const std::vector<float> shared_in = Rows(x_shared, done, step);
      shared.ForwardWithCache(
          TensorView(shared_in.data(), Shape{1, step, kEmbed}), {}, cache,
          MutableTensorView(out.data(), Shape{1, step, kEmbed}), sharing);
      done += step;
      EXPECT_EQ(cache.length(0), done) << "the sharing layer appends nothing";
      const std::string what =
          std::string(DTypeName(storage)) + " step ending at " + std::to_string(done);
      ExpectClose(out, Rows(expected, done - step, step), what.c_str(),
                  storage == DType::kFloat32 ? 1e-4 : 2e-2);
    }
  }
}

TEST(KvSharing, PagedCacheMatchesReference) {
  const SharingLayers layers;
  const MultiheadAttention source(layers.source.config, layers.source.weights);
  const MultiheadAttention shared(layers.shared.config, layers.shared.weights);
  PagedKvCacheOptions options;
  options.num_blocks = 8;
  options.max_sequences = 2;
  options.num_layers = 2;  // layer 1 is never written: the sharing layer reads layer 0
  PagedKvCache cache(layers.source.config, options);
  std::vector<float> x_source[2], x_shared[2], expected[2];
  for (int64_t s = 0; s < 2; ++s) {
    cache.AddSequence(s);
    x_source[s] = RandomFloats(kTotal * kEmbed, 47 + s);
    x_shared[s] = RandomFloats(kTotal * kEmbed, 49 + s);
    expected[s] = layers.Expected(x_source[s], x_shared[s]);
  }
  ForwardOptions sharing;
  sharing.kv_shared = true;
  int64_t done = 0;
  for (const int64_t step : kSteps) {
    // Sequence 1 runs one step behind with single tokens: mixed chunk sizes.
    const int64_t other = step == 19 ? 5 : 1;
    std::vector<Chunk> sources = {{0, Rows(x_source[0], done, step)},
                                  {1, Rows(x_source[1], cache.length(1), other)}};
    std::vector<Chunk> sharers = {{0, Rows(x_shared[0], done, step)},
                                  {1, Rows(x_shared[1], cache.length(1), other)}};
    AppendAndForward(source, cache, sources, 0);
    const auto outputs = PackedForward(shared, cache, sharers, 0, sharing);
    done += step;
    ExpectClose(outputs[0], Rows(expected[0], done - step, step), "sequence 0");
    ExpectClose(outputs[1], Rows(expected[1], cache.length(1) - other, other),
                "sequence 1");
  }
}

// Slots the source layer has not written read as zeros (docs/serving.md), also in a
// block an earlier request used: its keys must not steer the next request's output.
TEST(KvSharing, UnwrittenSlotsOfAReusedBlockReadAsZeros) {
  const SharingLayers layers;
  const MultiheadAttention source(layers.source.config, layers.source.weights);
  const MultiheadAttention shared(layers.shared.config, layers.shared.weights);
  ForwardOptions sharing;
  sharing.kv_shared = true;
  const std::vector<float> x_shared = RandomFloats(3 * kEmbed, 52);
  for (const DType storage : {DType::kFloat32, DType::kBFloat16, DType::kInt8,
                              DType::kFloat8E5M2, DType::kInt4}) {
    PagedKvCacheOptions options;
    options.num_blocks = 1;
    options.max_sequences = 2;
    options.storage = storage;
    if (storage == DType::kInt4) options.scales = KvScales::kPerChannelKeys;
    const auto unwritten = [&](bool reused) {
      PagedKvCache cache(layers.source.config, options);
      if (reused) {
        cache.AddSequence(0);
        AppendAndForward(source, cache, {{0, RandomFloats(16 * kEmbed, 53, 4.0f)}});
        cache.RemoveSequence(0);
      }
      cache.AddSequence(1);
      const int64_t count = 3;
      cache.AppendSlots(std::vector<int64_t>{1}.data(), &count, 1);
      return PackedForward(shared, cache, {{1, x_shared}}, 0, sharing)[0];
    };
    EXPECT_EQ(unwritten(true), unwritten(false)) << DTypeName(storage);
  }
}

TEST(KvSharing, RefusedWhereItCannotApply) {
  const SharingLayers layers;
  const MultiheadAttention shared(layers.shared.config, layers.shared.weights);
  ForwardOptions sharing;
  sharing.kv_shared = true;
  const std::vector<float> x = RandomFloats(3 * kEmbed, 50);
  std::vector<float> out(x.size(), 7.0f);
  const auto expect_error = [&](const char* needle, auto&& call) {
    try {
      call();
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    for (float value : out) ASSERT_EQ(value, 7.0f);
  };
  expect_error("options.kv_shared: applies to a layer reading a cache", [&] {
    shared.Forward({TensorView(x.data(), Shape{1, 3, kEmbed}), {}, {}}, {},
                   {MutableTensorView(out.data(), Shape{1, 3, kEmbed}), {}}, sharing);
  });
  KvCache cache(layers.shared.config, 1, 16);
  expect_error("cache: sequence 0 holds 0 tokens, fewer than the 3 new ones", [&] {
    shared.ForwardWithCache(TensorView(x.data(), Shape{1, 3, kEmbed}), {}, cache,
                            MutableTensorView(out.data(), Shape{1, 3, kEmbed}), sharing);
  });
  EXPECT_EQ(cache.length(0), 0);
}

}  // namespace
}  // namespace mha::testing

// PackedStep: a serving step planned once for every layer gives each layer the bits
// of its own ForwardPacked over the batch (layers of two forms, token trees, position
// ids, batch invariance, threads, KV sharing, MLA), and a stale, unplanned or badly
// planned step is refused, naming it, with the cache and output left as they were.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "tests/layer/latent_test_util.h"
#include "tests/test_util.h"

namespace mha::testing {
namespace {

constexpr int64_t kEmbed = 16, kLayers = 4;

// Layer l of a small Gemma-like model: GQA 4/2 x 8, rotary, every other layer
// windowed over 6 tokens (two layer forms on one step), the last with dynamic
// rotary scaling (a table per call).
OwnedLayer ModelLayer(int64_t l) {
  LayerSpec spec;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  spec.head_dim = 8;
  spec.query_dim = kEmbed;
  OwnedLayer layer = MakeLayer(spec, 100 + static_cast<uint32_t>(l));
  layer.config.rotary.max_positions = 128;
  layer.config.rotary.pairing = RotaryPairing::kHalfSplit;
  if (l % 2 == 1) layer.config.features.sliding_window = 6;
  if (l == kLayers - 1) {
    layer.config.rotary.scaling.type = RopeScalingType::kDynamic;
    layer.config.rotary.scaling.factor = 2.0;
    layer.config.rotary.scaling.original_max_position_embeddings = 8;
  }
  return layer;
}

PagedKvCacheOptions CacheOptions() {
  PagedKvCacheOptions options;
  options.num_blocks = 64;
  options.block_size = 16;
  options.max_sequences = 4;
  options.num_layers = kLayers;
  return options;
}

// One step's batch: counts[i] new tokens of sequence ids[i], perhaps as trees.
struct Batch {
  std::vector<int64_t> ids, counts, starts{0}, parents, positions;
  Batch(std::vector<int64_t> sequence_ids, std::vector<int64_t> new_tokens)
      : ids(std::move(sequence_ids)), counts(std::move(new_tokens)) {
    for (const int64_t count : counts) starts.push_back(starts.back() + count);
  }
  int64_t tokens() const { return starts.back(); }
  PackedBatch View() const {
    const int64_t n = static_cast<int64_t>(ids.size());
    PackedBatch batch{TensorView(ids.data(), DType::kInt64, Shape{n}),
                      TensorView(starts.data(), DType::kInt64, Shape{n + 1})};
    if (!parents.empty()) {
      batch.tree_parents = TensorView(parents.data(), DType::kInt64, Shape{tokens()});
    }
    return batch;
  }
};

struct Model {
  std::vector<OwnedLayer> owned;
  std::vector<MultiheadAttention> layers;
  Model() {
    for (int64_t l = 0; l < kLayers; ++l) {
      owned.push_back(ModelLayer(l));
      layers.emplace_back(owned.back().config, owned.back().weights);
    }
  }
};

// Runs the steps through every layer (each layer's input the last one's output),
// planned once per step or through each layer's ForwardPacked over the batch;
// returns every layer's outputs of every step.
std::vector<float> RunSteps(const Model& model, const std::vector<Batch>& steps,
                            ForwardOptions options, bool planned_once,
                            bool with_positions = false) {
  PagedKvCache cache(model.owned[0].config, CacheOptions());
  for (int64_t id = 0; id < 3; ++id) cache.AddSequence(id);
  PackedStep step;
  std::vector<float> all;
  uint32_t seed = 1;
  for (const Batch& batch : steps) {
    cache.AppendSlots(batch.ids.data(), batch.counts.data(),
                      static_cast<int64_t>(batch.ids.size()));
    const int64_t t = batch.tokens();
    if (with_positions) {
      options.position_ids = TensorView(batch.positions.data(), DType::kInt64, Shape{t});
    }
    if (planned_once) step.Plan(cache, batch.View(), options);
    std::vector<float> x = RandomFloats(t * kEmbed, seed++);
    for (int64_t l = 0; l < kLayers; ++l) {
      std::vector<float> y(x.size());
      const TensorView query(x.data(), Shape{t, kEmbed});
      const MutableTensorView output(y.data(), Shape{t, kEmbed});
      if (planned_once) {
        model.layers[l].ForwardPacked(query, step, l, output);
      } else {
        model.layers[l].ForwardPacked(query, batch.View(), cache, l, output, options);
      }
      all.insert(all.end(), y.begin(), y.end());
      x = y;
    }
  }
  return all;
}

// A prefill of three sequences in uneven chunks, then mixed decode and prefill steps.
std::vector<Batch> MixedSteps() {
  std::vector<Batch> steps = {Batch({0, 1, 2}, {5, 9, 1}), Batch({2, 0}, {7, 1}),
                              Batch({0, 1, 2}, {1, 1, 3})};
  for (Batch& batch : steps) {  // rotary positions of a left-padded batch: + 3
    for (size_t i = 0; i < batch.ids.size(); ++i) {
      for (int64_t j = 0; j < batch.counts[i]; ++j) batch.positions.push_back(3 + j);
    }
  }
  return steps;
}

TEST(PackedStep, LayersOfTwoFormsGiveTheirOwnForwardPackedBits) {
  const Model model;
  ForwardOptions options;
  EXPECT_EQ(RunSteps(model, MixedSteps(), options, true),
            RunSteps(model, MixedSteps(), options, false));
  options.num_threads = 2;
  options.batch_invariant = true;
  EXPECT_EQ(RunSteps(model, MixedSteps(), options, true),
            RunSteps(model, MixedSteps(), options, false))
      << "2 threads, batch_invariant";
}

TEST(PackedStep, PositionIdsHoldForEveryLayer) {
  const Model model;
  const std::vector<float> given = RunSteps(model, MixedSteps(), {}, true, true);
  EXPECT_EQ(given, RunSteps(model, MixedSteps(), {}, false, true));
  EXPECT_NE(given, RunSteps(model, MixedSteps(), {}, true, false));
}

TEST(PackedStep, TokenTreesAndSharedKvFollowTheLayerCalls) {
  // Layers 0 and 2 only (no window: trees place tokens by depth); layer 2 also runs
  // kv_shared over layer 0's keys and values.
  const Model model;
  Batch tree({0, 1}, {4, 3});
  tree.parents = {-1, 0, 0, 1, -1, 0, 0};
  const std::vector<float> x = RandomFloats(7 * kEmbed, 9);
  const auto run = [&](bool planned_once) {
    PagedKvCache cache(model.owned[0].config, CacheOptions());
    cache.AddSequence(0);
    cache.AddSequence(1);
    const Batch prompt({0, 1}, {6, 2});
    const std::vector<float> prompt_x = RandomFloats(8 * kEmbed, 8);
    std::vector<float> ignored(prompt_x.size()), out;
    cache.AppendSlots(prompt.ids.data(), prompt.counts.data(), 2);
    for (const int64_t l : {0, 2}) {
      model.layers[l].ForwardPacked(TensorView(prompt_x.data(), Shape{8, kEmbed}),
                                    prompt.View(), cache, l,
                                    MutableTensorView(ignored.data(), Shape{8, kEmbed}));
    }
    cache.AppendSlots(tree.ids.data(), tree.counts.data(), 2);
    PackedStep step;
    step.Plan(cache, tree.View());
    for (const bool shared : {false, true}) {
      std::vector<float> y(x.size());
      const TensorView query(x.data(), Shape{7, kEmbed});
      const MutableTensorView output(y.data(), Shape{7, kEmbed});
      const int64_t l = shared ? 0 : 2;  // the shared call reads layer 0's pages
      if (planned_once) {
        PackedLayerOptions layer_options;
        layer_options.kv_shared = shared;
        model.layers[2].ForwardPacked(query, step, l, output, layer_options);
      } else {
        ForwardOptions options;
        options.kv_shared = shared;
        model.layers[2].ForwardPacked(query, tree.View(), cache, l, output, options);
      }
      out.insert(out.end(), y.begin(), y.end());
    }
    return out;
  };
  EXPECT_EQ(run(true), run(false));
}

// Runs `call`, expecting an mha::Error containing `needle` and `out` unchanged.
template <class Call>
void ExpectRefused(const char* needle, const std::vector<float>& out, Call&& call) {
  const std::vector<float> before = out;
  try {
    call();
    ADD_FAILURE() << "no error for " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_EQ(out, before) << needle;
}

TEST(PackedStep, StaleUnplannedOrMisfitStepsAreRefused) {
  const Model model;
  const MultiheadAttention& layer = model.layers[0];
  PagedKvCache cache(model.owned[0].config, CacheOptions());
  for (int64_t id = 0; id < 3; ++id) cache.AddSequence(id);
  const Batch batch({0, 1}, {2, 3});
  cache.AppendSlots(batch.ids.data(), batch.counts.data(), 2);
  const std::vector<float> x = RandomFloats(5 * kEmbed, 3);
  std::vector<float> out(x.size(), 7.0f);
  const TensorView query(x.data(), Shape{5, kEmbed});
  const MutableTensorView output(out.data(), Shape{5, kEmbed});
  PackedStep step;
  ExpectRefused("step: not planned", out,
                [&] { layer.ForwardPacked(query, step, 0, output); });
  ForwardOptions shared;
  shared.kv_shared = true;
  ExpectRefused("options.kv_shared: each layer's choice", out,
                [&] { step.Plan(cache, batch.View(), shared); });
  EXPECT_FALSE(step.planned());
  step.Plan(cache, batch.View());
  EXPECT_EQ(step.tokens(), 5);
  ExpectRefused("query: expected shape [T=5, 16] (the step's packed rows), got [4, 16]",
                out, [&] {
                  layer.ForwardPacked(TensorView(x.data(), Shape{4, kEmbed}), step, 0,
                                      MutableTensorView(out.data(), Shape{4, kEmbed}));
                });
  ExpectRefused("layer: must be in [0, 4), got 4", out,
                [&] { layer.ForwardPacked(query, step, 4, output); });
  // A failed Plan keeps the plan it had.
  const Batch unknown({0, 3}, {2, 3});
  ExpectRefused("batch.sequence_ids[1]: 3 is not a sequence of the cache", out,
                [&] { step.Plan(cache, unknown.View()); });
  layer.ForwardPacked(query, step, 0, output);
  const std::vector<float> planned = out;
  // A sequence outside the step may change; one inside makes the step stale.
  const int64_t other = 2, one = 1;
  cache.AppendSlots(&other, &one, 1);
  layer.ForwardPacked(query, step, 0, output);
  EXPECT_EQ(out, planned);
  const char* stale = "changed after the step was planned";
  cache.Fork(1, 3);
  ExpectRefused(stale, out, [&] { layer.ForwardPacked(query, step, 0, output); });
  for (const auto& change : std::vector<std::function<void()>>{
           [&] { cache.AppendSlots(batch.ids.data(), batch.counts.data(), 2); },
           [&] { cache.Truncate(1, 1); }, [&] { cache.RemoveSequence(1); }}) {
    cache.AppendSlots(batch.ids.data(), batch.counts.data(), 2);
    step.Plan(cache, batch.View());
    change();
    ExpectRefused(stale, out, [&] { layer.ForwardPacked(query, step, 0, output); });
  }
}

TEST(PackedStep, LatentLayersShareAStep) {
  const LatentAttentionConfig config = SmallLatentConfig(/*q_lora_rank=*/24);
  const LatentWeightsForTest weights(config);
  const MultiheadLatentAttention first(config, weights.views);
  LatentAttentionConfig second_config = config;
  const LatentWeightsForTest second_weights(second_config);
  const MultiheadLatentAttention second(second_config, second_weights.views);
  const std::vector<Batch> steps = {Batch({0, 1}, {6, 3}), Batch({0, 1}, {1, 2})};
  const auto run = [&](bool planned_once) {
    PagedKvCacheOptions options = CacheOptions();
    options.num_layers = 2;
    PagedKvCache cache(config, options);
    cache.AddSequence(0);
    cache.AddSequence(1);
    PackedStep step;
    ForwardOptions call;
    call.num_threads = 2;
    std::vector<float> all;
    for (const Batch& batch : steps) {
      cache.AppendSlots(batch.ids.data(), batch.counts.data(), 2);
      if (planned_once) step.Plan(cache, batch.View(), call);
      const int64_t t = batch.tokens();
      std::vector<float> x = RandomFloats(t * kHidden, 11), y(x.size());
      for (int64_t l = 0; l < 2; ++l) {
        const MultiheadLatentAttention& layer = l == 0 ? first : second;
        const TensorView hidden(x.data(), Shape{t, kHidden});
        const MutableTensorView output(y.data(), Shape{t, kHidden});
        if (planned_once) {
          layer.ForwardPacked(hidden, step, l, output);
        } else {
          layer.ForwardPacked(hidden, batch.View(), cache, l, output, call);
        }
        all.insert(all.end(), y.begin(), y.end());
        x = y;
      }
    }
    return all;
  };
  EXPECT_EQ(run(true), run(false));
}

}  // namespace
}  // namespace mha::testing

// MultiheadLatentAttention (absorbed, over its latent cache) against the naive
// expanded DeepSeek layer: a prefill, a chunk and single-token decode steps of two
// sequences equal the rows of one causal pass over each whole sequence, with and
// without q LoRA, with YaRN-style caller frequencies and mscale, in every cache
// storage, the prompt expanded (by cost) or absorbed (asked); bad arguments change
// nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "mha/latent_attention.hpp"
#include "mha/mha.hpp"
#include "src/simd/bf16_convert.h"
#include "tests/layer/latent_test_util.h"
#include "tests/test_util.h"

namespace mha {
namespace {

using testing::ExpectClose;
using testing::kHeads;
using testing::kHidden;
using testing::kNope;
using testing::kRank;
using testing::kRope;
using testing::kValueDim;
using Weights = testing::LatentWeightsForTest;
using testing::ExpectErrorMentioning;
using testing::RandomFloats;

struct LatentCase {
  std::string name;
  int64_t q_lora_rank = 0;
  DType storage = DType::kFloat32;
  bool yarn = false;  // caller inv_freq, attention_factor and an mscale^2 scale
  LatentForm form = LatentForm::kAuto;
};

void PrintTo(const LatentCase& c, std::ostream* os) { *os << c.name; }

LatentAttentionConfig Config(const LatentCase& c) {
  LatentAttentionConfig config = testing::SmallLatentConfig(c.q_lora_rank);
  config.form = c.form;
  if (c.yarn) {
    for (int64_t i = 0; i < kRope / 2; ++i)
      config.rotary.inv_freq.push_back(std::pow(10000.0f, -2.0f * i / kRope) / 3.0f);
    config.rotary.attention_factor = 1.2;
    config.softmax_scale = static_cast<float>(
        std::pow(kNope + kRope, -0.5) * std::pow(DeepSeekYarnMscale(40.0, 0.707), 2));
  }
  return config;
}

// Rows [first, first + count) of each sequence of x [B, T, hidden], as [B, count, .].
std::vector<float> Rows(const std::vector<float>& x, int64_t batch, int64_t total,
                        int64_t first, int64_t count) {
  std::vector<float> rows(batch * count * kHidden);
  for (int64_t b = 0; b < batch; ++b) {
    std::copy_n(x.data() + (b * total + first) * kHidden, count * kHidden,
                rows.data() + b * count * kHidden);
  }
  return rows;
}

class LatentLayer : public ::testing::TestWithParam<LatentCase> {};

TEST_P(LatentLayer, CachedStepsMatchTheExpandedReference) {
  const LatentCase& c = GetParam();
  const LatentAttentionConfig config = Config(c);
  const Weights weights(config);
  const MultiheadLatentAttention layer(config, weights.views);
  constexpr int64_t kBatch = 2, kTotal = 23;
  const std::vector<float> x = RandomFloats(kBatch * kTotal * kHidden, 9);
  std::vector<float> expected(x.size());
  NaiveMultiheadLatentAttention(
      config, weights.views, TensorView(x.data(), Shape{kBatch, kTotal, kHidden}),
      MutableTensorView(expected.data(), Shape{kBatch, kTotal, kHidden}));
  KvCache cache(config, kBatch + 1, kTotal, c.storage);
  const double bound = c.storage == DType::kFloat32 ? 1e-4 : 3e-2;
  int64_t done = 0;
  for (const int64_t step : {9, 5, 1, 1, 1, 1, 1, 1, 1, 1, 1}) {
    const std::vector<float> in = Rows(x, kBatch, kTotal, done, step);
    std::vector<float> out(in.size());
    const LatentForm form = layer.ForwardWithCache(
        TensorView(in.data(), Shape{kBatch, step, kHidden}), cache,
        MutableTensorView(out.data(), Shape{kBatch, step, kHidden}));
    // The prompt (nothing cached) expands unless told otherwise; the rest is absorbed.
    EXPECT_EQ(form, done == 0 && c.form == LatentForm::kAuto ? LatentForm::kExpanded
                                                             : LatentForm::kAbsorbed);
    ExpectClose(out, Rows(expected, kBatch, kTotal, done, step),
                (c.name + " rows from " + std::to_string(done)).c_str(), bound);
    done += step;
    ASSERT_EQ(cache.length(0), done);
  }
  EXPECT_EQ(cache.length(kBatch), 0);  // a sequence the calls did not name
}

std::vector<LatentCase> Cases() {
  return {{"v2_lite_f32", 0, DType::kFloat32, false},
          {"q_lora_f32", 24, DType::kFloat32, false},
          {"q_lora_yarn_f32", 24, DType::kFloat32, true},
          {"v2_lite_yarn_bf16", 0, DType::kBFloat16, true},
          {"q_lora_int8", 24, DType::kInt8, false},
          {"absorbed_prefill_yarn_f32", 0, DType::kFloat32, true, LatentForm::kAbsorbed},
          {"absorbed_prefill_q_lora_bf16", 24, DType::kBFloat16, false,
           LatentForm::kAbsorbed}};
}

INSTANTIATE_TEST_SUITE_P(Cases, LatentLayer, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<LatentCase>& info) {
                           return info.param.name;
                         });

// One packed step: each (sequence, rows) appends its rows; returns each one's output.
std::vector<std::vector<float>> AppendAndForward(
    const MultiheadLatentAttention& layer, PagedKvCache& cache,
    const std::vector<std::pair<int64_t, std::vector<float>>>& parts) {
  std::vector<int64_t> ids, starts{0}, counts;
  std::vector<float> rows;
  for (const auto& [id, part] : parts) {
    ids.push_back(id);
    counts.push_back(static_cast<int64_t>(part.size()) / kHidden);
    starts.push_back(starts.back() + counts.back());
    rows.insert(rows.end(), part.begin(), part.end());
  }
  cache.AppendSlots(ids.data(), counts.data(), static_cast<int64_t>(ids.size()));
  std::vector<float> out(rows.size());
  const int64_t n = static_cast<int64_t>(ids.size()), tokens = starts.back();
  EXPECT_EQ(layer.ForwardPacked(TensorView(rows.data(), Shape{tokens, kHidden}),
                                {TensorView(ids.data(), DType::kInt64, Shape{n}),
                                 TensorView(starts.data(), DType::kInt64, Shape{n + 1})},
                                cache, 0,
                                MutableTensorView(out.data(), Shape{tokens, kHidden})),
            LatentForm::kAbsorbed);
  std::vector<std::vector<float>> outputs;
  for (int64_t i = 0; i < n; ++i) {
    outputs.emplace_back(out.begin() + starts[i] * kHidden,
                         out.begin() + starts[i + 1] * kHidden);
  }
  return outputs;
}

// The naive layer over one sequence's whole stream; its rows [first, first + count).
std::vector<float> NaiveRows(const LatentAttentionConfig& config,
                             const LatentAttentionWeights& weights,
                             const std::vector<float>& stream, int64_t first,
                             int64_t count) {
  const int64_t total = static_cast<int64_t>(stream.size()) / kHidden;
  std::vector<float> out(stream.size());
  NaiveMultiheadLatentAttention(config, weights,
                                TensorView(stream.data(), Shape{1, total, kHidden}),
                                MutableTensorView(out.data(), Shape{1, total, kHidden}));
  return Rows(out, 1, total, first, count);
}

class LatentPaged : public ::testing::TestWithParam<LatentCase> {};

// Mixed steps (a prompt beside a decode), a fork whose branches decode apart, and a
// truncation followed by other tokens: every row equals the naive layer over its
// sequence's own stream.
TEST_P(LatentPaged, MixedStepsForksAndTruncationMatchTheReference) {
  const LatentCase& c = GetParam();
  const LatentAttentionConfig config = Config(c);
  const Weights weights(config);
  const MultiheadLatentAttention layer(config, weights.views);
  PagedKvCacheOptions options;
  options.num_blocks = 12, options.block_size = 16, options.max_sequences = 3;
  options.storage = c.storage;
  PagedKvCache cache(config, options);
  const double bound = c.storage == DType::kFloat32 ? 1e-4 : 3e-2;
  std::vector<float> streams[3];
  const auto step = [&](const std::vector<std::pair<int64_t, int64_t>>& plan,
                        uint32_t seed) {
    std::vector<std::pair<int64_t, std::vector<float>>> parts;
    for (const auto& [id, count] : plan) {
      parts.emplace_back(id, RandomFloats(count * kHidden, seed++));
      streams[id].insert(streams[id].end(), parts.back().second.begin(),
                         parts.back().second.end());
    }
    const auto outputs = AppendAndForward(layer, cache, parts);
    for (size_t i = 0; i < plan.size(); ++i) {
      const int64_t id = plan[i].first, count = plan[i].second;
      const int64_t first = static_cast<int64_t>(streams[id].size()) / kHidden - count;
      ExpectClose(outputs[i], NaiveRows(config, weights.views, streams[id], first, count),
                  (c.name + " sequence " + std::to_string(id)).c_str(), bound);
    }
  };
  cache.AddSequence(0);
  cache.AddSequence(1);
  step({{0, 19}}, 10);
  step({{0, 1}, {1, 7}}, 20);  // a decode beside a prompt
  cache.Fork(0, 2);
  streams[2] = streams[0];
  step({{0, 1}, {2, 2}, {1, 1}}, 30);  // the branches part ways in a shared block
  cache.Truncate(1, 5);
  streams[1].resize(5 * kHidden);
  step({{1, 3}, {2, 1}}, 40);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LatentPaged,
    ::testing::Values(LatentCase{"v2_lite_f32", 0, DType::kFloat32},
                      LatentCase{"q_lora_yarn_bf16", 24, DType::kBFloat16, true},
                      LatentCase{"q_lora_int8", 24, DType::kInt8}),
    [](const ::testing::TestParamInfo<LatentCase>& info) { return info.param.name; });

// Speculative decoding over latents: each token of a draft tree equals the sequence
// decoded along its path alone; after KeepTokens keeps one path, the next token
// decodes as if only that path had been appended.
class LatentTree : public ::testing::TestWithParam<LatentCase> {};

TEST_P(LatentTree, DraftTokensAndTheKeptPathMatchTheReference) {
  const LatentCase& c = GetParam();
  const LatentAttentionConfig config = Config(c);
  const Weights weights(config);
  const MultiheadLatentAttention layer(config, weights.views);
  PagedKvCacheOptions options;
  options.num_blocks = 4, options.max_sequences = 1, options.storage = c.storage;
  PagedKvCache cache(config, options);
  const double bound = c.storage == DType::kFloat32 ? 1e-4 : 3e-2;
  cache.AddSequence(0);
  const std::vector<float> prompt = RandomFloats(9 * kHidden, 50);
  AppendAndForward(layer, cache, {{0, prompt}});
  const std::vector<float> draft = RandomFloats(5 * kHidden, 51);
  const int64_t parents[] = {-1, 0, 0, 1, 2};  // branches 0-1-3 and 0-2-4
  const int64_t id = 0, count = 5, starts[] = {0, 5};
  cache.AppendSlots(&id, &count, 1);
  std::vector<float> out(draft.size());
  layer.ForwardPacked(TensorView(draft.data(), Shape{5, kHidden}),
                      {TensorView(&id, DType::kInt64, Shape{1}),
                       TensorView(starts, DType::kInt64, Shape{2}),
                       TensorView(parents, DType::kInt64, Shape{5})},
                      cache, 0, MutableTensorView(out.data(), Shape{5, kHidden}));
  // The prompt, then the draft tokens of `path`, then `extra`.
  const auto along = [&](const std::vector<int64_t>& path,
                         const std::vector<float>& extra = {}) {
    std::vector<float> stream(prompt.size() + path.size() * kHidden + extra.size());
    float* end = std::copy(prompt.begin(), prompt.end(), stream.data());
    for (const int64_t t : path)
      end = std::copy_n(draft.data() + t * kHidden, kHidden, end);
    std::copy(extra.begin(), extra.end(), end);
    return stream;
  };
  const std::vector<std::vector<int64_t>> paths = {
      {0}, {0, 1}, {0, 2}, {0, 1, 3}, {0, 2, 4}};
  for (int64_t t = 0; t < 5; ++t) {
    const std::vector<float> stream = along(paths[t]);
    const int64_t last = static_cast<int64_t>(stream.size()) / kHidden - 1;
    ExpectClose(
        std::vector<float>(out.begin() + t * kHidden, out.begin() + (t + 1) * kHidden),
        NaiveRows(config, weights.views, stream, last, 1),
        ("draft token " + std::to_string(t)).c_str(), bound);
  }
  const int64_t kept[] = {0, 2, 4};
  cache.KeepTokens(0, 9, kept, 3);
  const std::vector<float> next = RandomFloats(kHidden, 52);
  const auto outputs = AppendAndForward(layer, cache, {{0, next}});
  ExpectClose(outputs[0], NaiveRows(config, weights.views, along({0, 2, 4}, next), 12, 1),
              "after the kept path", bound);
}

INSTANTIATE_TEST_SUITE_P(
    Storages, LatentTree,
    ::testing::Values(LatentCase{"q_lora_f32", 24, DType::kFloat32},
                      LatentCase{"v2_lite_int8", 0, DType::kInt8},
                      LatentCase{"q_lora_bf16", 24, DType::kBFloat16}),
    [](const ::testing::TestParamInfo<LatentCase>& info) { return info.param.name; });

TEST(LatentPaged, CachesOfTheOtherKindAndBadTreesAreRefused) {
  const LatentAttentionConfig config = Config({});
  const Weights weights(config);
  const MultiheadLatentAttention layer(config, weights.views);
  PagedKvCacheOptions options;
  options.num_blocks = 2, options.max_sequences = 1;
  AttentionConfig plain;
  plain.num_heads = 1, plain.head_dim = kRank + kRope, plain.query_dim = kHidden;
  PagedKvCache plain_cache(plain, options);
  PagedKvCache latent_cache(config, options);
  plain_cache.AddSequence(0);
  latent_cache.AddSequence(0);
  const int64_t id = 0, count = 1, starts[] = {0, 1};
  plain_cache.AppendSlots(&id, &count, 1);
  latent_cache.AppendSlots(&id, &count, 1);
  std::vector<float> x(kHidden, 0.5f), out(kHidden, 7.0f);
  const PackedBatch batch{TensorView(&id, DType::kInt64, Shape{1}),
                          TensorView(starts, DType::kInt64, Shape{2})};
  const TensorView in(x.data(), Shape{1, kHidden});
  const MutableTensorView out_view(out.data(), Shape{1, kHidden});
  ExpectErrorMentioning([&] { layer.ForwardPacked(in, batch, plain_cache, 0, out_view); },
                        "cache: must be made from a LatentAttentionConfig");
  const int64_t parents[] = {0};  // a token cannot be its own parent
  PackedBatch tree = batch;
  tree.tree_parents = TensorView(parents, DType::kInt64, Shape{1});
  ExpectErrorMentioning([&] { layer.ForwardPacked(in, tree, latent_cache, 0, out_view); },
                        "batch.tree_parents[0]: must be in [-1, 0)");
  std::vector<float> w(kHidden * kHidden, 0.1f);
  AttentionWeights mha_weights;
  plain.num_heads = 2, plain.head_dim = kHidden / 2;
  mha_weights.query.weight = {w.data(), Shape{kHidden, kHidden}};
  mha_weights.key.weight = {w.data(), Shape{kHidden, kHidden}};
  mha_weights.value.weight = {w.data(), Shape{kHidden, kHidden}};
  const MultiheadAttention attention(plain, mha_weights);
  ExpectErrorMentioning(
      [&] { attention.ForwardPacked(in, batch, latent_cache, 0, out_view); },
      "cache: made for multi-head latent attention layers");
  EXPECT_EQ(out, std::vector<float>(kHidden, 7.0f));
  ExpectErrorMentioning(
      [&] {
        PagedKvCacheOptions windowed = options;
        windowed.sliding_window = 8;
        PagedKvCache(config, windowed);
      },
      "a latent cache keeps every token");
}

// A latent's keys are its values: keys per channel and values per token cannot both
// hold.
TEST(LatentCache, RefusesKeysPerChannel) {
  const LatentAttentionConfig config = Config({});
  ExpectErrorMentioning(
      [&] { KvCache(config, 1, 8, DType::kInt8, KvScales::kPerChannelKeys); },
      "KvCache: storage int8 with scales kPerChannelKeys quantises keys and "
      "values differently");
  PagedKvCacheOptions options;
  options.num_blocks = 2, options.max_sequences = 1, options.storage = DType::kInt8;
  options.scales = KvScales::kPerChannelKeys;
  ExpectErrorMentioning(
      [&] { PagedKvCache(config, options); },
      "PagedKvCache: storage int8 with scales kPerChannelKeys quantises keys and "
      "values differently");
}

// One KvCache class holds both kinds of layer's tokens: each layer refuses the
// other's, naming the cache, and nothing is appended.
TEST(LatentCache, AndAPlainLayerRefuseEachOthersCaches) {
  const LatentAttentionConfig config = Config({});
  const Weights weights(config);
  const MultiheadLatentAttention latent_layer(config, weights.views);
  const testing::OwnedLayer plain = testing::MakeLayer(
      testing::LayerSpec{kHeads, kRank + kRope, 1, kHidden}, 3);  // one KV head of 48
  const MultiheadAttention plain_layer(plain.config, plain.weights);
  KvCache latent_cache(config, 1, 8), plain_cache(plain.config, 1, 8);
  const std::vector<float> x = RandomFloats(2 * kHidden, 4);
  std::vector<float> out(x.size());
  ExpectErrorMentioning(
      [&] {
        latent_layer.ForwardWithCache(
            TensorView(x.data(), Shape{1, 2, kHidden}), plain_cache,
            MutableTensorView(out.data(), Shape{1, 2, kHidden}));
      },
      "cache: must be made from a LatentAttentionConfig");
  ExpectErrorMentioning(
      [&] {
        plain_layer.ForwardWithCache(TensorView(x.data(), Shape{1, 2, kHidden}), {},
                                     latent_cache,
                                     MutableTensorView(out.data(), Shape{1, 2, kHidden}));
      },
      "cache: made for multi-head latent attention layers");
  EXPECT_EQ(latent_cache.length(0), 0);
  EXPECT_EQ(plain_cache.length(0), 0);
}

// MLA runs on the layers' one pipeline, so it takes what every layer takes: bf16
// hidden states are read as the floats they round to, and a bf16 output is the fp32
// one rounded; for the expanded prompt and the absorbed decode after it.
TEST(LatentLayer, Bf16HiddenStatesAndOutputsAreTheFloatPathRounded) {
  const LatentAttentionConfig config = Config({});
  const Weights weights(config);
  const MultiheadLatentAttention layer(config, weights.views);
  KvCache float_cache(config, 2, 16), bf16_cache(config, 2, 16);
  for (const int64_t step : {5, 1}) {
    std::vector<float> x = RandomFloats(2 * step * kHidden, 20 + step);
    std::vector<uint16_t> x16(x.size()), out16(x.size());
    internal::FloatToBf16(x.data(), x.size(), x16.data());
    internal::Bf16ToFloat(x16.data(), x16.size(), x.data());
    std::vector<float> out(x.size());
    const LatentForm form =
        layer.ForwardWithCache(TensorView(x.data(), Shape{2, step, kHidden}), float_cache,
                               MutableTensorView(out.data(), Shape{2, step, kHidden}));
    EXPECT_EQ(form, step == 5 ? LatentForm::kExpanded : LatentForm::kAbsorbed);
    layer.ForwardWithCache(
        TensorView(x16.data(), DType::kBFloat16, Shape{2, step, kHidden}), bf16_cache,
        MutableTensorView(out16.data(), DType::kBFloat16, Shape{2, step, kHidden}));
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_EQ(out16[i], internal::RoundToBf16Bits(out[i]))
          << "step " << step << " " << i;
    }
  }
}

// Rotary positions may come from options.position_ids, as for every layer. RoPE
// makes a logit depend on the distance between positions only, so a sequence placed
// 7 positions later attends as before (to rounding), through the contiguous cache and
// a packed step alike; positions in another order do not.
TEST(LatentLayer, PositionIdsMoveTheRotationOnly) {
  const LatentAttentionConfig config = Config({});
  const Weights weights(config);
  const MultiheadLatentAttention layer(config, weights.views);
  constexpr int64_t kTokens = 6;
  const std::vector<float> x = RandomFloats(kTokens * kHidden, 31);
  const auto cached = [&](const std::vector<int64_t>& positions) {
    KvCache cache(config, 1, kTokens);
    std::vector<float> out(x.size());
    ForwardOptions options;
    if (!positions.empty()) {
      options.position_ids =
          TensorView(positions.data(), DType::kInt64, Shape{1, kTokens});
    }
    layer.ForwardWithCache(TensorView(x.data(), Shape{1, kTokens, kHidden}), cache,
                           MutableTensorView(out.data(), Shape{1, kTokens, kHidden}),
                           options);
    return out;
  };
  const std::vector<float> plain = cached({});
  std::vector<int64_t> shifted(kTokens), reversed(kTokens);
  for (int64_t i = 0; i < kTokens; ++i) {
    shifted[i] = i + 7;
    reversed[i] = kTokens - 1 - i;
  }
  ExpectClose(cached(shifted), plain, "shifted positions", 1e-5);
  const std::vector<float> other = cached(reversed);
  double largest = 0;
  for (size_t i = 0; i < other.size(); ++i) {
    largest = std::max(largest, double(std::fabs(other[i] - plain[i])));
  }
  EXPECT_GT(largest, 1e-3);

  PagedKvCacheOptions options;
  options.num_blocks = 2, options.max_sequences = 1;
  PagedKvCache paged(config, options);
  paged.AddSequence(0);
  const int64_t id = 0, count = kTokens, starts[] = {0, kTokens};
  paged.AppendSlots(&id, &count, 1);
  ForwardOptions step_options;
  step_options.position_ids = TensorView(shifted.data(), DType::kInt64, Shape{kTokens});
  PackedStep step;
  step.Plan(paged,
            {TensorView(&id, DType::kInt64, Shape{1}),
             TensorView(starts, DType::kInt64, Shape{2})},
            step_options);
  std::vector<float> out(x.size());
  layer.ForwardPacked(TensorView(x.data(), Shape{kTokens, kHidden}), step, 0,
                      MutableTensorView(out.data(), Shape{kTokens, kHidden}));
  ExpectClose(out, plain, "packed, shifted positions", 1e-5);
}

TEST(LatentCache, BytesPerTokenAreTheLatentAndRotaryPart) {
  const LatentAttentionConfig config = Config({});
  EXPECT_EQ(KvCache(config, 1, 8).bytes_per_token(), (kRank + kRope) * 4);
  EXPECT_EQ(KvCache(config, 1, 8, DType::kBFloat16).bytes_per_token(),
            (kRank + kRope) * 2);
  EXPECT_EQ(KvCache(config, 1, 8, DType::kInt8).bytes_per_token(), kRank + kRope + 4);
}

TEST(LatentLayer, BadArgumentsNameThemselvesAndChangeNothing) {
  LatentAttentionConfig config = Config({});
  Weights weights(config);
  LatentAttentionWeights wrong = weights.views;
  wrong.kv_b_proj.shape = Shape{kHeads * kNope, kRank};
  ExpectErrorMentioning([&] { MultiheadLatentAttention(config, wrong); },
                        "weights.kv_b_proj");
  LatentAttentionConfig odd = config;
  odd.qk_rope_head_dim = 8;
  ExpectErrorMentioning([&] { KvCache(odd, 1, 8); },
                        "config.qk_rope_head_dim: must be a multiple of 16");
  const MultiheadLatentAttention layer(config, weights.views);
  KvCache cache(config, 1, 4);
  std::vector<float> x(3 * kHidden, 0.5f), out(3 * kHidden, 7.0f);
  layer.ForwardWithCache(TensorView(x.data(), Shape{1, 3, kHidden}), cache,
                         MutableTensorView(out.data(), Shape{1, 3, kHidden}));
  std::fill(out.begin(), out.end(), 7.0f);
  ExpectErrorMentioning(
      [&] {
        layer.ForwardWithCache(TensorView(x.data(), Shape{1, 2, kHidden}), cache,
                               MutableTensorView(out.data(), Shape{1, 2, kHidden}));
      },
      "cache: sequence 0 holds 3 tokens; appending 2 exceeds max_seq_len 4");
  ExpectErrorMentioning(
      [&] {
        layer.ForwardWithCache(TensorView(x.data(), Shape{1, 1, kHidden + 1}), cache,
                               MutableTensorView(out.data(), Shape{1, 1, kHidden}));
      },
      "hidden_states: expected float32 or bfloat16 [B >= 1, S >= 1, hidden_size=32]");
  EXPECT_EQ(cache.length(0), 3);
  EXPECT_EQ(out, std::vector<float>(3 * kHidden, 7.0f));
  LatentAttentionConfig other = config;
  other.kv_lora_rank = 48;
  KvCache other_cache(other, 1, 4);
  ExpectErrorMentioning(
      [&] {
        layer.ForwardWithCache(TensorView(x.data(), Shape{1, 1, kHidden}), other_cache,
                               MutableTensorView(out.data(), Shape{1, 1, kHidden}));
      },
      "cache: made for kv_lora_rank 48");
}

// Sizes near INT64_MAX are refused before any sum of them overflows (UBSan watches),
// and an eps that is not a positive finite float is refused, not rounded to 0 or inf.
TEST(LatentLayer, ConfigEdgesAreRefusedByName) {
  const LatentAttentionConfig config = Config({});
  const int64_t huge = std::numeric_limits<int64_t>::max() - 8;
  const std::vector<std::pair<std::function<void(LatentAttentionConfig&)>, std::string>>
      cases = {
          {[&](LatentAttentionConfig& c) { c.kv_lora_rank = huge; },
           "config.kv_lora_rank: must be in [1, 2^45], got 9223372036854775799"},
          {[&](LatentAttentionConfig& c) { c.qk_rope_head_dim = huge - 7; },
           "config.qk_rope_head_dim: must be in [0, 2^45]"},
          {[&](LatentAttentionConfig& c) { c.qk_nope_head_dim = huge; },
           "config.qk_nope_head_dim: must be in [1, 2^45]"},
          {[&](LatentAttentionConfig& c) { c.hidden_size = huge; },
           "config.hidden_size: must be in [1, 2^45]"},
          {[&](LatentAttentionConfig& c) { c.q_lora_rank = huge; },
           "config.q_lora_rank: must be in [0, 2^45]"},
          {[&](LatentAttentionConfig& c) { c.v_head_dim = -8; },
           "config.v_head_dim: must be in [1, 2^45], got -8"},
          {[&](LatentAttentionConfig& c) { c.rms_norm_eps = 1e300; },
           "config.rms_norm_eps: must be finite and > 0 as a float, got 1e+300"},
          {[&](LatentAttentionConfig& c) { c.rms_norm_eps = 1e-300; },
           "config.rms_norm_eps: must be finite and > 0 as a float, got 1e-300"},
      };
  for (const auto& [edit, message] : cases) {
    LatentAttentionConfig bad = config;
    edit(bad);
    ExpectErrorMentioning([&] { KvCache(bad, 1, 8); }, message);
  }
}

}  // namespace
}  // namespace mha

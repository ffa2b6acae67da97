// ForwardOptions::batch_invariant: a token's output bits do not depend on the tokens
// that share its call. Checked where oneDNN's kernels change (rows left over after
// its blocks of rows, tiles of several row groups, one row alone) and through a
// continuous-batching schedule against each sequence alone through a contiguous
// KvCache, with fp32 and bf16 weights, and with a sliding window, soft-capping and
// sinks, on every ISA CI runs (MHA_MAX_ISA=avx2 too).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <vector>

#include "tests/layer/latent_test_util.h"
#include "tests/cache/paged_test_util.h"

namespace mha::testing {
namespace {

constexpr int64_t kEmbed = 256, kHeads = 4, kKvHeads = 2, kHeadDim = 64;

struct WeightCase {
  const char* name;
  DType weight_dtype;
  bool decoder_features;  // a 40-key sliding window, soft-cap 30 and sinks
  // bf16: prefill chunks and decode rows on bf16 products alike (AMX tiles or
  // AVX512_BF16, whatever a block's row count), paged 16-token blocks and
  // KvCache's 128-token pages alike.
  DType kv_storage = DType::kFloat32;
};
void PrintTo(const WeightCase& c, std::ostream* os) { *os << c.name; }

class BatchInvariance : public ::testing::TestWithParam<WeightCase> {
 protected:
  BatchInvariance()
      : layer_(MakeRotaryLayer()), attention_(layer_.config, layer_.weights) {
    invariant_.batch_invariant = true;
  }
  OwnedLayer MakeRotaryLayer() const {
    LayerSpec spec;
    spec.num_heads = kHeads;
    spec.num_kv_heads = kKvHeads;
    spec.head_dim = kHeadDim;
    spec.query_dim = kEmbed;
    OwnedLayer layer = MakeLayer(spec, 5);
    layer.config.rotary.pairing = RotaryPairing::kHalfSplit;
    layer.config.weight_dtype = GetParam().weight_dtype;
    if (GetParam().decoder_features) {
      layer.config.features.sliding_window = 40;
      layer.config.features.softcap = 30.0f;
      layer.weights.sinks = TensorView(sinks_.data(), Shape{kHeads});
    }
    return layer;
  }
  // Rows [first, first + count) of `tokens`, each a one-token sequence, in one call.
  std::vector<float> OneTokenSequences(const std::vector<float>& tokens, int64_t first,
                                       int64_t count) const {
    PagedKvCacheOptions options;
    options.num_blocks = count;
    options.max_sequences = count;
    options.storage = GetParam().kv_storage;
    PagedKvCache cache(layer_.config, options);
    std::vector<Chunk> chunks;
    for (int64_t i = 0; i < count; ++i) {
      cache.AddSequence(i);
      chunks.push_back(
          {i, std::vector<float>(tokens.begin() + (first + i) * kEmbed,
                                 tokens.begin() + (first + i + 1) * kEmbed)});
    }
    std::vector<float> rows;
    for (const std::vector<float>& row :
         AppendAndForward(attention_, cache, chunks, 0, invariant_))
      rows.insert(rows.end(), row.begin(), row.end());
    return rows;
  }

  std::vector<float> sinks_ = RandomFloats(kHeads, 9);
  OwnedLayer layer_;
  MultiheadAttention attention_;
  ForwardOptions invariant_;
};

TEST_P(BatchInvariance, EveryRowAloneOrAmongAnyNumberOfRows) {
  constexpr int64_t kMaxRows = 140;
  const std::vector<float> tokens = RandomFloats(kMaxRows * kEmbed, 8);
  std::vector<float> alone;
  for (int64_t row = 0; row < kMaxRows; ++row) {
    const std::vector<float> one = OneTokenSequences(tokens, row, 1);
    alone.insert(alone.end(), one.begin(), one.end());
  }
  for (int64_t rows : {2, 3, 5, 7, 8, 13, 16, 31, 32, 44, 61, 64, 65, 97, 130, 140}) {
    const std::vector<float> together = OneTokenSequences(tokens, 0, rows);
    for (int64_t row = 0; row < rows; ++row) {
      ASSERT_TRUE(std::equal(together.begin() + row * kEmbed,
                             together.begin() + (row + 1) * kEmbed,
                             alone.begin() + row * kEmbed))
          << "row " << row << " of " << rows;
    }
  }
}

// Each sequence alone: half its tokens as one prefill, then one token per step.
std::vector<float> AloneThroughKvCache(const MultiheadAttention& attention,
                                       const std::vector<float>& tokens, DType storage,
                                       const ForwardOptions& options) {
  const int64_t length = static_cast<int64_t>(tokens.size()) / kEmbed;
  KvCache cache(attention.config(), 1, length, storage);
  std::vector<float> output(tokens.size());
  const int64_t prefill = std::max<int64_t>(1, length / 2);
  for (int64_t first = 0; first < length; first = first ? first + 1 : prefill) {
    const int64_t count = first ? 1 : prefill;
    attention.ForwardWithCache(
        TensorView(tokens.data() + first * kEmbed, Shape{1, count, kEmbed}), {}, cache,
        MutableTensorView(output.data() + first * kEmbed, Shape{1, count, kEmbed}),
        options);
  }
  return output;
}

TEST_P(BatchInvariance, ContinuousBatchingGivesEachSequenceItsAloneBits) {
  // 300: decodes past 256 keys, which alone would be split (flash-decoding), inside
  // the packed steps' chunks.
  const std::vector<int64_t> lengths = {37, 5, 80, 16, 1, 130, 23, 300};
  const int64_t count = static_cast<int64_t>(lengths.size());
  std::vector<std::vector<float>> tokens, expected, outputs(lengths.size());
  for (int64_t s = 0; s < count; ++s) {
    tokens.push_back(RandomFloats(lengths[s] * kEmbed, 40 + s));
    expected.push_back(
        AloneThroughKvCache(attention_, tokens[s], GetParam().kv_storage, invariant_));
  }
  PagedKvCacheOptions options;
  options.num_blocks = 96;
  options.max_sequences = count;
  options.storage = GetParam().kv_storage;
  PagedKvCache cache(layer_.config, options);
  for (int64_t s = 0; s < count; ++s) cache.AddSequence(s);
  std::mt19937 random(3);
  std::vector<int64_t> done(lengths.size(), 0);
  for (bool busy = true; busy;) {
    std::vector<Chunk> chunks;
    for (int64_t s = 0; s < count; ++s) {
      const int64_t take = std::min<int64_t>(lengths[s] - done[s], 1 + random() % 19);
      if (take == 0) continue;
      chunks.push_back(
          {s, std::vector<float>(tokens[s].begin() + done[s] * kEmbed,
                                 tokens[s].begin() + (done[s] + take) * kEmbed)});
      done[s] += take;
    }
    busy = !chunks.empty();
    if (!busy) break;
    const auto step = AppendAndForward(attention_, cache, chunks, 0, invariant_);
    for (size_t i = 0; i < chunks.size(); ++i) {
      auto& out = outputs[static_cast<size_t>(chunks[i].sequence)];
      out.insert(out.end(), step[i].begin(), step[i].end());
    }
  }
  for (int64_t s = 0; s < count; ++s) {
    EXPECT_EQ(outputs[s], expected[s]) << "sequence " << s << " of " << lengths[s];
  }
}

INSTANTIATE_TEST_SUITE_P(
    Weights, BatchInvariance,
    ::testing::Values(WeightCase{"fp32", DType::kFloat32, false},
                      WeightCase{"bf16", DType::kBFloat16, false},
                      WeightCase{"fp32_window_softcap_sinks", DType::kFloat32, true},
                      WeightCase{"bf16_kv", DType::kFloat32, false, DType::kBFloat16},
                      WeightCase{"bf16_kv_window_softcap_sinks", DType::kFloat32, true,
                                 DType::kBFloat16}),
    [](const auto& info) { return info.param.name; });

// MLA (absorbed, over latent pages): each sequence's outputs in packed steps of random
// chunks beside the others, on 2 threads, are its bits alone through a KvCache
// in one call on 1 thread. (A layer wide enough that oneDNN cuts a projection's
// depth by its row count unless asked not to.)
TEST(LatentBatchInvariance, ContinuousBatchingGivesEachSequenceItsAloneBits) {
  LatentAttentionConfig config = SmallLatentConfig(/*q_lora_rank=*/192);
  config.hidden_size = 512;
  config.form = LatentForm::kAbsorbed;
  const LatentWeightsForTest weights(config);
  const MultiheadLatentAttention attention(config, weights.views);
  const int64_t hidden = config.hidden_size;
  ForwardOptions alone, packed;
  alone.batch_invariant = packed.batch_invariant = true;
  alone.num_threads = 1, packed.num_threads = 2;
  const std::vector<int64_t> lengths = {37, 5, 60, 16, 1, 23};
  const int64_t count = static_cast<int64_t>(lengths.size());
  std::vector<std::vector<float>> tokens, expected, outputs(lengths.size());
  for (int64_t s = 0; s < count; ++s) {
    tokens.push_back(RandomFloats(lengths[s] * config.hidden_size, 60 + s));
    KvCache cache(config, 1, lengths[s]);
    expected.emplace_back(tokens[s].size());
    attention.ForwardWithCache(
        TensorView(tokens[s].data(), Shape{1, lengths[s], hidden}), cache,
        MutableTensorView(expected[s].data(), Shape{1, lengths[s], hidden}), alone);
  }
  PagedKvCacheOptions options;
  options.num_blocks = 32;
  options.max_sequences = count;
  PagedKvCache cache(config, options);
  for (int64_t s = 0; s < count; ++s) cache.AddSequence(s);
  std::mt19937 random(4);
  std::vector<int64_t> done(lengths.size(), 0);
  for (;;) {
    std::vector<int64_t> ids, takes, starts = {0};
    std::vector<float> rows;
    for (int64_t s = 0; s < count; ++s) {
      const int64_t take = std::min<int64_t>(lengths[s] - done[s], 1 + random() % 11);
      if (take == 0) continue;
      ids.push_back(s), takes.push_back(take), starts.push_back(starts.back() + take);
      rows.insert(rows.end(), tokens[s].begin() + done[s] * hidden,
                  tokens[s].begin() + (done[s] + take) * hidden);
      done[s] += take;
    }
    if (ids.empty()) break;
    const int64_t n = static_cast<int64_t>(ids.size()), total = starts.back();
    cache.AppendSlots(ids.data(), takes.data(), n);
    std::vector<float> out(rows.size());
    attention.ForwardPacked(TensorView(rows.data(), Shape{total, hidden}),
                            {TensorView(ids.data(), DType::kInt64, Shape{n}),
                             TensorView(starts.data(), DType::kInt64, Shape{n + 1})},
                            cache, 0, MutableTensorView(out.data(), Shape{total, hidden}),
                            packed);
    for (int64_t i = 0; i < n; ++i) {
      auto& sequence = outputs[static_cast<size_t>(ids[i])];
      sequence.insert(sequence.end(), out.begin() + starts[i] * hidden,
                      out.begin() + starts[i + 1] * hidden);
    }
  }
  for (int64_t s = 0; s < count; ++s) {
    EXPECT_EQ(outputs[s], expected[s]) << "sequence " << s << " of " << lengths[s];
  }
}

// The exemption docs/errors.md states: keys per channel (int8 kPerChannelKeys, int4)
// requantise a partial block as its tokens arrive, so the rows of a prompt computed
// before its block filled read other codes than the same rows of the prompt whole.
// The difference stays within the storage's own accuracy bound (docs/serving.md).
TEST(BatchInvarianceExemption, KeysPerChannelDifferByChunkingWithinTheirBound) {
  LayerSpec spec;
  spec.num_heads = kHeads;
  spec.num_kv_heads = kKvHeads;
  spec.head_dim = kHeadDim;
  spec.query_dim = kEmbed;
  const OwnedLayer layer = MakeLayer(spec, 5);
  const MultiheadAttention attention(layer.config, layer.weights);
  ForwardOptions invariant;
  invariant.batch_invariant = true;
  const std::vector<float> tokens = RandomFloats(8 * kEmbed, 12);
  for (const DType storage : {DType::kInt8, DType::kInt4}) {
    const auto run = [&](int64_t first_chunk) {
      KvCache cache(attention.config(), 1, 8, storage, KvScales::kPerChannelKeys);
      std::vector<float> output(tokens.size());
      for (int64_t first = 0; first < 8; first += first_chunk) {
        const int64_t count = first == 0 ? first_chunk : 8 - first;
        attention.ForwardWithCache(
            TensorView(tokens.data() + first * kEmbed, Shape{1, count, kEmbed}), {},
            cache,
            MutableTensorView(output.data() + first * kEmbed, Shape{1, count, kEmbed}),
            invariant);
        if (first > 0) break;
      }
      return output;
    };
    const std::vector<float> whole = run(8), chunked = run(5);
    double largest = 0.0, difference = 0.0;
    for (size_t i = 0; i < whole.size(); ++i) {
      largest = std::max(largest, std::fabs(double{whole[i]}));
      difference = std::max(difference, std::fabs(double{whole[i]} - chunked[i]));
    }
    const double relative = difference / std::max(1.0, largest);
    std::cout << DTypeName(storage) << " keys per channel, 8 tokens whole against 5 + 3: "
              << "max difference " << relative << " of max(1, max |output|)\n";
    EXPECT_LE(relative, storage == DType::kInt8 ? 1e-2 : 5e-2) << DTypeName(storage);
  }
}

TEST(BatchInvarianceOptions, Int8WeightsAreRefusedNamingTheOption) {
  LayerSpec spec;
  OwnedLayer layer = MakeLayer(spec, 1);
  layer.config.weight_dtype = DType::kInt8;
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<float> input = RandomFloats(3 * spec.query_dim, 2);
  std::vector<float> output(input.size(), -1.0f);
  ForwardOptions options;
  options.batch_invariant = true;
  ExpectErrorMentioning(
      [&] {
        attention.Forward(
            {TensorView(input.data(), Shape{1, 3, spec.query_dim}), {}, {}}, {},
            {MutableTensorView(output.data(), Shape{1, 3, spec.query_dim}), {}}, options);
      },
      "options.batch_invariant: needs float32 or bfloat16 weights, got weight_dtype "
      "int8");
  EXPECT_EQ(output, std::vector<float>(input.size(), -1.0f));
}

}  // namespace
}  // namespace mha::testing

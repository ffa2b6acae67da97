// KV-cache decoding: prefill, token-by-token decode and chunked prefill give the
// same outputs as one causal Forward over the whole sequence (MHA, GQA, MQA);
// ragged batches keep sequences apart and padding out of results; errors leave the
// cache and the output exactly as they were.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "tests/test_util.h"

namespace mha::testing {
namespace {

constexpr int64_t kEmbed = 24;

OwnedLayer DecoderLayer(int64_t num_kv_heads) {
  LayerSpec spec;
  spec.num_heads = 4;
  spec.num_kv_heads = num_kv_heads;
  spec.head_dim = 8;
  spec.query_dim = kEmbed;
  return MakeLayer(spec, 11);
}

// One causal Forward over x [batch, length, kEmbed]: the expected outputs.
std::vector<float> FullCausal(const MultiheadAttention& attention, const float* x,
                              int64_t batch, int64_t length) {
  std::vector<float> out(batch * length * kEmbed);
  AttentionMasks masks;
  masks.is_causal = true;
  attention.Forward({TensorView(x, Shape{batch, length, kEmbed}), {}, {}}, masks,
                    {MutableTensorView(out.data(), Shape{batch, length, kEmbed}), {}});
  return out;
}

// Rows [first, first + count) of every batch element of x [batch, length, kEmbed].
std::vector<float> Slice(const std::vector<float>& x, int64_t batch, int64_t length,
                         int64_t first, int64_t count) {
  std::vector<float> slice;
  for (int64_t b = 0; b < batch; ++b) {
    const auto row = x.begin() + (b * length + first) * kEmbed;
    slice.insert(slice.end(), row, row + count * kEmbed);
  }
  return slice;
}

struct Schedule {
  const char* name;
  int64_t num_kv_heads;
  std::vector<int64_t> chunks;  // tokens appended per step
  DType storage = DType::kFloat32;
};

// bf16 and int8 storage round keys and values: the bounds docs/serving.md states.
double Tolerance(DType storage) { return storage == DType::kFloat32 ? 1e-4 : 1e-2; }

void PrintTo(const Schedule& s, std::ostream* os) { *os << s.name; }

class CacheMatchesCausalForward : public ::testing::TestWithParam<Schedule> {};

TEST_P(CacheMatchesCausalForward, EveryStep) {
  const Schedule& schedule = GetParam();
  const int64_t batch = 2;
  const int64_t length =
      std::accumulate(schedule.chunks.begin(), schedule.chunks.end(), 0);
  const OwnedLayer layer = DecoderLayer(schedule.num_kv_heads);
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<float> x = RandomFloats(batch * length * kEmbed, 5);
  const std::vector<float> expected = FullCausal(attention, x.data(), batch, length);

  KvCache cache(layer.config, batch, length + 3, schedule.storage);
  EXPECT_EQ(cache.storage(), schedule.storage);
  int64_t position = 0;
  for (int64_t count : schedule.chunks) {
    const std::vector<float> step = Slice(x, batch, length, position, count);
    std::vector<float> out(step.size());
    attention.ForwardWithCache(
        TensorView(step.data(), Shape{batch, count, kEmbed}), {}, cache,
        MutableTensorView(out.data(), Shape{batch, count, kEmbed}));
    position += count;
    ExpectClose(out, Slice(expected, batch, length, position - count, count),
                schedule.name, Tolerance(schedule.storage));
    EXPECT_EQ(cache.length(0), position);
    EXPECT_EQ(cache.length(1), position);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, CacheMatchesCausalForward,
    ::testing::Values(
        Schedule{"prefill", 4, {23}}, Schedule{"decode", 4, std::vector<int64_t>(23, 1)},
        Schedule{"chunked_prefill", 4, {5, 5, 5, 5, 3}},
        Schedule{"prefill_then_decode_gqa", 2, {17, 1, 1, 1, 1, 1, 1}},
        Schedule{"chunked_mqa", 1, {3, 9, 1, 60, 1}},
        Schedule{"decode_bf16", 2, std::vector<int64_t>(23, 1), DType::kBFloat16},
        Schedule{"chunked_bf16", 4, {5, 130, 1, 1}, DType::kBFloat16},
        Schedule{"decode_int8", 2, std::vector<int64_t>(23, 1), DType::kInt8},
        Schedule{"chunked_int8", 4, {5, 130, 1, 1}, DType::kInt8}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(KvCache, RaggedBatchKeepsSequencesApartAndPaddingOut) {
  const OwnedLayer layer = DecoderLayer(2);
  const MultiheadAttention attention(layer.config, layer.weights);
  // Three sequences with their own tokens; steps append ragged counts (0 allowed).
  const std::vector<std::vector<int64_t>> steps = {{5, 9, 2}, {3, 0, 6}, {1, 1, 1}};
  const int64_t totals[3] = {9, 10, 9};
  std::vector<std::vector<float>> tokens, expected;
  for (int s = 0; s < 3; ++s) {
    tokens.push_back(RandomFloats(totals[s] * kEmbed, 20 + s));
    expected.push_back(FullCausal(attention, tokens[s].data(), 1, totals[s]));
  }
  KvCache cache(layer.config, 4, 16);
  int64_t positions[3] = {0, 0, 0};
  for (const std::vector<int64_t>& counts : steps) {
    const int64_t width = *std::max_element(counts.begin(), counts.end());
    std::vector<float> batch(3 * width * kEmbed, 1e6f);  // padding: large, must not leak
    for (int s = 0; s < 3; ++s) {
      std::copy_n(tokens[s].begin() + positions[s] * kEmbed, counts[s] * kEmbed,
                  batch.begin() + s * width * kEmbed);
    }
    std::vector<float> out(batch.size(), -7.0f);
    attention.ForwardWithCache(TensorView(batch.data(), Shape{3, width, kEmbed}),
                               TensorView(counts.data(), DType::kInt64, Shape{3}), cache,
                               MutableTensorView(out.data(), Shape{3, width, kEmbed}));
    for (int s = 0; s < 3; ++s) {
      const auto got = out.begin() + s * width * kEmbed;
      ExpectClose(
          std::vector<float>(got, got + counts[s] * kEmbed),
          std::vector<float>(expected[s].begin() + positions[s] * kEmbed,
                             expected[s].begin() + (positions[s] + counts[s]) * kEmbed),
          "ragged sequence");
      for (auto it = got + counts[s] * kEmbed; it != got + width * kEmbed; ++it) {
        ASSERT_EQ(*it, 0.0f) << "padding row of sequence " << s << " is not zero";
      }
      positions[s] += counts[s];
      EXPECT_EQ(cache.length(s), positions[s]);
    }
  }
  EXPECT_EQ(cache.length(3), 0);
}

TEST(KvCache, TruncateRollsBackTokens) {
  const OwnedLayer layer = DecoderLayer(2);
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<float> x = RandomFloats(7 * kEmbed, 31);
  const std::vector<float> rejected = RandomFloats(3 * kEmbed, 32);
  const std::vector<float> expected = FullCausal(attention, x.data(), 1, 7);
  KvCache cache(layer.config, 1, 10);
  std::vector<float> out(5 * kEmbed);
  attention.ForwardWithCache(TensorView(x.data(), Shape{5, kEmbed}), {}, cache,
                             MutableTensorView(out.data(), Shape{5, kEmbed}));
  std::vector<float> draft(3 * kEmbed);
  attention.ForwardWithCache(TensorView(rejected.data(), Shape{3, kEmbed}), {}, cache,
                             MutableTensorView(draft.data(), Shape{3, kEmbed}));
  cache.Truncate(0, 5);  // the three speculative tokens were rejected
  EXPECT_EQ(cache.length(0), 5);
  out.resize(2 * kEmbed);
  attention.ForwardWithCache(TensorView(x.data() + 5 * kEmbed, Shape{2, kEmbed}), {},
                             cache, MutableTensorView(out.data(), Shape{2, kEmbed}));
  ExpectClose(out, std::vector<float>(expected.end() - 2 * kEmbed, expected.end()),
              "after truncate");
  EXPECT_THROW(cache.Truncate(0, 8), Error);
  EXPECT_EQ(cache.length(0), 7);
}

TEST(KvCache, ResetSequenceStartsOver) {
  const OwnedLayer layer = DecoderLayer(4);
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<float> x = RandomFloats(6 * kEmbed, 3),
                           other = RandomFloats(9 * kEmbed, 4);
  const std::vector<float> expected = FullCausal(attention, x.data(), 1, 6);
  KvCache cache(layer.config, 1, 12);
  std::vector<float> out(9 * kEmbed);
  attention.ForwardWithCache(TensorView(other.data(), Shape{9, kEmbed}), {}, cache,
                             MutableTensorView(out.data(), Shape{9, kEmbed}));
  cache.Reset(0);
  EXPECT_EQ(cache.length(0), 0);
  out.resize(6 * kEmbed);
  attention.ForwardWithCache(TensorView(x.data(), Shape{6, kEmbed}), {}, cache,
                             MutableTensorView(out.data(), Shape{6, kEmbed}));
  ExpectClose(out, expected, "after reset");
}

// A non-finite token has no int8 form: every output that attends to it is NaN, the
// ones before it are untouched (found by the C API fuzzer: the cast to int8 was
// undefined, and the NaN then came out as zeros). Truncated away, it leaves nothing
// behind: later steps match, bit for bit, a cache whose fifth token was finite.
void ExpectNonFiniteTokensBecomeNaNAndTruncateAway(DType storage, KvScales scales) {
  const OwnedLayer layer = DecoderLayer(2);
  const MultiheadAttention attention(layer.config, layer.weights);
  std::vector<float> x = RandomFloats(6 * kEmbed, 12);
  const std::vector<float> clean = x;
  x[4 * kEmbed + 3] = std::numeric_limits<float>::infinity();
  x[4 * kEmbed + 5] = std::numeric_limits<float>::quiet_NaN();
  KvCache poisoned(layer.config, 1, 8, storage, scales),
      fresh(layer.config, 1, 8, storage, scales);
  std::vector<float> out(5 * kEmbed), expected(6 * kEmbed);
  attention.ForwardWithCache(TensorView(x.data(), Shape{5, kEmbed}), {}, poisoned,
                             MutableTensorView(out.data(), Shape{5, kEmbed}));
  for (int64_t k = 0; k < 4 * kEmbed; ++k) ASSERT_TRUE(std::isfinite(out[k])) << k;
  for (int64_t k = 4 * kEmbed; k < 5 * kEmbed; ++k) EXPECT_TRUE(std::isnan(out[k])) << k;
  poisoned.Truncate(0, 4);
  out.resize(2 * kEmbed);
  attention.ForwardWithCache(TensorView(clean.data() + 4 * kEmbed, Shape{2, kEmbed}), {},
                             poisoned, MutableTensorView(out.data(), Shape{2, kEmbed}));
  attention.ForwardWithCache(TensorView(clean.data(), Shape{5, kEmbed}), {}, fresh,
                             MutableTensorView(expected.data(), Shape{5, kEmbed}));
  fresh.Truncate(0, 4);
  attention.ForwardWithCache(TensorView(clean.data() + 4 * kEmbed, Shape{2, kEmbed}), {},
                             fresh, MutableTensorView(expected.data(), Shape{2, kEmbed}));
  for (int64_t k = 0; k < 2 * kEmbed; ++k) ASSERT_EQ(out[k], expected[k]) << k;
}

TEST(KvCache, NonFiniteTokensInAnInt8CacheBecomeNaNAndTruncateAway) {
  ExpectNonFiniteTokensBecomeNaNAndTruncateAway(DType::kInt8, KvScales::kPerToken);
}

// ggml's q8_0 and q4_0: a NaN group scale reaches the rows that attend its token, not
// the earlier rows of the same step (a weight of 0 stays 0, as int8's token scales
// do), on every path: the integer kernels (x86 from AVX2) and the fp32 one.
TEST(KvCache, NonFiniteTokensInGgmlBlockCachesBecomeNaNAndTruncateAway) {
  for (const DType storage : {DType::kInt8, DType::kInt4}) {
    SCOPED_TRACE(storage == DType::kInt8 ? "q8_0" : "q4_0");
    ExpectNonFiniteTokensBecomeNaNAndTruncateAway(storage, KvScales::kPerGroup);
  }
}

TEST(KvCache, FailedAppendLeavesCacheAndOutputAsTheyWere) {
  const OwnedLayer layer = DecoderLayer(2);
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<float> x = RandomFloats(12 * kEmbed, 8);
  const std::vector<float> expected = FullCausal(attention, x.data(), 1, 9);
  KvCache cache(layer.config, 1, 9);
  std::vector<float> out(8 * kEmbed);
  attention.ForwardWithCache(TensorView(x.data(), Shape{8, kEmbed}), {}, cache,
                             MutableTensorView(out.data(), Shape{8, kEmbed}));

  std::vector<float> sentinel(3 * kEmbed, 42.0f);
  ExpectErrorMentioning(
      [&] {
        attention.ForwardWithCache(TensorView(x.data() + 8 * kEmbed, Shape{3, kEmbed}),
                                   {}, cache,
                                   MutableTensorView(sentinel.data(), Shape{3, kEmbed}));
      },
      "sequence 0 holds 8 tokens; appending 3 exceeds max_seq_len 9");
  EXPECT_EQ(cache.length(0), 8);
  for (float v : sentinel) ASSERT_EQ(v, 42.0f);

  KvCache other_shape(DecoderLayer(1).config, 1, 9);
  ExpectErrorMentioning(
      [&] {
        attention.ForwardWithCache(TensorView(x.data(), Shape{1, kEmbed}), {},
                                   other_shape,
                                   MutableTensorView(sentinel.data(), Shape{1, kEmbed}));
      },
      "cache: made for num_kv_heads=1 head_dim=8, this layer has num_kv_heads=2");
  EXPECT_EQ(other_shape.length(0), 0);

  const int64_t too_many[1] = {2};
  ExpectErrorMentioning(
      [&] {
        attention.ForwardWithCache(
            TensorView(x.data(), Shape{1, 1, kEmbed}),
            TensorView(too_many, DType::kInt64, Shape{1}), cache,
            MutableTensorView(sentinel.data(), Shape{1, 1, kEmbed}));
      },
      "new_lengths[0]: must be in [0, 1], got 2");
  ExpectErrorMentioning(
      [&] {
        attention.ForwardWithCache(
            TensorView(x.data(), Shape{2, 1, kEmbed}), {}, cache,
            MutableTensorView(sentinel.data(), Shape{2, 1, kEmbed}));
      },
      "batch 2 exceeds the cache's max_batch 1");
  EXPECT_EQ(cache.length(0), 8);

  // The cache still works as if the failed calls never happened.
  out.resize(kEmbed);
  attention.ForwardWithCache(TensorView(x.data() + 8 * kEmbed, Shape{1, kEmbed}), {},
                             cache, MutableTensorView(out.data(), Shape{1, kEmbed}));
  ExpectClose(out, std::vector<float>(expected.end() - kEmbed, expected.end()),
              "after errors");
}

// Sizes no process could map are errors naming max_batch and max_seq_len, raised
// before anything is allocated (the resident set grows by less than 64 MiB).
TEST(KvCache, AbsurdSizesAreErrorsBeforeAnyAllocation) {
  const OwnedLayer layer = DecoderLayer(2);
  const int64_t cases[][2] = {{int64_t{1} << 28, int64_t{1} << 40},
                              {int64_t{1} << 62, 1},
                              {int64_t{1} << 56, 16},
                              {1, INT64_MAX},
                              {INT64_MAX, INT64_MAX}};
  const long resident_before = MaxResidentKiB();
  for (const auto& sizes : cases) {
    for (const DType storage : {DType::kFloat32, DType::kInt8}) {
      try {
        KvCache cache(layer.config, sizes[0], sizes[1], storage);
        ADD_FAILURE() << "no error for " << sizes[0] << " x " << sizes[1];
      } catch (const Error& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find("max_batch " + std::to_string(sizes[0])),
                  std::string::npos)
            << message;
        EXPECT_NE(message.find("max_seq_len " + std::to_string(sizes[1])),
                  std::string::npos)
            << message;
      }
    }
  }
  EXPECT_LT(MaxResidentKiB() - resident_before, 64 * 1024);
}

TEST(KvCache, CrossAttentionLayerIsRejected) {
  LayerSpec spec;
  spec.query_dim = 8;
  spec.key_dim = 5;
  const OwnedLayer layer = MakeLayer(spec, 2);
  const MultiheadAttention attention(layer.config, layer.weights);
  KvCache cache(layer.config, 1, 4);
  std::vector<float> x(8), out(8);
  ExpectErrorMentioning(
      [&] {
        attention.ForwardWithCache(TensorView(x.data(), Shape{1, 8}), {}, cache,
                                   MutableTensorView(out.data(), Shape{1, 8}));
      },
      "needs a self-attention layer");
}

// Cross-attention: the memory projected once into a cache, then decoder steps of one
// or several queries, equal one Forward over (query, memory, memory) with the
// memory's lengths as key_lengths, for every storage type, with and without QK-norm
// (per head, and OLMo 2's across heads, which the memory's keys must get too).
class CrossAttentionCache : public ::testing::TestWithParam<const char*> {};

TEST_P(CrossAttentionCache, StepsMatchForwardOverTheMemory) {
  LayerSpec spec;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  spec.head_dim = 8;
  spec.query_dim = 24;
  spec.key_dim = spec.value_dim = 40;
  OwnedLayer layer = MakeLayer(spec, 61);
  const std::string norm = GetParam();
  const bool across = norm == "qk_norm_across_heads";
  const std::vector<float> query_norm = RandomFloats(across ? 32 : 8, 66, 0.5f),
                           key_norm = RandomFloats(across ? 16 : 8, 67, 0.5f);
  if (norm != "no_qk_norm") {
    layer.config.features.qk_norm =
        QkNorm{1e-5, false, across ? QkNormScope::kAcrossHeads : QkNormScope::kPerHead};
    layer.weights.query_norm_weight =
        TensorView(query_norm.data(), Shape{static_cast<int64_t>(query_norm.size())});
    layer.weights.key_norm_weight =
        TensorView(key_norm.data(), Shape{static_cast<int64_t>(key_norm.size())});
  }
  const MultiheadAttention attention(layer.config, layer.weights);
  const int64_t batch = 2, memory_len = 150;
  const std::vector<float> memory = RandomFloats(batch * memory_len * 40, 62);
  const int64_t lengths[2] = {150, 97};
  for (DType storage : {DType::kFloat32, DType::kBFloat16, DType::kInt8}) {
    KvCache cache(layer.config, batch, memory_len, storage);
    attention.ProjectMemory(TensorView(memory.data(), Shape{batch, memory_len, 40}),
                            TensorView(lengths, DType::kInt64, Shape{batch}), cache);
    EXPECT_EQ(cache.length(1), 97);
    for (int64_t queries : {1, 3, 1}) {
      const std::vector<float> query = RandomFloats(batch * queries * 24, 63 + queries);
      std::vector<float> out(batch * queries * 24), expected(out.size());
      attention.ForwardCrossAttention(
          TensorView(query.data(), Shape{batch, queries, 24}), cache,
          MutableTensorView(out.data(), Shape{batch, queries, 24}));
      AttentionMasks masks;
      masks.key_lengths = TensorView(lengths, DType::kInt64, Shape{batch});
      attention.Forward(
          {TensorView(query.data(), Shape{batch, queries, 24}),
           TensorView(memory.data(), Shape{batch, memory_len, 40}),
           TensorView(memory.data(), Shape{batch, memory_len, 40})},
          masks, {MutableTensorView(expected.data(), Shape{batch, queries, 24}), {}});
      ExpectClose(out, expected, DTypeName(storage), Tolerance(storage));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(QkNorms, CrossAttentionCache,
                         ::testing::Values("no_qk_norm", "qk_norm_per_head",
                                           "qk_norm_across_heads"),
                         [](const auto& info) { return std::string(info.param); });

TEST(CrossAttentionCacheErrors, RefusesRotaryLayersAndWrongShapes) {
  LayerSpec spec;
  spec.num_heads = 2;
  spec.head_dim = 8;
  spec.query_dim = 16;
  OwnedLayer layer = MakeLayer(spec, 64);
  const MultiheadAttention plain(layer.config, layer.weights);
  KvCache cache(layer.config, 1, 8);
  const std::vector<float> memory = RandomFloats(9 * 16, 65);
  ExpectErrorMentioning(
      [&] {
        plain.ProjectMemory(TensorView(memory.data(), Shape{1, 9, 16}), {}, cache);
      },
      "exceeds the cache's max_seq_len 8");
  EXPECT_EQ(cache.length(0), 0);
  layer.config.rotary.pairing = RotaryPairing::kHalfSplit;
  const MultiheadAttention rotary(layer.config, layer.weights);
  ExpectErrorMentioning(
      [&] {
        rotary.ProjectMemory(TensorView(memory.data(), Shape{1, 8, 16}), {}, cache);
      },
      "rotary");
}

}  // namespace
}  // namespace mha::testing

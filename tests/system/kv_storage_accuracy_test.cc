// The accuracy of every KV storage kind, stated in docs/serving.md: bounds against the
// double-precision layer per data regime, the absolute error on unit-variance q/k/v,
// and a long decode whose error must not grow with the number of cached tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "tests/cache/paged_test_util.h"
#include "tests/test_util.h"

namespace mha::testing {
namespace {

// Every reduced storage a cache offers.
struct StorageKind {
  const char* name;
  DType storage;
  KvScales scales;
};
constexpr StorageKind kKinds[] = {
    {"bf16", DType::kBFloat16, KvScales::kPerToken},
    {"int8", DType::kInt8, KvScales::kPerToken},
    {"fp8_e4m3", DType::kFloat8E4M3, KvScales::kPerToken},
    {"fp8_e5m2", DType::kFloat8E5M2, KvScales::kPerToken},
    {"fp8_e4m3_scale_free", DType::kFloat8E4M3, KvScales::kNone},
    {"fp8_e5m2_scale_free", DType::kFloat8E5M2, KvScales::kNone},
    {"int8_channel_keys", DType::kInt8, KvScales::kPerChannelKeys},
    {"int4", DType::kInt4, KvScales::kPerChannelKeys},
    {"q8_0", DType::kInt8, KvScales::kPerGroup},
    {"q4_0", DType::kInt4, KvScales::kPerGroup},
};
constexpr int kKindCount = sizeof(kKinds) / sizeof(kKinds[0]);

// The bounds, each under its conditions: max |out - ref| over max(1, max |ref|)
// against the double-precision layer, worst of kSeeds seeds, 2 heads over 128 causal
// tokens. Quantising a K/V row moves the logits in proportion to their spread and the
// values in proportion to the row's largest entry (int8's step) or to themselves
// (fp8's and bf16's relative steps), so the bound depends on the data: these regimes
// say how. A bf16 cache on a CPU with AVX512_BF16 also rounds queries and
// probabilities (bf16 dot products): its own bound, larger where K rows are large (a
// query's rounding moves each logit by about 2^-9 |q| |k|). (Seen: the measured
// worst, in docs/serving.md.)
struct AccuracyRegime {
  const char* name;
  int64_t head_dim;
  float input_sd;             // of the inputs (the q, k, v themselves with `identity`)
  float outlier;              // > 0: one entry of every K/V row has this value
  bool identity;              // identity projections: bounds on attention alone
  double bounds[kKindCount];  // in kKinds' order
  double bf16_dot_bound;
  // With identity: q, k and v drawn independently (the input row is [q, k, v] and
  // each projection selects its third); else q = k = v, which makes each query's own
  // key stand out.
  bool independent_qkv = false;
};

void PrintTo(const AccuracyRegime& r, std::ostream* os) { *os << r.name; }

class KvStorageAccuracy : public ::testing::TestWithParam<AccuracyRegime> {};

// The width of a regime's input rows: [q, k, v] when drawn independently.
int64_t InputDim(const AccuracyRegime& r) {
  return (r.independent_qkv ? 3 : 1) * 2 * r.head_dim;
}

OwnedLayer AccuracyLayer(const AccuracyRegime& r, uint32_t seed) {
  const int64_t embed = 2 * r.head_dim, input = InputDim(r);
  OwnedLayer layer =
      MakeLayer(LayerSpec{2, r.head_dim, 0, input, 0, 0, WeightLayout::kOutIn, true, true,
                          WeightLayout::kOutIn, embed, true},
                seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> weight(0.0f, 0.3f), bias(0.0f, 0.1f);
  for (int i = 0; i < 8; ++i) {
    // Identity: projection i (q, k, v, out) reads input columns from its `first`.
    const int64_t columns = i < 3 ? input : embed;
    const int64_t first = r.independent_qkv && i < 3 ? i * embed : 0;
    for (size_t j = 0; j < layer.storage[i].size(); ++j) {
      const int64_t row = static_cast<int64_t>(j) / columns,
                    column = static_cast<int64_t>(j) % columns;
      const bool diagonal = i < 4 && column == first + row;
      layer.storage[i][j] =
          r.identity ? (diagonal ? 1.0f : 0.0f) : (i < 4 ? weight(rng) : bias(rng));
    }
  }
  return layer;
}

// Seeds per regime: the bounds hold with a margin over all of them.
constexpr uint32_t kSeeds = 50;

TEST_P(KvStorageAccuracy, WithinTheStatedBound) {
  const AccuracyRegime& r = GetParam();
  const int64_t s = 128, embed = 2 * r.head_dim, input = InputDim(r);
  double worst[kKindCount] = {};
  for (uint32_t seed = 0; seed < kSeeds; ++seed) {
    const OwnedLayer layer = AccuracyLayer(r, seed);
    const MultiheadAttention attention(layer.config, layer.weights);
    std::mt19937 rng(100 + seed);
    std::normal_distribution<float> normal(0.0f, r.input_sd);
    std::vector<float> x(s * input);
    for (float& v : x) v = normal(rng);
    if (r.outlier > 0.0f) {  // in the K and V rows
      for (int64_t t = 0; t < s; ++t) {
        for (const int64_t part : {input - 2 * embed, input - embed}) {
          x[t * input + std::max<int64_t>(part, 0) + (t * 7) % embed] = r.outlier;
        }
      }
    }
    const std::vector<float> ref = NaiveCausal(layer, x);
    double scale = 1.0;
    for (float v : ref) scale = std::max(scale, double{std::fabs(v)});
    for (int k = 0; k < kKindCount; ++k) {
      KvCache cache(layer.config, 1, s, kKinds[k].storage, kKinds[k].scales);
      std::vector<float> out(s * embed);
      attention.ForwardWithCache(TensorView(x.data(), Shape{1, s, input}), {}, cache,
                                 MutableTensorView(out.data(), Shape{1, s, embed}));
      for (int64_t i = 0; i < s * embed; ++i) {
        worst[k] = std::max(worst[k], std::fabs(double{out[i]} - ref[i]) / scale);
      }
    }
  }
  const bool dot = DescribeIsa().bf16_dot_products;
  std::printf("%s (bf16 %s):", r.name, dot ? "dot products" : "widened");
  for (int k = 0; k < kKindCount; ++k) std::printf(" %s %.3g", kKinds[k].name, worst[k]);
  std::printf("\n");
  EXPECT_LE(worst[0], dot ? r.bf16_dot_bound : r.bounds[0]) << "bf16";
  for (int k = 1; k < kKindCount; ++k) EXPECT_LE(worst[k], r.bounds[k]) << kKinds[k].name;
}

INSTANTIATE_TEST_SUITE_P(
    Regimes, KvStorageAccuracy,
    // Bounds of bf16, int8, fp8_e4m3, fp8_e5m2, the two scale-free fp8 kinds, int8
    // with keys per channel (coarser than per token on random projections, whose
    // channels are alike: a 128-token page's largest entry sets each channel's step)
    // and int4 (15 steps where int8 has 254; an outlier entry that moves from channel
    // to channel sets a key channel's step over its page, and the logits it meets
    // lose their order: attention fails there, as it does for int8 keys per channel),
    // q8_0 (int8 per 32 channels: int8's bounds hold, an outlier coarsens its block)
    // and q4_0 (16 symmetric levels per 32 channels: about int4's bounds, better
    // where an outlier stays within its block).
    ::testing::Values(
        AccuracyRegime{"attention_logit_sd1_d64",
                       64,
                       1.0f,
                       0.0f,
                       true,
                       {6e-3, 1.2e-2, 8e-2, 0.15, 9e-2, 0.15, 1.2e-2, 0.2, 1.2e-2, 0.17},
                       6e-3,
                       true},
        AccuracyRegime{"attention_logit_sd9_d64",
                       64,
                       3.0f,
                       0.0f,
                       true,
                       {3.5e-2, 0.1, 0.45, 1.1, 0.55, 1.0, 0.1, 1.3, 0.1, 1.2},
                       4.5e-2,
                       true},
        AccuracyRegime{"attention_logit_sd1_d128",
                       128,
                       1.0f,
                       0.0f,
                       true,
                       {6e-3, 1.3e-2, 8e-2, 0.17, 7e-2, 0.18, 1.5e-2, 0.23, 1.3e-2, 0.18},
                       6e-3,
                       true},
        AccuracyRegime{"attention_kv_outlier_100",
                       64,
                       1.0f,
                       100.0f,
                       true,
                       {4e-3, 0.33, 4.5e-2, 0.1, 0.13, 0.14, 0.33, 1.3, 0.33, 0.8},
                       6e-2,
                       true},
        AccuracyRegime{"random_layer_weight_sd03_embed64",
                       32,
                       1.0f,
                       0.0f,
                       false,
                       {2.5e-2, 5.5e-2, 0.23, 0.55, 0.32, 0.55, 6e-2, 0.95, 5.5e-2, 0.87},
                       2.7e-2}),
    [](const auto& info) { return std::string(info.param.name); });

// How the tokens reach the cache: all in one call, or one decode step each through a
// KvCache or a paged cache of 16-token blocks.
enum class Steps { kOneCall, kKvCache, kPaged };

// The causal outputs of x ([tokens, embed]) through a cache of `kind`, as `steps` says.
std::vector<float> CachedOutputs(const MultiheadAttention& attention,
                                 const AttentionConfig& config, const StorageKind& kind,
                                 const std::vector<float>& x, int64_t tokens,
                                 Steps steps) {
  const int64_t embed = config.query_dim;
  std::vector<float> out(tokens * embed);
  if (steps == Steps::kPaged) {
    PagedKvCacheOptions options;
    options.num_blocks = tokens / 16 + 1, options.max_sequences = 1;
    options.storage = kind.storage, options.scales = kind.scales;
    PagedKvCache cache(config, options);
    cache.AddSequence(0);
    for (int64_t t = 0; t < tokens; ++t) {
      const std::vector<float> row(x.begin() + t * embed, x.begin() + (t + 1) * embed);
      const std::vector<float> step = AppendAndForward(attention, cache, {{0, row}})[0];
      std::copy(step.begin(), step.end(), out.begin() + t * embed);
    }
    return out;
  }
  KvCache cache(config, 1, tokens, kind.storage, kind.scales);
  const int64_t step = steps == Steps::kOneCall ? tokens : 1;
  for (int64_t t = 0; t < tokens; t += step) {
    attention.ForwardWithCache(
        TensorView(x.data() + t * embed, Shape{1, step, embed}), {}, cache,
        MutableTensorView(out.data() + t * embed, Shape{1, step, embed}));
  }
  return out;
}

// Attention alone (identity projections) over unit-variance q = k = v, head_dim 64:
// the causal outputs of `tokens` tokens through a cache of `kind`, against double.
struct DecodeErrors {
  std::vector<double> per_token;  // max |out - ref| of each token's output row
};
DecodeErrors UnitVarianceErrors(const StorageKind& kind, int64_t tokens, uint32_t seed,
                                Steps steps) {
  const AccuracyRegime unit{"unit", 64, 1.0f, 0.0f, true, {}, 0.0};
  const int64_t embed = 2 * unit.head_dim;
  const OwnedLayer layer = AccuracyLayer(unit, seed);
  const MultiheadAttention attention(layer.config, layer.weights);
  std::mt19937 rng(500 + seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(tokens * embed);
  for (float& v : x) v = normal(rng);
  const std::vector<float> ref = NaiveCausal(layer, x);
  const std::vector<float> out =
      CachedOutputs(attention, layer.config, kind, x, tokens, steps);
  DecodeErrors errors;
  for (int64_t t = 0; t < tokens; ++t) {
    double worst = 0.0;
    for (int64_t i = t * embed; i < (t + 1) * embed; ++i) {
      worst = std::max(worst, std::fabs(double{out[i]} - ref[i]));
    }
    errors.per_token.push_back(worst);
  }
  return errors;
}

// The inputs of PerChannelKeysBeatPerTokenOnAnOutlierChannel: multiples of 1/42 in
// [-127/42, 127/42], with channel 10 of each head at 127/42, so that every value row
// is exact in int8 per token.
std::vector<float> OutlierInputs(uint32_t seed, int64_t tokens, int64_t head_dim) {
  const int64_t embed = 2 * head_dim;
  std::mt19937 rng(300 + seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(tokens * embed);
  for (float& v : x)
    v = std::clamp(std::nearbyint(normal(rng) * 42.0f), -127.0f, 127.0f) / 42.0f;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t head = 0; head < 2; ++head)
      x[t * embed + head * head_dim + 10] = 127.0f / 42.0f;
  }
  return x;
}

// Keys with an outlier channel (KIVI's observation of real models' keys): identity
// projections but the key's channel 3 of each head times 16, over OutlierInputs,
// head_dim 64, 128 causal tokens, through a KvCache (128-token pages, one call) and a
// paged cache (16-token blocks, token by token). A per-token key scale is set by the
// outlier and coarsens every other channel 16-fold; per-channel scales keep each
// channel's own step; the values are exact, so the errors are the keys' alone. Keys
// per channel must beat keys per token by 5x in the worst error and the root mean
// square of 10 seeds, in both caches (measured: see docs/serving.md).
TEST(KvStorageAccuracy, PerChannelKeysBeatPerTokenOnAnOutlierChannel) {
  const AccuracyRegime unit{"unit", 64, 1.0f, 0.0f, true, {}, 0.0};
  const int64_t s = 128, embed = 2 * unit.head_dim;
  for (const Steps steps : {Steps::kOneCall, Steps::kPaged}) {
    double worst[2] = {}, square[2] = {};  // keys per token, per channel
    for (uint32_t seed = 0; seed < 10; ++seed) {
      OwnedLayer layer = AccuracyLayer(unit, seed);
      for (int64_t head = 0; head < 2; ++head) {
        const int64_t channel = head * unit.head_dim + 3;
        layer.storage[1][channel * embed + channel] = 16.0f;  // W_k, [out, in]
      }
      const MultiheadAttention attention(layer.config, layer.weights);
      const std::vector<float> x = OutlierInputs(seed, s, unit.head_dim);
      const std::vector<float> ref = NaiveCausal(layer, x);
      for (int k = 0; k < 2; ++k) {
        const StorageKind kind{"int8", DType::kInt8,
                               k == 0 ? KvScales::kPerToken : KvScales::kPerChannelKeys};
        const std::vector<float> out =
            CachedOutputs(attention, layer.config, kind, x, s, steps);
        for (int64_t i = 0; i < s * embed; ++i) {
          const double error = std::fabs(double{out[i]} - ref[i]);
          worst[k] = std::max(worst[k], error);
          square[k] += error * error;
        }
      }
    }
    const double rms_ratio = std::sqrt(square[0] / square[1]);
    const char* cache = steps == Steps::kPaged ? "paged" : "KvCache";
    std::printf(
        "key outlier channel x16, %s, int8 per token / keys per channel: max error %.3g "
        "/ %.3g (%.1fx), rms %.1fx\n",
        cache, worst[0], worst[1], worst[0] / worst[1], rms_ratio);
    EXPECT_GE(worst[0], 5.0 * worst[1]) << cache;
    EXPECT_GE(rms_ratio, 5.0) << cache;
  }
}

// Inputs exact in int4: -2 + code / 4, every 16-token block's tokens 0 and 1 at codes
// 0 and 15 in every channel (each page's key channel spans its 15 steps), and
// channels 0 and 1 of every 32-channel group of each head at 0 and 15 (so does each
// token's value group), the other codes random.
std::vector<float> Int4GridInputs(uint32_t seed, int64_t tokens, int64_t head_dim) {
  const int64_t embed = 2 * head_dim;
  std::mt19937 rng(700 + seed);
  std::uniform_int_distribution<int> code(0, 15);
  std::vector<float> x(tokens * embed);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t c = 0; c < embed; ++c) {
      const int64_t slot = t % 16, group_channel = c % head_dim % 32;
      const int q = slot < 2            ? 15 * static_cast<int>(slot)
                    : group_channel < 2 ? 15 * static_cast<int>(group_channel)
                                        : code(rng);
      x[t * embed + c] = -2.0f + 0.25f * static_cast<float>(q);
    }
  }
  return x;
}

// On its grid int4 loses nothing: the int4 caches give the fp32 cache's outputs up to
// float rounding, in one call, decode steps of a KvCache (each requantising its page
// from the residual) and of a paged cache of 16-token blocks. What this checks
// without quantisation error: the unpacking, the scaled products, the zero points.
// Where P V runs in the integer kernels (x86's AVX2 and AVX-512 targets: serving.md,
// "int8 values meet integer probabilities"), the weights' 16-bit codes add their own
// step, 2^-15 of a tile row's largest weight: measured up to 8.3e-4 of the outputs
// through this layer's out-projection (Zen 4, natively and capped at avx2), 4e-7
// without it (capped at sse4). A misread code or zero point moves an early token's
// output by about a step, 0.25 times its weight, far past either tolerance.
TEST(KvStorageAccuracy, Int4IsExactOnItsGrid) {
  const AccuracyRegime unit{"unit", 64, 1.0f, 0.0f, true, {}, 0.0};
  const int64_t s = 150, embed = 2 * unit.head_dim;
  const StorageKind fp32{"fp32", DType::kFloat32, KvScales::kPerToken};
  const bool integer_values = DescribeIsa().simd_target.rfind("AVX", 0) == 0;
  const float tolerance = integer_values ? 2e-3f : 1e-5f;
  for (uint32_t seed = 0; seed < 3; ++seed) {
    const OwnedLayer layer = AccuracyLayer(unit, seed);
    const MultiheadAttention attention(layer.config, layer.weights);
    const std::vector<float> x = Int4GridInputs(seed, s, unit.head_dim);
    for (const Steps steps : {Steps::kOneCall, Steps::kKvCache, Steps::kPaged}) {
      const std::vector<float> want =
          CachedOutputs(attention, layer.config, fp32, x, s, steps);
      const std::vector<float> got =
          CachedOutputs(attention, layer.config, kKinds[7], x, s, steps);
      for (int64_t i = 0; i < s * embed; ++i) {
        ASSERT_NEAR(got[i], want[i], tolerance * std::max(1.0f, std::fabs(want[i])))
            << "seed " << seed << " steps " << static_cast<int>(steps) << " token "
            << i / embed << " channel " << i % embed;
      }
    }
  }
}

// The absolute error on unit-variance q/k/v, worst of 15 seeds over 256 causal
// tokens, against the bound docs/serving.md states for it. A query that attends to
// few keys returns about one value row, so a kind's error there is about half a
// step of the largest entry: int8's max|v| / 254 (1e-2 and more: the bound was
// stated as 1e-2 once, and missed), fp8's 2^-4 (e4m3) or 2^-3 (e5m2) of it, q4_0's
// a block's largest entry over 16 (its 16 levels are symmetric: half of them idle
// on one side).
TEST(KvStorageAccuracy, UnitVarianceAbsoluteError) {
  const double bounds[kKindCount] = {2.5e-2, 2.5e-2, 0.2, 0.4,    0.33,
                                     0.65,   2.5e-2, 0.3, 2.5e-2, 0.56};
  for (int k = 0; k < kKindCount; ++k) {
    double worst = 0.0;
    for (uint32_t seed = 0; seed < 15; ++seed) {
      for (double e :
           UnitVarianceErrors(kKinds[k], 256, seed, Steps::kOneCall).per_token) {
        worst = std::max(worst, e);
      }
    }
    std::printf("unit variance, absolute: %s %.3g\n", kKinds[k].name, worst);
    EXPECT_LE(worst, bounds[k]) << kKinds[k].name;
  }
}

// 2048 tokens decoded one at a time through `kind`: the mean error of the last 256
// outputs is within 10% of that of the first 256: nothing accumulates as the cache
// grows (scales, page boundaries, the online softmax over 16 key tiles). (With q = k
// = v, each token attends mostly to itself, so the error per token stays that of
// its own row; the maximum over a window is too noisy a statistic to compare.)
void ExpectLongDecodeErrorFlat(const StorageKind& kind, Steps steps, const char* cache) {
  constexpr int64_t kTokens = 2048, kWindow = 256;
  const std::vector<double> errors =
      UnitVarianceErrors(kind, kTokens, 7, steps).per_token;
  const double first =
      std::accumulate(errors.begin(), errors.begin() + kWindow, 0.0) / kWindow;
  const double last =
      std::accumulate(errors.end() - kWindow, errors.end(), 0.0) / kWindow;
  std::printf("long decode %s, %s: mean error first %.3g last %.3g\n", kind.name, cache,
              first, last);
  EXPECT_LE(last, 1.1 * first) << kind.name << ", " << cache;
}

TEST(KvStorageAccuracy, LongDecodeErrorDoesNotGrow) {
  for (const StorageKind& kind : kKinds) {
    ExpectLongDecodeErrorFlat(kind, Steps::kKvCache, "KvCache");
  }
}

// The same through a paged cache of 16-token blocks, for int8 keys per token and per
// channel: each block's channel scales requantised at each of its 16 appends from the
// fp32 residual, 128 blocks, no drift.
TEST(KvStorageAccuracy, LongPagedDecodeErrorDoesNotGrow) {
  for (const StorageKind& kind : {kKinds[1], kKinds[6], kKinds[7]}) {
    ExpectLongDecodeErrorFlat(kind, Steps::kPaged, "paged");
  }
}

// One huge but finite K/V entry (1e7: past q8_0's fp16 scale limit of 65504 x 127
// and q4_0's of 65504 x 8) leaves every output of every kind finite: a group scale
// saturates instead of turning infinite, and the token's other groups and the
// sequence's other tokens keep their accuracy.
TEST(KvStorageAccuracy, AHugeFiniteEntryKeepsEveryOutputFinite) {
  const AccuracyRegime unit{"unit", 64, 1.0f, 0.0f, true, {}, 0.0};
  constexpr int64_t kTokens = 40, kEmbed = 128;
  const OwnedLayer layer = AccuracyLayer(unit, 3);
  const MultiheadAttention attention(layer.config, layer.weights);
  std::mt19937 rng(77);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(kTokens * kEmbed);
  for (float& v : x) v = normal(rng);
  for (const float huge : {6e5f, 1e7f}) {
    x[5 * kEmbed + 70] = huge;  // token 5, head 1's channel 6: q, k and v
    for (const StorageKind& kind : kKinds) {
      for (const Steps steps : {Steps::kOneCall, Steps::kPaged}) {
        const std::vector<float> out =
            CachedOutputs(attention, layer.config, kind, x, kTokens, steps);
        const auto bad = std::find_if(out.begin(), out.end(),
                                      [](float v) { return !std::isfinite(v); });
        EXPECT_EQ(bad, out.end()) << kind.name << ", entry " << huge << ": output "
                                  << (bad - out.begin()) << " is " << *bad;
      }
    }
  }
}

// int8 keys of heads too wide for fine integer query codes (QueryCodesFor: MLA's 576,
// with an outlier query channel 50x the rest, and 132105, where no code is left) meet
// the query in float: finite, and as close to the double-precision layer as the int8
// cache is at head_dim 128 with the same outlier (integer codes of 1032), keys and
// values rounded alike. The worst over 5 seeds, against max(1, max |ref|).
TEST(KvStorageAccuracy, Int8KeysOfWideHeadsMeetAFloatQuery) {
  const StorageKind int8 = kKinds[1];
  constexpr int64_t kTokens = 24, kInput = 8;
  const auto worst_error = [&](int64_t head_dim) {
    double worst = 0.0;
    for (uint32_t seed = 0; seed < 5; ++seed) {
      OwnedLayer layer =
          MakeLayer(LayerSpec{1, head_dim, 0, kInput, 0, 0, WeightLayout::kOutIn, false,
                              true, WeightLayout::kOutIn, kInput, false},
                    40 + seed);
      for (int64_t c = 0; c < kInput; ++c) layer.storage[0][3 * kInput + c] *= 50.0f;
      const MultiheadAttention attention(layer.config, layer.weights);
      const std::vector<float> x = RandomFloats(kTokens * kInput, 60 + seed);
      const std::vector<float> ref = NaiveCausal(layer, x);
      const std::vector<float> out =
          CachedOutputs(attention, layer.config, int8, x, kTokens, Steps::kOneCall);
      double error = 0.0, scale = 1.0;
      for (size_t i = 0; i < out.size(); ++i) {
        EXPECT_TRUE(std::isfinite(out[i])) << "head_dim " << head_dim << ", output " << i;
        error = std::max(error, std::fabs(double{out[i]} - ref[i]));
        scale = std::max(scale, std::fabs(double{ref[i]}));
      }
      worst = std::max(worst, error / scale);
    }
    std::printf("int8 keys, head_dim %lld, an outlier query channel: worst error %.3g\n",
                static_cast<long long>(head_dim), worst);
    return worst;
  };
  const double at_128 = worst_error(128);
  EXPECT_LE(worst_error(576), 1.5 * at_128);
  EXPECT_LE(worst_error(132105), 1.5 * at_128);
}

}  // namespace
}  // namespace mha::testing

// Features in combination: random layers (RoPE, sliding windows, attention chunks,
// query temperature, QK-norm, sinks, soft-cap, ALiBi, GQA) decoded through every cache
// kind and storage, with prefills that put the decode steps on both sides of the 256-key
// split cuts, on 1 and 2 threads; every step's output equals the rows of one causal
// forward of the double-precision naive layer. Plus the smallest case of each combination
// defect found so far.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "tests/cache/paged_test_util.h"

namespace mha::testing {
namespace {

constexpr int64_t kEmbed = 16;

struct Combination {
  int64_t num_heads, num_kv_heads, head_dim;
  RotaryPairing rope;
  std::optional<int64_t> window, chunk;             // sliding window, attention chunk
  std::optional<AttentionTemperature> temperature;  // Llama 4's NoPE layers
  std::optional<float> softcap;
  std::optional<QkNorm> qk_norm;  // Qwen 3, Gemma 3 (unit offset), OLMo 2 (across)
  bool alibi, sinks;
  int64_t prefill;
  std::vector<int64_t> steps;  // after the prefill
  int threads;

  std::vector<int64_t> AllSteps() const {
    std::vector<int64_t> all = {prefill};
    all.insert(all.end(), steps.begin(), steps.end());
    return all;
  }
  int64_t total() const {
    int64_t n = 0;
    for (int64_t step : AllSteps()) n += step;
    return n;
  }
  std::string Describe() const {
    return "heads " + std::to_string(num_heads) + "/" + std::to_string(num_kv_heads) +
           " d" + std::to_string(head_dim) + " rope " +
           std::to_string(static_cast<int>(rope)) + " window " +
           std::to_string(window.value_or(0)) + " chunk " +
           std::to_string(chunk.value_or(0)) + " temperature " +
           std::to_string(temperature.has_value()) + " qk_norm " +
           (qk_norm ? std::to_string(static_cast<int>(qk_norm->scope)) +
                          (qk_norm->unit_offset ? "+1" : "") +
                          (qk_norm->value_norm ? "+v" : "")
                    : std::string("none")) +
           " softcap " + std::to_string(softcap.value_or(0.0f)) + " alibi " +
           std::to_string(alibi) + " sinks " + std::to_string(sinks) + " prefill " +
           std::to_string(prefill) + " threads " + std::to_string(threads);
  }
};

Combination RandomCombination(std::mt19937& rng) {
  auto pick = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Combination c;
  const int64_t groups[][2] = {{4, 4}, {4, 2}, {4, 1}, {2, 2}};
  const auto& g = groups[pick(0, 3)];
  c.num_heads = g[0], c.num_kv_heads = g[1];
  c.head_dim = pick(0, 1) ? 8 : 4;
  const RotaryPairing ropes[] = {RotaryPairing::kNone, RotaryPairing::kHalfSplit,
                                 RotaryPairing::kInterleaved};
  c.rope = ropes[pick(0, 2)];
  const int64_t windows[] = {0, 8, 100, 128, 300};
  if (const int64_t w = windows[pick(0, 4)]) c.window = w;
  if (pick(0, 2) == 0) c.softcap = 2.0f;
  c.alibi = pick(0, 3) == 0;
  c.sinks = pick(0, 1) == 1;
  // Decode steps just before, on and after a cut at 256 or 512.
  c.prefill = 256 * pick(1, 2) - pick(1, 4);
  c.steps = {1, 1, 1, 1, 1, 1, pick(2, 7), 1};
  c.threads = static_cast<int>(pick(1, 2));
  const int64_t chunks[] = {0, 0, 48, 128, 200};  // Llama 4's chunked layers
  if (const int64_t size = chunks[pick(0, 4)]) c.chunk = size;
  if (pick(0, 2) == 0) c.temperature = AttentionTemperature{64.0, 0.2};
  const QkNorm norms[] = {QkNorm{1e-6},
                          QkNorm{1e-6, true, QkNormScope::kPerHead, /*value_norm=*/true},
                          QkNorm{1e-5, false, QkNormScope::kAcrossHeads}};
  if (const int64_t norm = pick(0, 3)) c.qk_norm = norms[norm - 1];
  return c;
}

// The weights a combination's layer views besides its projections.
struct FeatureWeights {
  std::vector<float> sinks, query_norm, key_norm;
};

OwnedLayer CombinationLayer(const Combination& c, FeatureWeights& weights) {
  LayerSpec spec;
  spec.num_heads = c.num_heads;
  spec.num_kv_heads = c.num_kv_heads;
  spec.head_dim = c.head_dim;
  spec.query_dim = kEmbed;
  OwnedLayer layer = MakeLayer(spec, 31);
  layer.config.rotary.pairing = c.rope;
  layer.config.rotary.max_positions = 1024;
  layer.config.features.sliding_window = c.window;
  layer.config.features.attention_chunk_size = c.chunk;
  layer.config.features.temperature_tuning = c.temperature;
  layer.config.features.softcap = c.softcap;
  layer.config.features.alibi = c.alibi;
  weights.sinks = RandomFloats(c.num_heads, 32, 3.0f);
  if (c.sinks) layer.weights.sinks = TensorView(weights.sinks.data(), Shape{c.num_heads});
  layer.config.features.qk_norm = c.qk_norm;
  if (c.qk_norm) {
    const bool across = c.qk_norm->scope == QkNormScope::kAcrossHeads;
    const int64_t query_width = across ? c.num_heads * c.head_dim : c.head_dim;
    const int64_t key_width = across ? c.num_kv_heads * c.head_dim : c.head_dim;
    weights.query_norm = RandomFloats(query_width, 35, 1.5f);
    weights.key_norm = RandomFloats(key_width, 36, 1.5f);
    layer.weights.query_norm_weight =
        TensorView(weights.query_norm.data(), Shape{query_width});
    layer.weights.key_norm_weight = TensorView(weights.key_norm.data(), Shape{key_width});
  }
  return layer;
}

std::vector<float> Rows(const std::vector<float>& x, int64_t first, int64_t count) {
  return {x.begin() + first * kEmbed, x.begin() + (first + count) * kEmbed};
}

// The bounds docs/serving.md states for each storage, on these layers' data.
double Bound(DType storage) {
  return storage == DType::kFloat32      ? 1e-4
         : storage == DType::kFloat8E4M3 ? 0.1
         : storage == DType::kInt4       ? 0.15
                                         : 3e-2;
}

// A cache's storage: the dtype and its scales.
struct CacheKind {
  DType storage;
  KvScales scales = KvScales::kPerToken;
  std::string Name() const {
    return std::string(DTypeName(storage)) +
           (scales == KvScales::kPerChannelKeys ? " keys per channel"
            : scales == KvScales::kPerGroup     ? " per group"
                                                : "");
  }
};
constexpr CacheKind kCacheKinds[] = {{DType::kFloat32},
                                     {DType::kBFloat16},
                                     {DType::kInt8},
                                     {DType::kFloat8E4M3},
                                     {DType::kInt8, KvScales::kPerChannelKeys},
                                     {DType::kInt4, KvScales::kPerChannelKeys},
                                     {DType::kInt8, KvScales::kPerGroup},
                                     {DType::kInt4, KvScales::kPerGroup}};

void DecodeContiguous(const Combination& c, const OwnedLayer& layer,
                      const std::vector<float>& x, const std::vector<float>& ref,
                      const CacheKind& kind) {
  const DType storage = kind.storage;
  const MultiheadAttention attention(layer.config, layer.weights);
  KvCache cache(layer.config, 1, c.total(), storage, kind.scales);
  ForwardOptions options;
  options.num_threads = c.threads;
  int64_t done = 0;
  for (const int64_t step : c.AllSteps()) {
    const std::vector<float> in = Rows(x, done, step);
    std::vector<float> out(in.size());
    attention.ForwardWithCache(TensorView(in.data(), Shape{1, step, kEmbed}), {}, cache,
                               MutableTensorView(out.data(), Shape{1, step, kEmbed}),
                               options);
    const std::string what =
        std::string("KvCache ") + kind.Name() + " step at " + std::to_string(done);
    ExpectClose(out, Rows(ref, done, step), what.c_str(), Bound(storage));
    done += step;
  }
}

void DecodePaged(const Combination& c, const OwnedLayer& layer,
                 const std::vector<float>& x, const std::vector<float>& ref,
                 const CacheKind& kind, int64_t block_size) {
  const DType storage = kind.storage;
  const MultiheadAttention attention(layer.config, layer.weights);
  PagedKvCacheOptions options;
  options.block_size = block_size;
  options.num_blocks = c.total() / block_size + 2;
  options.max_sequences = 1;
  options.storage = storage;
  options.scales = kind.scales;
  options.sliding_window = c.window.value_or(0);
  options.attention_chunk_size = c.chunk.value_or(0);
  PagedKvCache cache(layer.config, options);
  cache.AddSequence(0);
  ForwardOptions forward;
  forward.num_threads = c.threads;
  int64_t done = 0;
  for (const int64_t step : c.AllSteps()) {
    const auto out =
        AppendAndForward(attention, cache, {{0, Rows(x, done, step)}}, 0, forward);
    const std::string what = std::string("paged ") + kind.Name() + " block " +
                             std::to_string(block_size) + " step at " +
                             std::to_string(done);
    ExpectClose(out[0], Rows(ref, done, step), what.c_str(), Bound(storage));
    done += step;
  }
}

TEST(Combinations, RandomFeaturesCachesSplitsAndThreads) {
  std::mt19937 rng(2026);
  for (int trial = 0; trial < 10; ++trial) {
    const Combination c = RandomCombination(rng);
    SCOPED_TRACE(c.Describe());
    FeatureWeights weights;
    const OwnedLayer layer = CombinationLayer(c, weights);
    const std::vector<float> x = RandomFloats(c.total() * kEmbed, 33 + trial);
    const std::vector<float> ref = NaiveCausal(layer, x);
    constexpr int kKinds = sizeof(kCacheKinds) / sizeof(kCacheKinds[0]);
    DecodeContiguous(c, layer, x, ref, kCacheKinds[trial % kKinds]);
    DecodePaged(c, layer, x, ref, kCacheKinds[(trial + 1) % kKinds], trial % 2 ? 16 : 64);
  }
}

// Windowed decodes whose window straddles a split cut kept no sink: the sink went
// only to a split starting at key 0.
TEST(Combinations, SinkCountsInWindowedDecodePastTheFirstCut) {
  Combination c{};
  c.num_heads = c.num_kv_heads = 1;
  c.head_dim = 4;
  c.rope = RotaryPairing::kNone;
  c.window = 8;
  c.sinks = true;
  c.prefill = 256;
  c.steps = {1, 1};
  c.threads = 1;
  FeatureWeights weights;
  OwnedLayer layer = CombinationLayer(c, weights);
  weights.sinks[0] = 3.0f;
  const std::vector<float> x = RandomFloats(c.total() * kEmbed, 34);
  const std::vector<float> ref = NaiveCausal(layer, x);
  DecodeContiguous(c, layer, x, ref, {DType::kFloat32});
  DecodePaged(c, layer, x, ref, {DType::kFloat32}, 16);
}

}  // namespace
}  // namespace mha::testing

// Soak: 8 request threads share one layer, each with its own KV caches, for
// thousands of mixed calls (forwards with and without masks and weights, prefill and
// decode steps, truncation, resets, and calls that fail); every result must equal,
// bit for bit, the same script run serially. Also run under ThreadSanitizer in CI.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>
#include <vector>

#include "tests/test_util.h"

namespace mha::testing {
namespace {

constexpr int64_t kEmbed = 16, kMaxLen = 24;
constexpr int kThreads = 8, kScripts = 24, kRepeats = 10, kStepsPerScript = 40;

OwnedLayer SoakLayer() {
  LayerSpec spec;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  spec.head_dim = 4;
  spec.query_dim = kEmbed;
  OwnedLayer layer = MakeLayer(spec, 23);
  layer.config.rotary.pairing = RotaryPairing::kHalfSplit;
  return layer;
}

// How often each kind of call ran (kinds as in RunScript's switch, then overflows).
using KindCounts = std::vector<int>;

// One request's script, drawn from its seed: what it does is the same every run, so
// each run must produce the same trace of outputs.
std::vector<std::vector<float>> RunScript(const MultiheadAttention& attention,
                                          uint32_t seed, KindCounts& kinds) {
  std::mt19937 random(seed);
  const auto pick = [&](int n) { return static_cast<int>(random() % n); };
  ForwardOptions options;
  options.num_threads = 1;  // concurrency comes from the request threads
  KvCache cache(attention.config(), 2, kMaxLen);
  std::vector<std::vector<float>> trace;
  for (int step = 0; step < kStepsPerScript; ++step) {
    const uint32_t data_seed = seed * 1000 + step;
    const int kind = pick(6);
    ++kinds[kind];
    switch (kind) {
      case 0: {  // a forward, causal or not, with or without weights
        const int64_t batch = 1 + pick(2), length = 1 + pick(12);
        const std::vector<float> query = RandomFloats(batch * length * kEmbed, data_seed);
        std::vector<float> output(query.size()), weights(batch * length * length);
        AttentionMasks masks;
        masks.is_causal = pick(2) == 0;
        const bool with_weights = pick(2) == 0;
        attention.Forward(
            {TensorView(query.data(), Shape{batch, length, kEmbed}), {}, {}}, masks,
            {MutableTensorView(output.data(), Shape{batch, length, kEmbed}),
             with_weights
                 ? MutableTensorView(weights.data(), Shape{batch, length, length})
                 : MutableTensorView()},
            options);
        trace.push_back(output);
        if (with_weights) trace.push_back(weights);
        break;
      }
      case 1:
      case 2: {  // a cache step: decode or a short prefill chunk; may overflow
        const int64_t tokens = pick(3) == 0 ? 3 : 1;
        const std::vector<float> query = RandomFloats(2 * tokens * kEmbed, data_seed);
        std::vector<float> output(query.size(), -1.0f);
        const std::vector<int64_t> before = {cache.length(0), cache.length(1)};
        try {
          attention.ForwardWithCache(
              TensorView(query.data(), Shape{2, tokens, kEmbed}), {}, cache,
              MutableTensorView(output.data(), Shape{2, tokens, kEmbed}), options);
        } catch (const Error&) {  // past max_seq_len: nothing changed
          EXPECT_GT(std::max(before[0], before[1]) + tokens, kMaxLen);
          EXPECT_EQ(cache.length(0), before[0]);
          EXPECT_EQ(cache.length(1), before[1]);
          EXPECT_EQ(output, std::vector<float>(query.size(), -1.0f));
          cache.Reset();
          ++kinds[6];
        }
        trace.push_back(output);
        break;
      }
      case 3:  // drop the last tokens of one sequence (rejected speculation)
        cache.Truncate(1, std::max<int64_t>(0, cache.length(1) - 1 - pick(2)));
        break;
      case 4: {  // a call with a bad shape: an error, and nothing written
        std::vector<float> query(3 * (kEmbed + 1)), output(3 * kEmbed, 7.0f);
        EXPECT_THROW(
            attention.Forward(
                {TensorView(query.data(), Shape{1, 3, kEmbed + 1}), {}, {}}, {},
                {MutableTensorView(output.data(), Shape{1, 3, kEmbed}), {}}, options),
            Error);
        EXPECT_EQ(output, std::vector<float>(3 * kEmbed, 7.0f));
        break;
      }
      default:
        cache.Reset(pick(2));
        break;
    }
    trace.push_back(
        {static_cast<float>(cache.length(0)), static_cast<float>(cache.length(1))});
  }
  return trace;
}

TEST(Soak, RequestThreadsMatchSerialScripts) {
  const OwnedLayer layer = SoakLayer();
  const MultiheadAttention attention(layer.config, layer.weights);
  std::vector<std::vector<std::vector<float>>> serial(kScripts);
  KindCounts kinds(7, 0);
  for (int s = 0; s < kScripts; ++s) serial[s] = RunScript(attention, 1 + s, kinds);
  for (size_t kind = 0; kind < kinds.size(); ++kind) {
    EXPECT_GT(kinds[kind], 0) << "the scripts never make call kind " << kind;
  }

  std::vector<int> mismatches(kThreads, 0), calls(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      KindCounts ignored(7, 0);
      for (int repeat = 0; repeat < kRepeats; ++repeat) {
        for (int s = t; s < kScripts; s += kThreads) {
          if (RunScript(attention, 1 + s, ignored) != serial[s]) ++mismatches[t];
          calls[t] += kStepsPerScript;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  int total_calls = 0;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(mismatches[t], 0) << "thread " << t;
    total_calls += calls[t];
  }
  EXPECT_EQ(total_calls, kScripts * kRepeats * kStepsPerScript);
}

}  // namespace
}  // namespace mha::testing

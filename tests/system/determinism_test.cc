// Bitwise determinism (docs/errors.md, Determinism). The attention core gives the same
// bits for every thread count, alone or in a batch, whole or in query chunks, decoding
// over split keys, in fp32 and in bf16 (on every bf16 product path:
// tests/CMakeLists.txt); the layer and its cache steps the same bits for every thread
// count and with or without attention weights, call after call. (The projections'
// bits still depend on the row count, as oneDNN picks its kernels by it: not asserted
// here.)
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "tests/test_util.h"

namespace mha::testing {
namespace {

constexpr int64_t kEmbed = 64, kBatch = 3, kHeads = 4, kKvHeads = 2, kDim = 16;

struct Scenario {
  const char* name;
  int64_t length;
  bool causal, rotary;
  int64_t sliding_window;  // 0: none
  // bf16: attention on bf16 K/V with bf16 products where the CPU has them (AMX
  // tiles, AVX512_BF16), whose bits must not follow a block's row count either.
  DType compute_dtype = DType::kFloat32;
};
void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }

class Determinism : public ::testing::TestWithParam<Scenario> {};

std::vector<float> LayerForward(const MultiheadAttention& attention, const Scenario& s,
                                const std::vector<float>& input, int threads,
                                bool weights) {
  std::vector<float> output(kBatch * s.length * kEmbed),
      probabilities(weights ? kBatch * s.length * s.length : 0);
  AttentionMasks masks;
  masks.is_causal = s.causal;
  ForwardOptions options;
  options.num_threads = threads;
  AttentionOutputs outputs{
      MutableTensorView(output.data(), Shape{kBatch, s.length, kEmbed}), {}};
  if (weights) {
    outputs.attn_weights =
        MutableTensorView(probabilities.data(), Shape{kBatch, s.length, s.length});
  }
  attention.Forward({TensorView(input.data(), Shape{kBatch, s.length, kEmbed}), {}, {}},
                    masks, outputs, options);
  return output;
}

TEST_P(Determinism, LayerWithAndWithoutAttentionWeights) {
  const Scenario& s = GetParam();
  LayerSpec spec;
  spec.num_heads = kHeads;
  spec.num_kv_heads = kKvHeads;
  spec.head_dim = kDim;
  spec.query_dim = kEmbed;
  OwnedLayer layer = MakeLayer(spec, 11);
  if (s.rotary) layer.config.rotary.pairing = RotaryPairing::kHalfSplit;
  if (s.sliding_window > 0) layer.config.features.sliding_window = s.sliding_window;
  layer.config.compute_dtype = s.compute_dtype;
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<float> input = RandomFloats(kBatch * s.length * kEmbed, 3);
  const std::vector<float> reference = LayerForward(attention, s, input, 1, false);
  for (int threads : {1, 2, 3}) {
    EXPECT_EQ(LayerForward(attention, s, input, threads, false), reference)
        << "repeated, " << threads << " threads";
    EXPECT_EQ(LayerForward(attention, s, input, threads, true), reference)
        << "with attention weights, " << threads << " threads";
  }
}

// The core over [kBatch, H, S, D] queries (GQA), or over batch `only` alone, or over
// query rows [first, first + count) of it (causal: against keys [0, first + count),
// bottom-right aligned, so the rows keep their positions).
struct CoreRun {
  int threads = 1;
  int64_t only = -1, first = 0, count = -1;
};

std::vector<float> Core(const Scenario& s, const std::vector<float>& q,
                        const std::vector<float>& kv, const CoreRun& run) {
  const int64_t batch = run.only >= 0 ? 1 : kBatch, b0 = std::max<int64_t>(run.only, 0);
  const int64_t count = run.count >= 0 ? run.count : s.length;
  const TensorView query =
      TensorView(q.data() + (b0 * kHeads * s.length + run.first) * kDim,
                 Shape{batch, kHeads, count, kDim})
          .WithStrides(kHeads * s.length * kDim, s.length * kDim, kDim);
  const int64_t key_len = s.causal ? run.first + count : s.length;
  const TensorView keys =
      TensorView(kv.data() + b0 * kKvHeads * s.length * kDim,
                 Shape{batch, kKvHeads, key_len, kDim})
          .WithStrides(kKvHeads * s.length * kDim, s.length * kDim, kDim);
  std::vector<float> output(batch * kHeads * count * kDim);
  AttentionMasks masks;
  masks.is_causal = s.causal;
  masks.causal_alignment = CausalAlignment::kBottomRight;
  CoreOptions options;
  options.num_threads = run.threads;
  options.compute_dtype = s.compute_dtype;
  if (s.sliding_window > 0) options.features.sliding_window = s.sliding_window;
  ScaledDotProductAttention(
      query, keys, keys, masks,
      MutableTensorView(output.data(), Shape{batch, kHeads, count, kDim}), options);
  return output;
}

TEST_P(Determinism, CoreOnEveryThreadCountAloneAndInChunks) {
  const Scenario& s = GetParam();
  const std::vector<float> q = RandomFloats(kBatch * kHeads * s.length * kDim, 5),
                           kv = RandomFloats(kBatch * kKvHeads * s.length * kDim, 6);
  const std::vector<float> reference = Core(s, q, kv, CoreRun{});
  for (int threads : {2, 3}) {
    EXPECT_EQ(Core(s, q, kv, CoreRun{threads}), reference) << threads << " threads";
  }
  // Rows [first, first + count) of every head of batch b in the reference.
  const auto rows = [&](int64_t b, int64_t first, int64_t count) {
    std::vector<float> out;
    for (int64_t head = 0; head < kHeads; ++head) {
      const auto start =
          reference.begin() + ((b * kHeads + head) * s.length + first) * kDim;
      out.insert(out.end(), start, start + count * kDim);
    }
    return out;
  };
  for (int64_t b = 0; b < kBatch; ++b) {
    EXPECT_EQ(Core(s, q, kv, CoreRun{2, b}), rows(b, 0, s.length)) << "batch " << b;
  }
  // Decoding the last row: its keys split at fixed cuts, the splits run in more and
  // shorter runs on more threads (long_causal's 6 splits per group: runs of 3, 2 and
  // 2 or 1 on 1, 2 and 3 threads).
  const std::vector<float> decode = Core(s, q, kv, CoreRun{1, -1, s.length - 1, 1});
  for (int threads : {2, 3}) {
    EXPECT_EQ(Core(s, q, kv, CoreRun{threads, -1, s.length - 1, 1}), decode)
        << "decoding, " << threads << " threads";
  }
  for (int64_t first = 0; first < s.length; first += 16) {
    const int64_t count = std::min<int64_t>(16, s.length - first);
    EXPECT_EQ(Core(s, q, kv, CoreRun{2, 1, first, count}), rows(1, first, count))
        << "rows " << first << ".." << first + count - 1;
  }
}

// A BERT-wide layer, where oneDNN's own threading used to change the projections'
// bits: a forward of 1 to 300 rows, then a prefill and decode steps through a cache
// (1 and 4 sequences), each the same bits on 1, 2 and 3 threads.
struct WideCase {
  const char* name;
  DType weight_dtype;
};
void PrintTo(const WideCase& c, std::ostream* os) { *os << c.name; }

class WideLayerDeterminism : public ::testing::TestWithParam<WideCase> {};

constexpr int64_t kWide = 768, kWideHeads = 12, kMaxLen = 40;

std::vector<float> WideForward(const MultiheadAttention& attention, int64_t rows,
                               int threads) {
  const std::vector<float> input = RandomFloats(rows * kWide, 21);
  std::vector<float> output(input.size());
  ForwardOptions options;
  options.num_threads = threads;
  attention.Forward({TensorView(input.data(), Shape{1, rows, kWide}), {}, {}}, {},
                    {MutableTensorView(output.data(), Shape{1, rows, kWide}), {}},
                    options);
  return output;
}

// Every output of a prefill of `batch` sequences, then 24 single-token steps.
std::vector<float> WideCacheSteps(const MultiheadAttention& attention, int64_t batch,
                                  int threads) {
  KvCache cache(attention.config(), batch, kMaxLen);
  ForwardOptions options;
  options.num_threads = threads;
  std::vector<float> trace;
  for (int step = 0; step < 25; ++step) {
    const int64_t tokens = step == 0 ? 7 : 1;
    const std::vector<float> input = RandomFloats(batch * tokens * kWide, 30 + step);
    std::vector<float> output(input.size());
    attention.ForwardWithCache(
        TensorView(input.data(), Shape{batch, tokens, kWide}), {}, cache,
        MutableTensorView(output.data(), Shape{batch, tokens, kWide}), options);
    trace.insert(trace.end(), output.begin(), output.end());
  }
  return trace;
}

TEST_P(WideLayerDeterminism, ForwardsAndCacheStepsOnEveryThreadCount) {
  LayerSpec spec;
  spec.num_heads = kWideHeads;
  spec.head_dim = kWide / kWideHeads;
  spec.query_dim = kWide;
  OwnedLayer layer = MakeLayer(spec, 17);
  layer.config.weight_dtype = GetParam().weight_dtype;
  const MultiheadAttention attention(layer.config, layer.weights);
  for (int64_t rows : {1, 5, 16, 17, 111, 300}) {
    const std::vector<float> reference = WideForward(attention, rows, 1);
    for (int threads : {2, 3}) {
      EXPECT_EQ(WideForward(attention, rows, threads), reference)
          << rows << " rows, " << threads << " threads";
    }
  }
  for (int64_t batch : {1, 4}) {
    const std::vector<float> reference = WideCacheSteps(attention, batch, 1);
    for (int threads : {2, 3}) {
      EXPECT_EQ(WideCacheSteps(attention, batch, threads), reference)
          << "batch " << batch << ", " << threads << " threads";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WeightTypes, WideLayerDeterminism,
                         ::testing::Values(WideCase{"fp32", DType::kFloat32},
                                           WideCase{"int8", DType::kInt8}),
                         [](const auto& info) { return std::string(info.param.name); });

INSTANTIATE_TEST_SUITE_P(
    Scenarios, Determinism,
    ::testing::Values(Scenario{"short_dense", 37, false, false, 0},
                      Scenario{"causal_rotary", 70, true, true, 0},
                      Scenario{"long_causal", 1300, true, false, 0},
                      Scenario{"window", 300, true, false, 50},
                      Scenario{"bf16_dense", 37, false, false, 0, DType::kBFloat16},
                      Scenario{"bf16_causal_rotary", 70, true, true, 0, DType::kBFloat16},
                      Scenario{"bf16_long_causal", 700, true, false, 0, DType::kBFloat16},
                      Scenario{"bf16_window", 300, true, false, 50, DType::kBFloat16}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mha::testing

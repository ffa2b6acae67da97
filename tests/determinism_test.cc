// Bitwise determinism (README, Determinism). The attention core gives the same bits
// for every thread count, alone or in a batch, whole or in query chunks; the layer
// the same bits with or without attention weights, call after call. (The
// projections are oneDNN's, whose bits depend on the thread count and the row count
// for some shapes: not asserted here.)
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "tests/test_util.h"

namespace mha::testing {
namespace {

constexpr int64_t kEmbed = 32, kBatch = 3, kHeads = 4, kKvHeads = 2, kDim = 8;

struct Scenario {
  const char* name;
  int64_t length;
  bool causal, rotary;
  int64_t sliding_window;  // 0: none
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
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<float> input = RandomFloats(kBatch * s.length * kEmbed, 3);
  for (int threads : {1, 2}) {
    const std::vector<float> reference =
        LayerForward(attention, s, input, threads, false);
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
  const AttentionTensor query{q.data() + (b0 * kHeads * s.length + run.first) * kDim,
                              Shape{batch, kHeads, count, kDim},
                              HeadLayout::kBHSD,
                              {kHeads * s.length * kDim, s.length * kDim, kDim}};
  const int64_t key_len = s.causal ? run.first + count : s.length;
  const AttentionTensor keys{kv.data() + b0 * kKvHeads * s.length * kDim,
                             Shape{batch, kKvHeads, key_len, kDim},
                             HeadLayout::kBHSD,
                             {kKvHeads * s.length * kDim, s.length * kDim, kDim}};
  std::vector<float> output(batch * kHeads * count * kDim);
  AttentionMasks masks;
  masks.is_causal = s.causal;
  masks.causal_alignment = CausalAlignment::kBottomRight;
  CoreOptions options;
  options.num_threads = run.threads;
  if (s.sliding_window > 0) options.features.sliding_window = s.sliding_window;
  ScaledDotProductAttention(query, keys, keys, masks,
                            {output.data(), Shape{batch, kHeads, count, kDim}}, options);
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
  for (int64_t first = 0; first < s.length; first += 16) {
    const int64_t count = std::min<int64_t>(16, s.length - first);
    EXPECT_EQ(Core(s, q, kv, CoreRun{2, 1, first, count}), rows(1, first, count))
        << "rows " << first << ".." << first + count - 1;
  }
}

INSTANTIATE_TEST_SUITE_P(Scenarios, Determinism,
                         ::testing::Values(Scenario{"short_dense", 37, false, false, 0},
                                           Scenario{"causal_rotary", 70, true, true, 0},
                                           Scenario{"long_causal", 1300, true, false, 0},
                                           Scenario{"window", 300, true, false, 50}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mha::testing

// The layer with today's decoder features (rotary embeddings, sliding windows,
// soft-capping, sinks, ALiBi, QK-norm) against the naive layer, in the whole and chunked
// flows and with attention weights; with a KV cache, prefill, decode and chunked
// prefill equal one causal Forward; bad feature arguments fail cleanly.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tests/test_util.h"

namespace mha::testing {
namespace {

struct FeatureCase {
  std::string name;
  int64_t num_heads = 4, num_kv_heads = 0, head_dim = 8;
  RotaryPairing rope = RotaryPairing::kNone;
  int64_t rotary_dim = 0;
  std::optional<int64_t> window, chunk;
  std::optional<AttentionTemperature> temperature;
  std::optional<float> softcap;
  std::optional<QkNorm> qk_norm;
  bool alibi = false, sinks = false;
};

FeatureCase Named(const char* name) {
  FeatureCase c;
  c.name = name;
  return c;
}

void PrintTo(const FeatureCase& c, std::ostream* os) { *os << c.name; }

// A layer with the case's features; its sinks live in `sinks`.
struct FeatureLayer {
  explicit FeatureLayer(const FeatureCase& c) {
    LayerSpec spec;
    spec.num_heads = c.num_heads;
    spec.num_kv_heads = c.num_kv_heads;
    spec.head_dim = c.head_dim;
    spec.query_dim = 24;
    layer = MakeLayer(spec, 21);
    layer.config.rotary.pairing = c.rope;
    layer.config.rotary.rotary_dim = c.rotary_dim;
    layer.config.rotary.max_positions = 512;
    layer.config.features.sliding_window = c.window;
    layer.config.features.attention_chunk_size = c.chunk;
    layer.config.features.temperature_tuning = c.temperature;
    layer.config.features.softcap = c.softcap;
    layer.config.features.alibi = c.alibi;
    sinks = RandomFloats(c.num_heads, 22, 1.5f);
    if (c.sinks) layer.weights.sinks = TensorView(sinks.data(), Shape{c.num_heads});
    layer.config.features.qk_norm = c.qk_norm;
    if (c.qk_norm) {
      const bool across = c.qk_norm->scope == QkNormScope::kAcrossHeads;
      const int64_t kv_heads = c.num_kv_heads ? c.num_kv_heads : c.num_heads;
      const int64_t query_width = across ? c.num_heads * c.head_dim : c.head_dim;
      const int64_t key_width = across ? kv_heads * c.head_dim : c.head_dim;
      // Around 1, as trained norms are (Gemma's offset adds the 1 itself).
      const float base = c.qk_norm->unit_offset ? 0.0f : 1.0f;
      query_norm = RandomFloats(query_width, 28, 0.5f);
      key_norm = RandomFloats(key_width, 29, 0.5f);
      for (float& w : query_norm) w += base;
      for (float& w : key_norm) w += base;
      layer.weights.query_norm_weight = TensorView(query_norm.data(), Shape{query_width});
      layer.weights.key_norm_weight = TensorView(key_norm.data(), Shape{key_width});
    }
  }
  OwnedLayer layer;
  std::vector<float> sinks, query_norm, key_norm;
};

std::vector<FeatureCase> Cases() {
  std::vector<FeatureCase> cases;
  FeatureCase c;
  c = Named("rope_half_split");
  c.rope = RotaryPairing::kHalfSplit;
  cases.push_back(c);
  c = Named("rope_interleaved_partial_gqa");
  c.rope = RotaryPairing::kInterleaved, c.rotary_dim = 4, c.num_kv_heads = 2,
  c.head_dim = 10;
  cases.push_back(c);
  c = Named("sliding_window");
  c.window = 5;
  cases.push_back(c);
  c = Named("attention_chunk_rope_gqa_sinks");  // Llama 4's chunked layers
  c.chunk = 8, c.rope = RotaryPairing::kHalfSplit, c.num_kv_heads = 2, c.sinks = true;
  cases.push_back(c);
  c = Named("temperature_tuning_nope_gqa");  // Llama 4's NoPE layers
  c.temperature = AttentionTemperature{4.0, 0.3}, c.num_kv_heads = 2;
  cases.push_back(c);
  c = Named("softcap");
  c.softcap = 1.5f;
  cases.push_back(c);
  c = Named("alibi");
  c.alibi = true, c.num_heads = 3;
  cases.push_back(c);
  c = Named("sinks_mqa");
  c.sinks = true, c.num_kv_heads = 1;
  cases.push_back(c);
  c = Named("qk_norm_rope_gqa");  // Qwen 3
  c.qk_norm = QkNorm{}, c.rope = RotaryPairing::kHalfSplit, c.num_kv_heads = 2;
  cases.push_back(c);
  c = Named("qk_norm_unit_offset_window_partial_rope");  // Gemma 3's local layers
  c.qk_norm = QkNorm{1e-6, true}, c.window = 6, c.rope = RotaryPairing::kHalfSplit,
  c.rotary_dim = 4;
  cases.push_back(c);
  c = Named("qk_norm_value_norm_rope_window");  // Gemma 3n
  c.qk_norm = QkNorm{1e-6, false, QkNormScope::kPerHead, true},
  c.rope = RotaryPairing::kHalfSplit, c.window = 5, c.num_kv_heads = 1;
  cases.push_back(c);
  c = Named("qk_norm_across_heads_rope_gqa");  // OLMo 2
  c.qk_norm = QkNorm{1e-6, false, QkNormScope::kAcrossHeads},
  c.rope = RotaryPairing::kHalfSplit, c.num_kv_heads = 2;
  cases.push_back(c);
  c = Named("qk_norm_nope_chunk_temperature_sinks");
  c.qk_norm = QkNorm{1e-5}, c.chunk = 8, c.temperature = AttentionTemperature{4.0, 0.3},
  c.sinks = true;
  cases.push_back(c);
  c = Named("everything_gqa");
  c.rope = RotaryPairing::kHalfSplit, c.window = 7, c.softcap = 20.0f, c.alibi = true,
  c.sinks = true, c.num_kv_heads = 2, c.qk_norm = QkNorm{1e-6, true};
  cases.push_back(c);
  return cases;
}

std::string Name(const ::testing::TestParamInfo<FeatureCase>& info) {
  return info.param.name;
}

class LayerFeatures : public ::testing::TestWithParam<FeatureCase> {};

// Causal and not, with per-head weights, and through the chunked flow.
TEST_P(LayerFeatures, MatchesNaiveLayer) {
  const FeatureLayer f(GetParam());
  const MultiheadAttention attention(f.layer.config, f.layer.weights);
  const int64_t b = 2, s = 61, e = 24, h = GetParam().num_heads;
  const std::vector<float> x = RandomFloats(b * s * e, 23);
  for (const bool causal : {false, true}) {
    AttentionMasks masks;
    masks.is_causal = causal;
    const AttentionInputs inputs{TensorView(x.data(), Shape{b, s, e}), {}, {}};
    std::vector<float> out(b * s * e), ref(b * s * e), weights(b * h * s * s),
        ref_weights(b * h * s * s), chunked(b * s * e);
    ForwardOptions options;
    options.average_attn_weights = false;
    attention.Forward(inputs, masks,
                      {MutableTensorView(out.data(), Shape{b, s, e}),
                       MutableTensorView(weights.data(), Shape{b, h, s, s})},
                      options);
    NaiveMultiheadAttention(f.layer.config, f.layer.weights, inputs, masks,
                            {MutableTensorView(ref.data(), Shape{b, s, e}),
                             MutableTensorView(ref_weights.data(), Shape{b, h, s, s})},
                            options);
    ExpectClose(out, ref, causal ? "causal output" : "output");
    ExpectClose(weights, ref_weights, "attn_weights");
    ForwardOptions small;
    small.workspace_budget_bytes = 4096;  // forces query chunks
    attention.Forward(inputs, masks,
                      {MutableTensorView(chunked.data(), Shape{b, s, e}), {}}, small);
    ExpectClose(chunked, ref, "chunked output");
  }
}

// Prefill 19, decode 3 tokens one by one, then a chunk of 9: each step's output
// equals the rows of one causal Forward over the whole sequence.
TEST_P(LayerFeatures, CacheMatchesCausalForward) {
  const FeatureLayer f(GetParam());
  const MultiheadAttention attention(f.layer.config, f.layer.weights);
  const int64_t b = 2, total = 31, e = 24;
  const std::vector<float> x = RandomFloats(b * total * e, 24);
  std::vector<float> full(b * total * e);
  AttentionMasks causal;
  causal.is_causal = true;
  attention.Forward({TensorView(x.data(), Shape{b, total, e}), {}, {}}, causal,
                    {MutableTensorView(full.data(), Shape{b, total, e}), {}});
  // bf16 storage rounds the cached (rotated) keys and values: the bf16 bound of
  // docs/serving.md.
  for (const DType storage : {DType::kFloat32, DType::kBFloat16}) {
    KvCache cache(f.layer.config, b, 64, storage);
    int64_t done = 0;
    for (const int64_t step : {19, 1, 1, 1, 9}) {
      std::vector<float> in, expected;
      for (int64_t batch = 0; batch < b; ++batch) {
        const auto row = (batch * total + done) * e;
        in.insert(in.end(), x.begin() + row, x.begin() + row + step * e);
        expected.insert(expected.end(), full.begin() + row,
                        full.begin() + row + step * e);
      }
      std::vector<float> out(b * step * e);
      attention.ForwardWithCache(TensorView(in.data(), Shape{b, step, e}), {}, cache,
                                 MutableTensorView(out.data(), Shape{b, step, e}));
      const std::string what =
          std::string(DTypeName(storage)) + " step at " + std::to_string(done);
      ExpectClose(out, expected, what.c_str(), storage == DType::kFloat32 ? 1e-4 : 1e-2);
      done += step;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Features, LayerFeatures, ::testing::ValuesIn(Cases()), Name);

// Dynamic NTK and LongRoPE (original 16): a whole Forward of 40 tokens rotates by
// the frequencies of 40, as the naive layer does; in a ragged cached batch each
// sequence's rows are those it gets alone (its own length sets its frequencies, not
// its batch-mates' or the padding's).
TEST(DynamicRope, ForwardMatchesNaiveAndRaggedRowsMatchAlone) {
  for (const RopeScalingType type :
       {RopeScalingType::kDynamic, RopeScalingType::kLongRope}) {
    FeatureCase c = Named("dynamic");
    c.rope = RotaryPairing::kHalfSplit, c.num_kv_heads = 2;
    FeatureLayer f(c);
    RopeScaling& scaling = f.layer.config.rotary.scaling;
    scaling.type = type, scaling.factor = 4.0,
    scaling.original_max_position_embeddings = 16;
    scaling.short_factor = {1.0f, 1.2f, 1.5f, 2.0f};
    scaling.long_factor = {2.0f, 3.0f, 5.0f, 8.0f};
    const MultiheadAttention attention(f.layer.config, f.layer.weights);
    const int64_t b = 2, s = 40, e = 24;
    const std::vector<float> x = RandomFloats(b * s * e, 51);
    std::vector<float> out(x.size()), ref(x.size());
    AttentionMasks causal;
    causal.is_causal = true;
    const AttentionInputs inputs{TensorView(x.data(), Shape{b, s, e}), {}, {}};
    attention.Forward(inputs, causal,
                      {MutableTensorView(out.data(), Shape{b, s, e}), {}});
    NaiveMultiheadAttention(f.layer.config, f.layer.weights, inputs, causal,
                            {MutableTensorView(ref.data(), Shape{b, s, e}), {}});
    ExpectClose(out, ref, "dynamic Forward");
    // Prefill 12 and 10 tokens, then a ragged step of 9 and 3 (sequence 0 crosses 16).
    KvCache batched(f.layer.config, 2, 32);
    const std::vector<int64_t> prefill = {12, 10}, step = {9, 3};
    std::vector<float> batched_out(2 * 9 * e);
    for (const auto& counts : {prefill, step}) {
      const int64_t width = std::max(counts[0], counts[1]);
      std::vector<float> in(2 * width * e, 0.0f);
      for (int64_t q = 0; q < 2; ++q) {
        std::copy_n(x.begin() + (q * s + batched.length(q)) * e, counts[q] * e,
                    in.begin() + q * width * e);
      }
      batched_out.assign(2 * width * e, 0.0f);
      attention.ForwardWithCache(
          TensorView(in.data(), Shape{2, width, e}),
          TensorView(counts.data(), DType::kInt64, Shape{2}), batched,
          MutableTensorView(batched_out.data(), Shape{2, width, e}));
    }
    for (int64_t q = 0; q < 2; ++q) {  // alone: the same two calls, this sequence only
      KvCache alone(f.layer.config, 1, 32);
      std::vector<float> alone_out;
      for (const auto& counts : {prefill, step}) {
        const int64_t n = counts[q], first = alone.length(0);
        alone_out.assign(n * e, 0.0f);
        attention.ForwardWithCache(
            TensorView(x.data() + (q * s + first) * e, Shape{1, n, e}), {}, alone,
            MutableTensorView(alone_out.data(), Shape{1, n, e}));
      }
      const std::vector<float> rows(batched_out.begin() + q * 9 * e,
                                    batched_out.begin() + (q * 9 + step[q]) * e);
      ExpectClose(rows, alone_out, "ragged rows against the sequence alone");
    }
  }
}

// Left-padded batch: sequence 1 starts two tokens late, its positions say so, and
// its first two keys are masked; its real rows equal the unpadded sequence's.
TEST(RotaryPositions, LeftPaddingWithPositionIds) {
  FeatureCase c = Named("rope");
  c.rope = RotaryPairing::kHalfSplit;
  const FeatureLayer f(c);
  const MultiheadAttention attention(f.layer.config, f.layer.weights);
  const int64_t s = 9, e = 24, pad = 2;
  const std::vector<float> x = RandomFloats(s * e, 25);
  std::vector<float> padded(2 * s * e, 0.0f);
  std::copy(x.begin(), x.end(), padded.begin());
  std::copy(x.begin(), x.end() - pad * e, padded.begin() + (s + pad) * e);
  std::vector<int64_t> positions(2 * s), lengths_mask(2 * s, 0);
  for (int64_t i = 0; i < s; ++i) {
    positions[i] = i;
    positions[s + i] = std::max<int64_t>(0, i - pad);
  }
  std::vector<uint8_t> padding(2 * s, 0);
  padding[s] = padding[s + 1] = 1;
  AttentionMasks masks;
  masks.is_causal = true;
  masks.key_padding_mask = TensorView(padding.data(), DType::kBool, Shape{2, s});
  ForwardOptions options;
  options.position_ids = TensorView(positions.data(), DType::kInt64, Shape{2, s});
  std::vector<float> out(2 * s * e);
  attention.Forward({TensorView(padded.data(), Shape{2, s, e}), {}, {}}, masks,
                    {MutableTensorView(out.data(), Shape{2, s, e}), {}}, options);
  const std::vector<float> first(out.begin(), out.begin() + (s - pad) * e);
  const std::vector<float> second(out.begin() + (s + pad) * e, out.end());
  ExpectClose(second, first, "left-padded rows");
}

// Each bad argument fails with a message naming it and writes nothing.
TEST(FeatureErrors, NameTheArgumentAndWriteNothing) {
  FeatureCase c = Named("errors");
  c.rope = RotaryPairing::kHalfSplit;
  const FeatureLayer good(c);
  const auto expect_config_error = [&](const char* needle, auto&& mutate) {
    FeatureLayer f(c);
    mutate(f.layer.config, f.layer.weights);
    try {
      MultiheadAttention attention(f.layer.config, f.layer.weights);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_config_error("features.sliding_window: must be >= 1, got 0",
                      [](AttentionConfig& config, AttentionWeights&) {
                        config.features.sliding_window = 0;
                      });
  expect_config_error("features.sliding_window: must be >= 1, got -3",
                      [](AttentionConfig& config, AttentionWeights&) {
                        config.features.sliding_window = -3;
                      });
  expect_config_error("features.attention_chunk_size: must be >= 1, got 0",
                      [](AttentionConfig& config, AttentionWeights&) {
                        config.features.attention_chunk_size = 0;
                      });
  expect_config_error(
      "features.temperature_tuning.floor_scale: must be in [2.71051e-20, 3.40282e+38] (a "
      "finite temperature in float32), got 0",
      [](AttentionConfig& config, AttentionWeights&) {
        config.features.temperature_tuning = AttentionTemperature{0.0, 0.1};
      });
  expect_config_error(
      "features.temperature_tuning.attn_scale: must be in [-2.07267e+17, 2.07267e+17] "
      "(2^64 / 89: finite logits in float32), got nan",
      [](AttentionConfig& config, AttentionWeights&) {
        config.features.temperature_tuning = AttentionTemperature{8.0, std::nan("")};
      });
  expect_config_error(
      "features.softcap: must be finite and > 0, got 0",
      [](AttentionConfig& config, AttentionWeights&) { config.features.softcap = 0.0f; });
  expect_config_error("features.softcap: must be finite and > 0, got -1",
                      [](AttentionConfig& config, AttentionWeights&) {
                        config.features.softcap = -1.0f;
                      });
  expect_config_error(
      "rotary.rotary_dim: must be even and in [2, head_dim 8], got 5",
      [](AttentionConfig& config, AttentionWeights&) { config.rotary.rotary_dim = 5; });
  expect_config_error(
      "rotary.rotary_dim: must be even and in [2, head_dim 8], got 10",
      [](AttentionConfig& config, AttentionWeights&) { config.rotary.rotary_dim = 10; });
  expect_config_error("features.alibi_slopes: expected num_heads = 4 values, got 3",
                      [](AttentionConfig& config, AttentionWeights&) {
                        config.features.alibi = true;
                        config.features.alibi_slopes = {1, 2, 3};
                      });
  // A slope or temperature near FLT_MAX was accepted, and its logits were infinite
  // (all-NaN outputs): each bound is 2^64.
  expect_config_error(
      "features.alibi_slopes: each must be in [-2^64, 2^64] (finite "
      "logits at any distance), got -3e+38",
      [](AttentionConfig& config, AttentionWeights&) {
        config.features.alibi = true;
        config.features.alibi_slopes = {1, 2, -3e38f, 3};
      });
  expect_config_error(
      "features.temperature_tuning.attn_scale: must be in [-2.07267e+17, 2.07267e+17]",
      [](AttentionConfig& config, AttentionWeights&) {
        config.features.temperature_tuning = AttentionTemperature{8192.0, 3.8e36};
      });
  // Tables that would not be finite (all-NaN outputs before).
  expect_config_error(
      "rotary: theta 1e-300 with its scaling gives inv_freq[1] = inf",
      [](AttentionConfig& config, AttentionWeights&) { config.rotary.theta = 1e-300; });
  expect_config_error(
      "rotary: theta 1e+300 with its scaling gives inv_freq[1] = 0",
      [](AttentionConfig& config, AttentionWeights&) { config.rotary.theta = 1e300; });
  expect_config_error(
      "rotary.scaling.short_factor: expected rotary_dim / 2 = 4 values, got 3",
      [](AttentionConfig& config, AttentionWeights&) {
        config.rotary.scaling.type = RopeScalingType::kLongRope;
        config.rotary.scaling.short_factor = {1, 1, 1};
        config.rotary.scaling.long_factor = {1, 1, 1, 1};
      });
  expect_config_error("rotary.scaling.long_factor: values must be finite and > 0, got 0",
                      [](AttentionConfig& config, AttentionWeights&) {
                        config.rotary.scaling.type = RopeScalingType::kLongRope;
                        config.rotary.scaling.short_factor = {1, 1, 1, 1};
                        config.rotary.scaling.long_factor = {1, 0, 1, 1};
                      });
  expect_config_error(
      "rotary.scaling.original_max_position_embeddings: must be >= 1, got 0",
      [](AttentionConfig& config, AttentionWeights&) {
        config.rotary.scaling.type = RopeScalingType::kDynamic;
        config.rotary.scaling.original_max_position_embeddings = 0;
      });
  expect_config_error("rotary.attention_factor: must be finite as a float",
                      [](AttentionConfig& config, AttentionWeights&) {
                        config.rotary.attention_factor = 1e39;
                      });
  // Derived values that leave float: LongRoPE's scale over ln(1), a product past
  // FLT_MAX, a temperature that overflows or a floor_scale that rounds to 0.
  const auto long_rope = [](AttentionConfig& config) {
    config.rotary.scaling.type = RopeScalingType::kLongRope;
    config.rotary.scaling.factor = 4.0;
    config.rotary.scaling.short_factor = config.rotary.scaling.long_factor = {1, 1, 1, 1};
  };
  expect_config_error(
      "rotary.scaling.original_max_position_embeddings: must be >= 2 for LongRoPE",
      [&](AttentionConfig& config, AttentionWeights&) {
        long_rope(config);
        config.rotary.scaling.original_max_position_embeddings = 1;
      });
  expect_config_error(
      "rotary.attention_factor: 3.3e+38 times LongRoPE's scaling attention factor",
      [&](AttentionConfig& config, AttentionWeights&) {
        long_rope(config);
        config.rotary.attention_factor = 3.3e38;
      });
  expect_config_error(
      "times LongRoPE's scaling attention factor 1e+300 must be finite as a float",
      [&](AttentionConfig& config, AttentionWeights&) {
        long_rope(config);
        config.rotary.scaling.attention_factor = 1e300;
      });
  expect_config_error(
      "features.temperature_tuning.attn_scale: must be in [-2.07",
      [](AttentionConfig& config, AttentionWeights&) {
        config.features.temperature_tuning = AttentionTemperature{8192.0, 1e39};
      });
  expect_config_error(
      "features.temperature_tuning.floor_scale: must be in [2.7",
      [](AttentionConfig& config, AttentionWeights&) {
        config.features.temperature_tuning = AttentionTemperature{1e-300, 0.1};
      });
  const std::vector<float> norm8(8, 1.0f), norm7(7, 1.0f),
      norm_nan = {1, 1, NAN, 1, 1, 1, 1, 1};
  expect_config_error("features.qk_norm.eps: must be finite and >= 0, got -1",
                      [&](AttentionConfig& config, AttentionWeights& weights) {
                        config.features.qk_norm = QkNorm{-1.0};
                        weights.query_norm_weight = weights.key_norm_weight =
                            TensorView(norm8.data(), Shape{8});
                      });
  expect_config_error("weights.query_norm_weight: required by features.qk_norm",
                      [&](AttentionConfig& config, AttentionWeights& weights) {
                        config.features.qk_norm = QkNorm{};
                        weights.key_norm_weight = TensorView(norm8.data(), Shape{8});
                      });
  expect_config_error("weights.key_norm_weight: expected shape [8], got [7]",
                      [&](AttentionConfig& config, AttentionWeights& weights) {
                        config.features.qk_norm = QkNorm{};
                        weights.query_norm_weight = TensorView(norm8.data(), Shape{8});
                        weights.key_norm_weight = TensorView(norm7.data(), Shape{7});
                      });
  expect_config_error(
      "weights.query_norm_weight: expected shape [32], got [8]",
      [&](AttentionConfig& config, AttentionWeights& weights) {
        config.features.qk_norm = QkNorm{1e-6, false, QkNormScope::kAcrossHeads};
        weights.query_norm_weight = weights.key_norm_weight =
            TensorView(norm8.data(), Shape{8});
      });
  expect_config_error("weights.key_norm_weight[2]: must be finite, got nan",
                      [&](AttentionConfig& config, AttentionWeights& weights) {
                        config.features.qk_norm = QkNorm{};
                        weights.query_norm_weight = TensorView(norm8.data(), Shape{8});
                        weights.key_norm_weight = TensorView(norm_nan.data(), Shape{8});
                      });
  expect_config_error("weights.query_norm_weight: given without features.qk_norm",
                      [&](AttentionConfig&, AttentionWeights& weights) {
                        weights.query_norm_weight = TensorView(norm8.data(), Shape{8});
                      });
  const std::vector<float> three_sinks(3, 0.0f);
  expect_config_error("weights.sinks: expected shape [4], got [3]",
                      [&](AttentionConfig&, AttentionWeights& weights) {
                        weights.sinks = TensorView(three_sinks.data(), Shape{3});
                      });

  const MultiheadAttention attention(good.layer.config, good.layer.weights);
  const int64_t s = 4, e = 24;
  const std::vector<float> x = RandomFloats(s * e, 26);
  std::vector<float> out(s * e, 7.0f);
  const std::vector<int64_t> positions = {0, 1, 2, 512};
  ForwardOptions options;
  options.position_ids = TensorView(positions.data(), DType::kInt64, Shape{s});
  try {
    attention.Forward({TensorView(x.data(), Shape{s, e}), {}, {}}, {},
                      {MutableTensorView(out.data(), Shape{s, e}), {}}, options);
    ADD_FAILURE() << "no error for a position past the table";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "options.position_ids[0, 3]: position 512 is outside the rotary table "
                  "[0, 512)"),
              std::string::npos)
        << e.what();
  }
  for (float value : out) ASSERT_EQ(value, 7.0f);

  KvCache cache(good.layer.config, 1, 600);
  std::vector<float> long_x = RandomFloats(513 * e, 27), long_out(513 * e);
  EXPECT_THROW(
      attention.ForwardWithCache(TensorView(long_x.data(), Shape{1, 513, e}), {}, cache,
                                 MutableTensorView(long_out.data(), Shape{1, 513, e})),
      Error);
  EXPECT_EQ(cache.length(0), 0);
}

TEST(CoreErrors, StridesAndShapes) {
  const std::vector<float> data(2 * 3 * 4 * 8, 1.0f);
  std::vector<float> out(data.size(), 5.0f);
  const TensorView q(data.data(), Shape{2, 3, 4, 8});
  const MutableTensorView o(out.data(), Shape{2, 3, 4, 8});
  TensorView overlapping = q;
  overlapping.strides[0] = 96, overlapping.strides[1] = 32, overlapping.strides[2] = 4;
  const auto expect_error = [&](const char* needle, const TensorView& key,
                                const CoreOptions& options) {
    try {
      ScaledDotProductAttention(q, key, key, {}, o, options);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    for (float value : out) ASSERT_EQ(value, 5.0f);
  };
  expect_error("key.strides[2]: must be >= head_dim 8 (rows may not overlap), got 4",
               overlapping, {});
  TensorView two_heads = q;
  two_heads.shape = Shape{2, 2, 4, 8};
  expect_error("key: heads 2 must divide the query's heads 3", two_heads, {});
  CoreOptions sinks;
  const std::vector<float> two(2, 0.0f);
  sinks.sinks = TensorView(two.data(), Shape{2});
  expect_error("options.sinks: expected shape [3], got [2]", q, sinks);
  CoreOptions norm;
  const std::vector<float> eight(8, 1.0f);
  norm.features.qk_norm = QkNorm{};
  norm.query_norm_weight = TensorView(eight.data(), Shape{8});
  expect_error("options.key_norm_weight: required by features.qk_norm", q, norm);
  norm.key_norm_weight = TensorView(two.data(), Shape{2});
  expect_error("options.key_norm_weight: expected shape [8], got [2]", q, norm);
  norm.key_norm_weight = norm.query_norm_weight;
  norm.features.qk_norm->scope = QkNormScope::kAcrossHeads;
  expect_error("options.features.qk_norm.scope: the core normalises each head's rows", q,
               norm);
  CoreOptions window;
  window.features.sliding_window = 0;
  expect_error("features.sliding_window: must be >= 1, got 0", q, window);
  TensorView huge = q;  // 2^60 elements apart: pointer arithmetic would overflow
  huge.strides[0] = int64_t{1} << 60, huge.strides[1] = 32, huge.strides[2] = 8;
  expect_error(
      "key.strides: the view of shape [2, 3, 4, 8] with strides "
      "[1152921504606846976, 32, 8] spans more than 2^47 bytes",
      huge, {});
  // An output whose (batch, head) rows land on the same floats: threads would race.
  for (const auto& strides : {std::vector<int64_t>{8, 8, 24}, {32, 32, 8}, {96, 16, 8}}) {
    MutableTensorView shared = o;
    std::copy(strides.begin(), strides.end(), shared.strides);
    try {
      ScaledDotProductAttention(q, q, q, {}, shared, {});
      ADD_FAILURE() << "no error for output strides " << strides[0];
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("output.strides: rows overlap"),
                std::string::npos)
          << e.what();
    }
    for (float value : out) ASSERT_EQ(value, 5.0f);
  }
  // Disjoint but not dense (heads outermost, a gap between rows) is taken.
  MutableTensorView gapped = o;
  std::vector<float> wide(2 * 3 * 4 * 16, 5.0f);
  gapped.data = wide.data();
  gapped.strides[0] = 64, gapped.strides[1] = 128, gapped.strides[2] = 16;
  ScaledDotProductAttention(q, q, q, {}, gapped, {});
  EXPECT_EQ(wide[8], 5.0f);  // the gap after row 0 is not written
  EXPECT_EQ(wide[0], 1.0f);  // every value is 1: so is every output
  // Strided views are the core's query, key, value and output only.
  CoreOptions strided_sinks;
  strided_sinks.sinks = TensorView(data.data(), Shape{3}).WithStrides(8, 0, 0);
  expect_error(
      "options.sinks: must be dense (only the attention core's query, key, value "
      "and output may be strided), got strides [8, 0, 0]",
      q, strided_sinks);
}

}  // namespace
}  // namespace mha::testing

// MultiheadAttention::Forward against the naive double-precision baseline over odd
// sizes, every mask kind and combination, every weight layout, attention-weight
// outputs, batched and unbatched inputs, and 1 or 2 threads.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "tests/test_util.h"

namespace mha::testing {
namespace {

enum MaskBits : unsigned {
  kCausal = 1 << 0,
  kPaddingBool = 1 << 1,
  kPaddingFloat = 1 << 2,
  kLengths = 1 << 3,
  kAttn2dBool = 1 << 4,
  kAttn2dFloat = 1 << 5,
  kAttn3dBool = 1 << 6,
  kAttn4dBroadcast = 1 << 7,
};

enum class WeightsOut { kNone, kPerHead, kAveraged };

struct Case {
  int64_t batch, query_len, key_len, num_heads, num_kv_heads, head_dim, query_dim,
      key_dim, value_dim;
  bool self_attention, batched;
  unsigned masks;
  MaskConvention convention;
  WeightLayout layout;
  bool output_projection;
  WeightsOut weights_out;
  int threads;
  bool chunked;  // a tiny workspace budget forces the chunked flow
};

std::string Describe(const Case& c) {
  return "b" + std::to_string(c.batch) + "_sq" + std::to_string(c.query_len) + "_sk" +
         std::to_string(c.key_len) + "_h" + std::to_string(c.num_heads) + "_kv" +
         std::to_string(c.num_kv_heads) + "_d" + std::to_string(c.head_dim) + "_m" +
         std::to_string(c.masks) + (c.self_attention ? "_self" : "") +
         (c.batched ? "" : "_unbatched") + (c.chunked ? "_chunked" : "") + "_t" +
         std::to_string(c.threads);
}
void PrintTo(const Case& c, std::ostream* os) { *os << Describe(c); }

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return "i" + std::to_string(info.index) + "_" + Describe(info.param);
}

std::vector<Case> AllCases() {
  const int64_t head_dims[] = {1, 3, 5, 17, 64, 80, 128};
  const unsigned mask_sets[] = {0,
                                kCausal,
                                kPaddingBool,
                                kPaddingFloat,
                                kLengths,
                                kAttn2dBool,
                                kAttn2dFloat,
                                kAttn3dBool,
                                kAttn4dBroadcast,
                                kCausal | kPaddingBool,
                                kCausal | kLengths | kAttn2dFloat,
                                kPaddingBool | kAttn3dBool | kLengths,
                                kCausal | kPaddingFloat | kAttn4dBroadcast | kLengths};
  const int64_t query_lens[] = {1, 7, 13, 33};
  const int64_t key_lens[] = {9, 1, 16, 40, 5};
  const WeightLayout layouts[] = {WeightLayout::kOutIn, WeightLayout::kInOut,
                                  WeightLayout::kHeadsInHeadDim};
  std::vector<Case> cases;
  int i = 0;
  for (int64_t head_dim : head_dims) {
    for (unsigned masks : mask_sets) {
      Case c;
      c.batch = 1 + i % 5;
      c.query_len = query_lens[i % 4];
      c.self_attention = i % 3 == 0;
      c.key_len = c.self_attention ? c.query_len : key_lens[i % 5];
      // Every fourth case is grouped-query: 4 query heads on 2 KV heads, or MQA.
      c.num_heads = i % 4 == 1 ? 4 : 1 + i % 3;
      c.num_kv_heads = i % 4 == 1 ? (i % 8 == 1 ? 2 : 1) : 0;
      c.head_dim = head_dim;
      c.query_dim = (i % 2) ? 24 : 5;
      c.key_dim = c.self_attention || i % 4 < 2 ? 0 : 11;
      c.value_dim = c.self_attention || i % 4 != 1 ? 0 : 7;
      c.batched = i % 7 != 3;
      if (!c.batched) c.batch = 1;
      c.masks = masks;
      c.convention =
          i % 5 == 2 ? MaskConvention::kZeroMeansMasked : MaskConvention::kTorch;
      c.layout = layouts[i % 3];
      c.output_projection = i % 6 != 5;
      c.weights_out = static_cast<WeightsOut>(i % 3);
      c.threads = 1 + i % 2;
      c.chunked = c.weights_out == WeightsOut::kNone && i % 2 == 0;
      cases.push_back(c);
      ++i;
    }
  }
  return cases;
}

// Mask tensors of one case; bool masks mask ~30% of entries, float masks mix
// offsets with -inf, and batch 0 is fully masked by padding or lengths.
struct MaskData {
  std::vector<uint8_t> padding_bool, attn_bool;
  std::vector<float> padding_float, attn_float;
  std::vector<int64_t> lengths;
  AttentionMasks masks;
};

std::vector<uint8_t> RandomBools(size_t count, uint32_t seed, bool masked_value) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> values(count);
  for (uint8_t& v : values) v = (rng() % 10 < 3) == masked_value;
  return values;
}

std::vector<float> RandomFloatMask(size_t count, uint32_t seed,
                                   MaskConvention convention) {
  std::mt19937 rng(seed);
  std::vector<float> values = RandomFloats(count, seed, 2.0f);
  for (float& v : values) {
    const bool masked = rng() % 10 < 3;
    if (convention == MaskConvention::kZeroMeansMasked) {
      v = masked ? 0.0f : 1.0f + std::fabs(v);
    } else if (masked) {
      v = -std::numeric_limits<float>::infinity();
    }
  }
  return values;
}

Shape MaybeBatched(bool batched, int64_t batch, Shape rest) {
  return batched ? rest.Prepended(batch) : rest;
}

MaskData MakeMasks(const Case& c, uint32_t seed) {
  MaskData data;
  AttentionMasks& m = data.masks;
  m.convention = c.convention;
  m.is_causal = c.masks & kCausal;
  const bool masked_value = c.convention == MaskConvention::kTorch;
  const int64_t b = c.batch, h = c.num_heads, sq = c.query_len, sk = c.key_len;
  if (c.masks & kPaddingBool) {
    data.padding_bool = RandomBools(b * sk, seed, masked_value);
    std::fill(data.padding_bool.begin(), data.padding_bool.begin() + sk, masked_value);
    m.key_padding_mask = TensorView(data.padding_bool.data(), DType::kBool,
                                    MaybeBatched(c.batched, b, Shape{sk}));
  }
  if (c.masks & kPaddingFloat) {
    data.padding_float = RandomFloatMask(b * sk, seed + 1, c.convention);
    m.key_padding_mask =
        TensorView(data.padding_float.data(), MaybeBatched(c.batched, b, Shape{sk}));
  }
  if (c.masks & kLengths) {
    for (int64_t i = 0; i < b; ++i) data.lengths.push_back(i == 0 ? 0 : (sk * i) / b + 1);
    m.key_lengths = TensorView(data.lengths.data(), DType::kInt64, Shape{b});
  }
  if (c.masks & (kAttn2dBool | kAttn3dBool)) {
    const bool three_d = c.masks & kAttn3dBool;
    data.attn_bool = RandomBools((three_d ? b * h : 1) * sq * sk, seed + 2, masked_value);
    m.attn_mask = TensorView(data.attn_bool.data(), DType::kBool,
                             three_d ? Shape{b * h, sq, sk} : Shape{sq, sk});
  }
  if (c.masks & kAttn2dFloat) {
    data.attn_float = RandomFloatMask(sq * sk, seed + 3, c.convention);
    m.attn_mask = TensorView(data.attn_float.data(), Shape{sq, sk});
  }
  if (c.masks & kAttn4dBroadcast) {
    data.attn_float = RandomFloatMask(h * sq * sk, seed + 4, c.convention);
    m.attn_mask = TensorView(data.attn_float.data(), Shape{1, h, sq, sk});
  }
  return data;
}

class AttentionVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionVsReference, MatchesNaiveBaseline) {
  const Case& c = GetParam();
  LayerSpec spec;
  spec.num_heads = c.num_heads;
  spec.num_kv_heads = c.num_kv_heads;
  spec.head_dim = c.head_dim;
  spec.query_dim = c.query_dim;
  spec.key_dim = c.key_dim;
  spec.value_dim = c.value_dim;
  spec.layout = c.layout;
  spec.output_projection = c.output_projection;
  spec.output_dim = c.query_dim + 3;
  const OwnedLayer layer = MakeLayer(spec, 100);
  const MultiheadAttention attention(layer.config, layer.weights);

  const int64_t b = c.batch, sq = c.query_len, sk = c.key_len;
  const std::vector<float> query = RandomFloats(b * sq * c.query_dim, 1);
  const std::vector<float> key =
      RandomFloats(b * sk * layer.config.resolved_key_dim(), 2);
  const std::vector<float> value =
      RandomFloats(b * sk * layer.config.resolved_value_dim(), 3);
  AttentionInputs inputs;
  inputs.query =
      TensorView(query.data(), MaybeBatched(c.batched, b, Shape{sq, c.query_dim}));
  if (!c.self_attention) {
    inputs.key = TensorView(
        key.data(),
        MaybeBatched(c.batched, b, Shape{sk, layer.config.resolved_key_dim()}));
    inputs.value = TensorView(
        value.data(),
        MaybeBatched(c.batched, b, Shape{sk, layer.config.resolved_value_dim()}));
  }
  const MaskData masks = MakeMasks(c, 7);

  const int64_t out_dim = attention.output_dim();
  ForwardOptions options;
  options.num_threads = c.threads;
  options.average_attn_weights = c.weights_out == WeightsOut::kAveraged;
  if (c.chunked) options.workspace_budget_bytes = 4096;
  const Shape weights_shape =
      options.average_attn_weights
          ? MaybeBatched(c.batched, b, Shape{sq, sk})
          : MaybeBatched(c.batched, b, Shape{c.num_heads, sq, sk});
  const size_t weights_count =
      (options.average_attn_weights ? 1 : c.num_heads) * b * sq * sk;
  std::vector<float> out(b * sq * out_dim, -7.0f), ref_out(out.size());
  std::vector<float> probs(weights_count, -7.0f), ref_probs(weights_count);
  const bool with_weights = c.weights_out != WeightsOut::kNone;
  const Shape out_shape = MaybeBatched(c.batched, b, Shape{sq, out_dim});

  attention.Forward(inputs, masks.masks,
                    {MutableTensorView(out.data(), out_shape),
                     with_weights ? MutableTensorView(probs.data(), weights_shape)
                                  : MutableTensorView()},
                    options);
  NaiveMultiheadAttention(
      layer.config, layer.weights, inputs, masks.masks,
      {MutableTensorView(ref_out.data(), out_shape),
       with_weights ? MutableTensorView(ref_probs.data(), weights_shape)
                    : MutableTensorView()},
      options);
  ExpectClose(out, ref_out, "output");
  if (with_weights) ExpectClose(probs, ref_probs, "attn_weights");
}

INSTANTIATE_TEST_SUITE_P(OddSizes, AttentionVsReference, ::testing::ValuesIn(AllCases()),
                         CaseName);

// The chunked flow where it keeps the V pages in the output buffer (causal
// self-attention, whole pages no wider than the output rows: head_dim 16 and 256
// tokens, two chunks per sequence) and runs chunks last to first, with and without
// length masks, and where it cannot (pages wider than the rows, no output
// projection, other output width).
struct ChunkedCase {
  const char* name;
  bool causal, lengths, output_projection;
  int64_t output_dim;  // 0: the model width
  double budget;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 5, seq_len = 121;
};

void PrintTo(const ChunkedCase& c, std::ostream* os) { *os << c.name; }

class ChunkedFlow : public ::testing::TestWithParam<ChunkedCase> {};

TEST_P(ChunkedFlow, MatchesNaiveBaseline) {
  const ChunkedCase& c = GetParam();
  LayerSpec spec;
  spec.num_heads = 3;
  spec.num_kv_heads = c.num_kv_heads;
  spec.head_dim = c.head_dim;
  spec.query_dim = 11;
  spec.output_projection = c.output_projection;
  spec.output_dim = c.output_dim ? c.output_dim : 15;
  const OwnedLayer layer = MakeLayer(spec, 21);
  const MultiheadAttention attention(layer.config, layer.weights);
  const int64_t b = 2, s = c.seq_len, out_dim = attention.output_dim();
  const std::vector<float> x = RandomFloats(b * s * spec.query_dim, 5);
  const std::vector<int64_t> lengths = {70, s};
  AttentionMasks masks;
  masks.is_causal = c.causal;
  if (c.lengths) masks.key_lengths = TensorView(lengths.data(), DType::kInt64, Shape{b});
  const AttentionInputs inputs{TensorView(x.data(), Shape{b, s, spec.query_dim}), {}, {}};
  std::vector<float> out(b * s * out_dim), ref(out.size());
  ForwardOptions options;
  options.workspace_budget_bytes = c.budget;
  attention.Forward(inputs, masks,
                    {MutableTensorView(out.data(), Shape{b, s, out_dim}), {}}, options);
  NaiveMultiheadAttention(layer.config, layer.weights, inputs, masks,
                          {MutableTensorView(ref.data(), Shape{b, s, out_dim}), {}});
  ExpectClose(out, ref, c.name);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ChunkedFlow,
    ::testing::Values(
        ChunkedCase{"causal_values_in_output", true, false, true, 48, 11000, 0, 16, 256},
        ChunkedCase{"causal_lengths_values_in_output", true, true, true, 48, 11000, 0, 16,
                    256},
        ChunkedCase{"causal_pages_wider_than_rows", true, false, true, 0, 11000},
        ChunkedCase{"causal_lengths_pages_wider_than_rows", true, true, true, 0, 11000},
        ChunkedCase{"budget_sized_chunks", true, false, true, 0, 22920},
        // V rows narrower than output rows span batches: reverse order.
        ChunkedCase{"mqa_values_in_output", true, false, true, 48, 11000, 1, 16, 256},
        ChunkedCase{"dense", false, false, true, 0, 11000},
        ChunkedCase{"no_output_projection", true, false, false, 0, 11000},
        ChunkedCase{"other_output_width", true, true, true, 9, 11000}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mha::testing

// ScaledDotProductAttention (the attention-core API) against the naive double
// reference over every feature alone and combined: layouts and strided views, GQA,
// causal alignment, sliding windows, soft-capping, ALiBi, sinks, rotary embeddings,
// masks, log-sum-exp, odd head_dims, one and two threads; each case again with
// compute_dtype bfloat16 (AVX512_BF16 dot products where the CPU has them).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "tests/test_util.h"

namespace mha::testing {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct CoreCase {
  std::string name;
  int64_t batch = 1, heads = 2, kv_heads = 2, query_len = 5, key_len = 5, head_dim = 8;
  int64_t value_head_dim = 0;  // 0: head_dim (PyTorch lets them differ)
  HeadLayout layout = HeadLayout::kBHSD;
  bool causal = false, bottom_right = false;
  std::optional<int64_t> window, window_right, chunk;
  std::optional<AttentionTemperature> temperature;
  std::optional<float> softcap;
  std::optional<QkNorm> qk_norm;
  bool alibi = false, given_slopes = false, sinks = false;
  RotaryPairing rope = RotaryPairing::kNone;
  int64_t rotary_dim = 0;
  RopeScalingType rope_scaling = RopeScalingType::kNone;
  bool given_positions = false;
  bool key_lengths = false, padding_mask = false, attn_mask = false;
  bool fused_qkv = false;  // q/k/v are strided slices of one [B, S, width] buffer
  int threads = 0;
  std::optional<float> scale;
};

void PrintTo(const CoreCase& c, std::ostream* os) { *os << c.name; }

// Views of q, k, v and output over owned buffers, with the case's options.
struct CoreProblem {
  explicit CoreProblem(const CoreCase& core_case) : c(core_case) {
    if (c.fused_qkv) c.layout = HeadLayout::kBSHD;  // slices of [B, S, width]
    options.layout = c.layout;
    const int64_t q_heads_width = c.heads * c.head_dim,
                  kv_width = c.kv_heads * c.head_dim;
    if (c.fused_qkv) {  // BSHD slices of [B, S, q | k | v]
      const int64_t width = q_heads_width + 2 * kv_width;
      fused = RandomFloats(c.batch * c.query_len * width, 1);
      query = Slice(fused.data(), c.heads, c.query_len, width);
      key = Slice(fused.data() + q_heads_width, c.kv_heads, c.key_len, width);
      value =
          Slice(fused.data() + q_heads_width + kv_width, c.kv_heads, c.key_len, width);
    } else {
      q = RandomFloats(c.batch * c.query_len * q_heads_width, 1);
      k = RandomFloats(c.batch * c.key_len * kv_width, 2);
      v = RandomFloats(c.batch * c.key_len * c.kv_heads * ValueDim(), 3);
      query = Dense(q.data(), c.heads, c.query_len);
      key = Dense(k.data(), c.kv_heads, c.key_len);
      value = Dense(v.data(), c.kv_heads, c.key_len, ValueDim());
    }
    masks.is_causal = c.causal;
    if (c.bottom_right) masks.causal_alignment = CausalAlignment::kBottomRight;
    for (int64_t b = 0; b < c.batch; ++b) lengths.push_back(b == 1 ? 0 : c.key_len - b);
    if (c.key_lengths)
      masks.key_lengths = TensorView(lengths.data(), DType::kInt64, Shape{c.batch});
    padding.assign(c.batch * c.key_len, 0);
    for (size_t i = 0; i < padding.size(); i += 3) padding[i] = 1;
    if (c.padding_mask) {
      masks.key_padding_mask =
          TensorView(padding.data(), DType::kBool, Shape{c.batch, c.key_len});
    }
    mask = RandomFloats(c.query_len * c.key_len, 4);
    mask[0] = kNegInf;
    if (c.attn_mask)
      masks.attn_mask = TensorView(mask.data(), Shape{c.query_len, c.key_len});
    options.scale = c.scale;
    options.features.softcap = c.softcap;
    options.features.alibi = c.alibi;
    if (c.given_slopes) options.features.alibi_slopes = RandomFloats(c.heads, 5, 0.5f);
    options.features.sliding_window = c.window;
    options.features.sliding_window_right = c.window_right;
    options.features.attention_chunk_size = c.chunk;
    options.features.temperature_tuning = c.temperature;
    sink_values = RandomFloats(c.heads, 6, 2.0f);
    if (c.sinks) options.sinks = TensorView(sink_values.data(), Shape{c.heads});
    options.features.qk_norm = c.qk_norm;
    query_norm = RandomFloats(c.head_dim, 7, 0.5f);
    key_norm = RandomFloats(c.head_dim, 8, 0.5f);
    if (c.qk_norm) {
      options.query_norm_weight = TensorView(query_norm.data(), Shape{c.head_dim});
      options.key_norm_weight = TensorView(key_norm.data(), Shape{c.head_dim});
    }
    if (c.rope != RotaryPairing::kNone) {
      RotaryConfig config;
      config.pairing = c.rope;
      config.rotary_dim = c.rotary_dim;
      config.theta = 500000.0;
      config.scaling.type = c.rope_scaling;
      const int64_t half = (c.rotary_dim ? c.rotary_dim : c.head_dim) / 2;
      config.scaling.short_factor.assign(half, 1.25f);  // longrope's
      config.scaling.long_factor.assign(half, 6.0f);
      config.scaling.factor = 8.0;
      config.scaling.original_max_position_embeddings = 64;
      config.max_positions = 4096;
      rotary.emplace(config, c.head_dim);
      options.rotary = &*rotary;
    }
    if (c.given_positions) {
      for (int64_t i = 0; i < c.batch * c.query_len; ++i)
        query_positions.push_back(7 + 3 * i);
      for (int64_t i = 0; i < c.batch * c.key_len; ++i)
        key_positions.push_back(2 * i % 97);
      options.query_positions =
          TensorView(query_positions.data(), DType::kInt64, Shape{c.batch, c.query_len});
      options.key_positions =
          TensorView(key_positions.data(), DType::kInt64, Shape{c.batch, c.key_len});
    }
    options.num_threads = c.threads;
  }

  int64_t ValueDim() const { return c.value_head_dim ? c.value_head_dim : c.head_dim; }
  TensorView Dense(const float* data, int64_t heads, int64_t len, int64_t dim = 0) const {
    if (dim == 0) dim = c.head_dim;
    return c.layout == HeadLayout::kBHSD
               ? TensorView(data, Shape{c.batch, heads, len, dim})
               : TensorView(data, Shape{c.batch, len, heads, dim});
  }
  TensorView Slice(const float* data, int64_t heads, int64_t len, int64_t width) const {
    return TensorView(data, Shape{c.batch, len, heads, c.head_dim})
        .WithStrides(len * width, width, c.head_dim);
  }
  MutableTensorView Output(std::vector<float>& out) const {
    out.assign(c.batch * c.heads * c.query_len * ValueDim(), 0.0f);
    return MutableTensorView(out.data(),
                             Dense(out.data(), c.heads, c.query_len, ValueDim()).shape);
  }
  MutableTensorView LogSumExp(std::vector<float>& lse) const {
    lse.assign(c.batch * c.heads * c.query_len, 0.0f);
    return MutableTensorView(lse.data(), Shape{c.batch, c.heads, c.query_len});
  }

  CoreCase c;
  std::vector<float> fused, q, k, v, mask, sink_values, query_norm, key_norm;
  std::vector<int64_t> lengths, query_positions, key_positions;
  std::vector<uint8_t> padding;
  TensorView query, key, value;
  AttentionMasks masks;
  CoreOptions options;
  std::optional<RotaryEmbedding> rotary;
};

// Log-sum-exps agree: both -inf (fully masked rows), or within the tolerance.
void ExpectLogSumExpClose(const std::vector<float>& actual,
                          const std::vector<float>& expected) {
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::isinf(expected[i])) {
      EXPECT_EQ(actual[i], expected[i]) << "logsumexp[" << i << "]";
    } else {
      EXPECT_NEAR(actual[i], expected[i], 1e-4 * std::max(1.0f, std::fabs(expected[i])))
          << "logsumexp[" << i << "]";
    }
  }
}

class CoreMatchesReference : public ::testing::TestWithParam<CoreCase> {};

TEST_P(CoreMatchesReference, OutputAndLogSumExp) {
  const CoreProblem p(GetParam());
  std::vector<float> out, expected, lse, expected_lse;
  ScaledDotProductAttention(p.query, p.key, p.value, p.masks, p.Output(out), p.options,
                            p.LogSumExp(lse));
  NaiveScaledDotProductAttention(p.query, p.key, p.value, p.masks, p.Output(expected),
                                 p.options, p.LogSumExp(expected_lse));
  ExpectClose(out, expected, "output");
  ExpectLogSumExpClose(lse, expected_lse);
}

// The README's bound for bf16 compute on inputs like these (entries of N(0, 1)
// scale): max |out - ref| <= 1e-2 max(1, max |ref|); log-sum-exps within 5e-2 of the
// reference's (a logit moves by about 2^-8 of |q| |k|).
class CoreInBf16 : public ::testing::TestWithParam<CoreCase> {};

TEST_P(CoreInBf16, OutputAndLogSumExpWithinTheBf16Bound) {
  CoreProblem p(GetParam());
  p.options.compute_dtype = DType::kBFloat16;
  std::vector<float> out, expected, lse, expected_lse;
  ScaledDotProductAttention(p.query, p.key, p.value, p.masks, p.Output(out), p.options,
                            p.LogSumExp(lse));
  NaiveScaledDotProductAttention(p.query, p.key, p.value, p.masks, p.Output(expected),
                                 p.options, p.LogSumExp(expected_lse));
  ExpectClose(out, expected, "bf16 output", 1e-2);
  for (size_t i = 0; i < expected_lse.size(); ++i) {
    if (std::isinf(expected_lse[i])) {
      EXPECT_EQ(lse[i], expected_lse[i]) << "logsumexp[" << i << "]";
    } else {
      EXPECT_NEAR(lse[i], expected_lse[i], 5e-2) << "logsumexp[" << i << "]";
    }
  }
}

TEST(CoreInBf16, RefusesOtherComputeDtypes) {
  CoreCase c;
  const CoreProblem p(c);
  CoreOptions options = p.options;
  options.compute_dtype = DType::kInt8;
  std::vector<float> out;
  ExpectErrorMentioning(
      [&] {
        ScaledDotProductAttention(p.query, p.key, p.value, p.masks, p.Output(out),
                                  options);
      },
      "options.compute_dtype: must be float32 or bfloat16, got int8");
}

// Values of their own width: the output must have it, and Gemma 3n's value norm (one
// RMS over the key's width of weights) refuses a value width that differs.
TEST(ValueHeadDim, OutputTakesTheValuesWidth) {
  CoreCase c;
  c.value_head_dim = 12;
  const CoreProblem p(c);
  std::vector<float> out(c.batch * c.heads * c.query_len * c.head_dim);
  const MutableTensorView keys_width(out.data(),
                                     Shape{c.batch, c.heads, c.query_len, c.head_dim});
  ExpectErrorMentioning(
      [&] {
        ScaledDotProductAttention(p.query, p.key, p.value, p.masks, keys_width,
                                  p.options);
      },
      "output: expected sizes [B=1, H=2, S=5, D=12 (value's)]");
  CoreOptions options = p.options;
  options.features.qk_norm = QkNorm{};
  options.features.qk_norm->value_norm = true;
  options.query_norm_weight = TensorView(p.query_norm.data(), Shape{c.head_dim});
  options.key_norm_weight = TensorView(p.key_norm.data(), Shape{c.head_dim});
  ExpectErrorMentioning(
      [&] {
        ScaledDotProductAttention(p.query, p.key, p.value, p.masks, p.Output(out),
                                  options);
      },
      "value_norm: needs the value's head_dim (12) equal to the key's (8)");
}

CoreCase Case(std::string name) {
  CoreCase c;
  c.name = std::move(name);
  return c;
}

std::vector<CoreCase> Cases() {
  std::vector<CoreCase> cases;
  auto add = [&](CoreCase c) { cases.push_back(c); };
  CoreCase c = Case("plain_bhsd");
  c.batch = 2, c.heads = 4, c.kv_heads = 4, c.query_len = 37, c.key_len = 37,
  c.head_dim = 16;
  add(c);
  c = Case("bshd_gqa_cross");
  c.batch = 2, c.heads = 8, c.kv_heads = 2, c.query_len = 19, c.key_len = 153,
  c.head_dim = 64;
  c.layout = HeadLayout::kBSHD;
  add(c);
  c = Case("mqa_scale");
  c.heads = 6, c.kv_heads = 1, c.query_len = 9, c.key_len = 140, c.head_dim = 32,
  c.scale = 0.3f;
  add(c);
  for (int64_t d : {1, 3, 80, 256, 512}) {
    c = Case("head_dim_" + std::to_string(d));
    c.batch = 2, c.query_len = 11, c.key_len = 133, c.head_dim = d, c.causal = true,
    c.bottom_right = true;
    add(c);
  }
  c = Case("causal_top_left");
  c.query_len = 7, c.key_len = 20, c.causal = true;
  add(c);
  c = Case("causal_bottom_right");
  c.heads = 4, c.kv_heads = 1, c.query_len = 50, c.key_len = 300, c.head_dim = 32;
  c.causal = true, c.bottom_right = true;
  add(c);
  c = Case("sliding_window_causal");
  c.query_len = c.key_len = 400, c.head_dim = 64, c.causal = true, c.window = 50;
  add(c);
  c = Case("sliding_window_symmetric");
  c.batch = 2, c.query_len = c.key_len = 150, c.head_dim = 16, c.window = 20,
  c.window_right = 10;
  add(c);
  c = Case("sliding_windows_near_int64_max");  // wider than any distance: no mask
  c.query_len = c.key_len = 20, c.window = INT64_MAX, c.window_right = INT64_MAX - 1;
  add(c);
  c = Case("sliding_window_1");
  c.query_len = c.key_len = 30, c.causal = true, c.window = 1;
  add(c);
  // Llama 4's chunked attention: 48-row blocks and 128-key tiles straddle chunks.
  c = Case("attention_chunk_causal_gqa");
  c.heads = 8, c.kv_heads = 2, c.query_len = c.key_len = 300, c.head_dim = 64,
  c.causal = true, c.chunk = 100;
  add(c);
  c = Case("attention_chunk_bidirectional");
  c.batch = 2, c.query_len = c.key_len = 40, c.chunk = 7;
  add(c);
  c = Case("attention_chunk_bottom_right_window_sinks");
  c.query_len = 50, c.key_len = 300, c.head_dim = 32, c.causal = true,
  c.bottom_right = true, c.chunk = 64, c.window = 40, c.sinks = true, c.softcap = 5.0f,
  c.alibi = true, c.rope = RotaryPairing::kHalfSplit;
  add(c);
  // Llama 4's NoPE layers: the query temperature, whose scale steps every 4 positions
  // here; bottom-right aligned so that cached positions count.
  c = Case("temperature_tuning_bottom_right_gqa");
  c.heads = 4, c.kv_heads = 2, c.query_len = 30, c.key_len = 90, c.causal = true,
  c.bottom_right = true, c.temperature = AttentionTemperature{4.0, 0.25};
  add(c);
  c = Case("temperature_tuning_chunk_softcap_sinks");
  c.query_len = c.key_len = 70, c.causal = true, c.chunk = 16, c.softcap = 3.0f,
  c.sinks = true, c.temperature = AttentionTemperature{8.0, 0.5};
  add(c);
  // Qwen 3 and Gemma 3: QK-norm before the rotation, in fused-QKV strided views.
  c = Case("qk_norm_rope_gqa_fused_qkv");
  c.heads = 4, c.kv_heads = 2, c.query_len = c.key_len = 45, c.head_dim = 64,
  c.causal = true, c.qk_norm = QkNorm{}, c.rope = RotaryPairing::kHalfSplit,
  c.fused_qkv = true;
  add(c);
  c = Case("qk_norm_value_norm_gqa_sinks");  // Gemma 3n
  c.heads = 4, c.kv_heads = 1, c.query_len = c.key_len = 33, c.head_dim = 24,
  c.causal = true, c.sinks = true,
  c.qk_norm = QkNorm{1e-6, false, QkNormScope::kPerHead, true};
  add(c);
  c = Case("qk_norm_unit_offset_window_softcap_bottom_right");
  c.query_len = 20, c.key_len = 75, c.head_dim = 40, c.causal = true,
  c.bottom_right = true, c.window = 16, c.softcap = 4.0f, c.qk_norm = QkNorm{1e-6, true},
  c.rope = RotaryPairing::kInterleaved;
  add(c);
  c = Case("attention_chunk_1");
  c.query_len = c.key_len = 30, c.causal = true, c.chunk = 1;
  add(c);
  c = Case("softcap");
  c.query_len = 33, c.key_len = 70, c.head_dim = 80, c.softcap = 2.0f, c.scale = 1.0f;
  add(c);
  c = Case("alibi_6_heads_causal");
  c.heads = c.kv_heads = 6, c.query_len = c.key_len = 140, c.causal = true,
  c.alibi = true;
  add(c);
  c = Case("alibi_given_slopes_gqa");
  c.heads = 4, c.kv_heads = 2, c.query_len = 20, c.key_len = 90, c.alibi = true,
  c.given_slopes = true;
  add(c);
  c = Case("sinks_masked_rows");
  c.batch = 3, c.query_len = 12, c.key_len = 40, c.sinks = true, c.key_lengths = true;
  add(c);
  c = Case("masked_rows_no_sinks");
  c.batch = 3, c.query_len = 12, c.key_len = 40, c.key_lengths = true, c.window = 3,
  c.bottom_right = true;
  add(c);
  c = Case("rope_half_split");
  c.query_len = c.key_len = 60, c.head_dim = 64, c.rope = RotaryPairing::kHalfSplit;
  add(c);
  c = Case("rope_interleaved_partial_positions");
  c.batch = 2, c.query_len = 13, c.key_len = 29, c.head_dim = 80,
  c.rope = RotaryPairing::kInterleaved;
  c.rotary_dim = 16, c.given_positions = true;
  add(c);
  c = Case("rope_llama3_bshd_causal");
  c.heads = 8, c.kv_heads = 2, c.query_len = 40, c.key_len = 200, c.head_dim = 128;
  c.layout = HeadLayout::kBSHD, c.causal = true, c.bottom_right = true;
  c.rope = RotaryPairing::kHalfSplit, c.rope_scaling = RopeScalingType::kLlama3;
  add(c);
  // Dynamic NTK and LongRoPE past their switch (original 64): each sequence at its own
  // length, the longest position of its queries and keys + 1.
  c = Case("rope_dynamic_ntk_bottom_right_gqa");
  c.batch = 2, c.heads = 4, c.kv_heads = 2, c.query_len = 20, c.key_len = 100;
  c.head_dim = 32, c.causal = true, c.bottom_right = true, c.key_lengths = true;
  c.rope = RotaryPairing::kHalfSplit, c.rope_scaling = RopeScalingType::kDynamic;
  add(c);
  c = Case("rope_longrope_given_positions");
  c.batch = 2, c.query_len = 12, c.key_len = 30, c.head_dim = 16,
  c.given_positions = true;
  c.rope = RotaryPairing::kHalfSplit, c.rope_scaling = RopeScalingType::kLongRope;
  add(c);
  c = Case("rope_linear_partial_odd_half");
  c.query_len = c.key_len = 21, c.head_dim = 24, c.rope = RotaryPairing::kHalfSplit;
  c.rotary_dim = 10, c.rope_scaling = RopeScalingType::kLinear;
  add(c);
  c = Case("fused_qkv_slices");
  c.batch = 2, c.heads = 4, c.kv_heads = 2, c.query_len = c.key_len = 45, c.head_dim = 16;
  c.fused_qkv = true, c.causal = true, c.rope = RotaryPairing::kHalfSplit;
  add(c);
  c = Case("masks_all_kinds");
  c.batch = 2, c.query_len = 17, c.key_len = 33, c.key_lengths = true,
  c.padding_mask = true, c.attn_mask = true;
  add(c);
  c = Case("everything_one_thread");
  c.batch = 2, c.heads = 6, c.kv_heads = 2, c.query_len = 70, c.key_len = 170,
  c.head_dim = 48;
  c.causal = true, c.bottom_right = true, c.window = 64, c.softcap = 30.0f,
  c.alibi = true, c.sinks = true, c.rope = RotaryPairing::kHalfSplit,
  c.padding_mask = true, c.attn_mask = true, c.threads = 1;
  add(c);
  c.name = "everything_two_threads";
  c.threads = 2;
  add(c);
  // Values narrower or wider than the keys (PyTorch's E_v != E); MLA's absorbed shape
  // (MQA, keys = latent + rope part, values = latent) decoding over split key ranges.
  c = Case("value_wider_gqa_causal_window");
  c.batch = 2, c.heads = 4, c.kv_heads = 2, c.query_len = 33, c.key_len = 90;
  c.head_dim = 24, c.value_head_dim = 40, c.causal = true, c.window = 50;
  c.rope = RotaryPairing::kHalfSplit;
  add(c);
  c = Case("value_narrower_bshd_sinks_masks");
  c.batch = 2, c.heads = 3, c.kv_heads = 3, c.query_len = 17, c.key_len = 45;
  c.head_dim = 48, c.value_head_dim = 8, c.layout = HeadLayout::kBSHD;
  c.sinks = true, c.padding_mask = true, c.key_lengths = true;
  add(c);
  c = Case("mla_shape_mqa_decode_split");
  c.heads = 16, c.kv_heads = 1, c.query_len = 1, c.key_len = 1500;
  c.head_dim = 72, c.value_head_dim = 64, c.scale = 0.1f;
  add(c);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, CoreMatchesReference, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<CoreCase>& info) {
                           return info.param.name;
                         });
INSTANTIATE_TEST_SUITE_P(Cases, CoreInBf16, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<CoreCase>& info) {
                           return info.param.name;
                         });

// Attention over keys [0, split) and [split, Sk), merged by log-sum-exp, against
// attention over all keys. The second range runs with `second_options`.
void ExpectSplitRangesMerge(const CoreProblem& p, int64_t split,
                            const CoreOptions& second_options) {
  const CoreCase& c = p.c;
  std::vector<float> full, full_lse;
  ScaledDotProductAttention(p.query, p.key, p.value, {}, p.Output(full), p.options,
                            p.LogSumExp(full_lse));
  std::vector<float> parts[2], lses[2];
  for (int part = 0; part < 2; ++part) {
    const int64_t first = part ? split : 0, len = part ? c.key_len - split : split;
    const int64_t kv_stride = c.key_len * c.head_dim;
    const TensorView key =
        TensorView(p.k.data() + first * c.head_dim,
                   Shape{c.batch, c.kv_heads, len, c.head_dim})
            .WithStrides(c.kv_heads * kv_stride, kv_stride, c.head_dim);
    TensorView value = key;
    value.data = p.v.data() + first * c.head_dim;
    ScaledDotProductAttention(p.query, key, value, {}, p.Output(parts[part]),
                              part ? second_options : p.options, p.LogSumExp(lses[part]));
  }
  for (size_t row = 0; row < full_lse.size(); ++row) {
    const float lse = std::log(std::exp(lses[0][row]) + std::exp(lses[1][row]));
    EXPECT_NEAR(lse, full_lse[row], 1e-4f);
    for (int64_t x = 0; x < c.head_dim; ++x) {
      const size_t i = row * c.head_dim + x;
      const float merged = std::exp(lses[0][row] - lse) * parts[0][i] +
                           std::exp(lses[1][row] - lse) * parts[1][i];
      EXPECT_NEAR(merged, full[i], 1e-4f) << "row " << row << " dim " << x;
    }
  }
}

// What callers splitting key ranges rely on.
TEST(LogSumExp, MergesSplitKeyRanges) {
  CoreCase c = Case("split");
  c.batch = 2, c.heads = 4, c.kv_heads = 2, c.query_len = 9, c.key_len = 230,
  c.head_dim = 32;
  const CoreProblem p(c);
  ExpectSplitRangesMerge(p, 101, p.options);
}

// With sinks, the sink goes to one range only: the merge is exact again (given to
// both, it would count twice).
TEST(LogSumExp, MergesSplitKeyRangesWithTheSinkInOne) {
  CoreCase c = Case("split_sinks");
  c.heads = 2, c.kv_heads = 1, c.query_len = 3, c.key_len = 50, c.sinks = true;
  const CoreProblem p(c);
  CoreOptions no_sinks = p.options;
  no_sinks.sinks = {};
  ExpectSplitRangesMerge(p, 20, no_sinks);
}

// A fully masked row with a sink gives output 0 (the sink takes all the weight).
TEST(Sinks, FullyMaskedRowGivesZero) {
  CoreCase c = Case("sink_zero");
  c.batch = 2, c.key_lengths = true, c.sinks = true;
  const CoreProblem p(c);
  std::vector<float> out, lse;
  ScaledDotProductAttention(p.query, p.key, p.value, p.masks, p.Output(out), p.options,
                            p.LogSumExp(lse));
  const int64_t plane = c.heads * c.query_len * c.head_dim;
  for (int64_t i = plane; i < 2 * plane; ++i) ASSERT_EQ(out[i], 0.0f) << i;  // batch 1
  for (int64_t h = 0; h < c.heads; ++h) {  // the denominator is the sink alone
    EXPECT_FLOAT_EQ(lse[(c.heads + h) * c.query_len], p.sink_values[h]);
  }
}

TEST(AlibiSlopes, MatchBloomFormula) {
  // BLOOM's build_alibi_tensor: 8 heads give 2^-1 .. 2^-8; 12 heads add the odd
  // powers of 2^-0.5 to the first eight's 2^-1 .. 2^-8.
  const std::vector<float> eight = AlibiSlopes(8);
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(eight[i], std::pow(2.0f, -(i + 1.0f)));
  const std::vector<float> twelve = AlibiSlopes(12);
  ASSERT_EQ(twelve.size(), 12u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(twelve[8 + i], std::pow(2.0f, -0.5f * (2 * i + 1)));
  }
}

}  // namespace
}  // namespace mha::testing

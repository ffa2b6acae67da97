// bf16 weights: the layer against the fp32 double-precision baseline within the
// stated bound, the rounding kernel against a scalar reference, and (a second ctest
// run with DNNL_MAX_CPU_ISA=AVX2) the fallback where oneDNN has no bf16 matmul.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "src/base/cpu_features.h"
#include "src/simd/bf16_convert.h"
#include "tests/test_util.h"

namespace mha::testing {
namespace {

// Stated in docs/serving.md: max |out - ref| <= kBf16Bound * max(1, max |ref|). Observed
// at most 3.6e-3 over these cases (bf16 matmul), 2.2e-3 with the fp32 fallback.
constexpr double kBf16Bound = 1e-2;

class Bf16Weights : public ::testing::TestWithParam<WeightDtypeCase> {};

TEST_P(Bf16Weights, WithinBoundOfFp32Baseline) {
  ExpectWeightDtypeWithinBound(GetParam(), DType::kBFloat16, kBf16Bound, 19);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Bf16Weights,
    ::testing::Values(WeightDtypeCase{"self", 4, 0, 16, 64, 0, 2, 37, 37, false},
                      WeightDtypeCase{"gqa_causal", 8, 2, 32, 128, 0, 2, 65, 65, true},
                      WeightDtypeCase{"cross_kdim", 4, 0, 8, 32, 20, 3, 9, 40, false},
                      WeightDtypeCase{"bert_like", 12, 0, 64, 768, 0, 1, 48, 48, false}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Bf16Weights, DecodeThroughCacheMatchesBf16Forward) {
  LayerSpec spec;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  spec.head_dim = 16;
  spec.query_dim = 32;
  OwnedLayer layer = MakeLayer(spec, 23);
  layer.config.weight_dtype = DType::kBFloat16;
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<float> x = RandomFloats(9 * 32, 5);
  std::vector<float> full(9 * 32), step(32);
  AttentionMasks masks;
  masks.is_causal = true;
  attention.Forward({TensorView(x.data(), Shape{9, 32}), {}, {}}, masks,
                    {MutableTensorView(full.data(), Shape{9, 32}), {}});
  KvCache cache(layer.config, 1, 9);
  for (int64_t t = 0; t < 9; ++t) {
    attention.ForwardWithCache(TensorView(x.data() + t * 32, Shape{1, 32}), {}, cache,
                               MutableTensorView(step.data(), Shape{1, 32}));
    ExpectClose(step,
                std::vector<float>(full.begin() + t * 32, full.begin() + (t + 1) * 32),
                "decode");
  }
}

// AMX tiles run exactly where the CPU has them, the cap is native (as for oneDNN,
// "avx512" stops short of AMX) and the bf16 dot products run at all.
TEST(Bf16Inputs, AmxTilesReportedWhereTheyRun) {
  const IsaReport report = DescribeIsa();
  const char* cap = std::getenv("MHA_MAX_ISA");
  const bool native = cap == nullptr || *cap == 0 || std::string(cap) == "native";
  EXPECT_EQ(report.amx_tiles,
            report.bf16_dot_products && native && internal::CpuHasAmxBf16());
}

// bf16 input tensors give what their widened fp32 values give, for fp32 and bf16
// weights, self- and cross-attention, and through the naive baseline: exactly, or
// within the bf16 bound where bf16 inputs compute attention in bf16 (AVX512_BF16 dot
// products).
TEST(Bf16Inputs, MatchWidenedFp32Inputs) {
  const bool bf16_attention = DescribeIsa().bf16_dot_products;
  for (DType weights : {DType::kFloat32, DType::kBFloat16}) {
    for (bool cross : {false, true}) {
      LayerSpec spec;
      spec.num_heads = 4;
      spec.head_dim = 8;
      spec.query_dim = 32;
      spec.key_dim = spec.value_dim = cross ? 24 : 0;
      OwnedLayer layer = MakeLayer(spec, 29);
      layer.config.weight_dtype = weights;
      const MultiheadAttention attention(layer.config, layer.weights);
      const int64_t kv_dim = cross ? 24 : 32;
      const std::vector<float> q = RandomFloats(2 * 7 * 32, 6),
                               kv = RandomFloats(2 * 9 * kv_dim, 7);
      std::vector<uint16_t> q16(q.size()), kv16(kv.size());
      internal::FloatToBf16(q.data(), q.size(), q16.data());
      internal::FloatToBf16(kv.data(), kv.size(), kv16.data());
      std::vector<float> qw(q.size()), kvw(kv.size());
      internal::Bf16ToFloat(q16.data(), q16.size(), qw.data());
      internal::Bf16ToFloat(kv16.data(), kv16.size(), kvw.data());
      const int64_t sk = cross ? 9 : 7;
      const AttentionInputs bf16_inputs{
          TensorView(q16.data(), DType::kBFloat16, Shape{2, 7, 32}),
          cross ? TensorView(kv16.data(), DType::kBFloat16, Shape{2, sk, kv_dim})
                : TensorView(),
          cross ? TensorView(kv16.data(), DType::kBFloat16, Shape{2, sk, kv_dim})
                : TensorView()};
      const AttentionInputs fp32_inputs{
          TensorView(qw.data(), Shape{2, 7, 32}),
          cross ? TensorView(kvw.data(), Shape{2, sk, kv_dim}) : TensorView(),
          cross ? TensorView(kvw.data(), Shape{2, sk, kv_dim}) : TensorView()};
      std::vector<float> a(2 * 7 * 32), b(a.size()), ref(a.size());
      attention.Forward(bf16_inputs, {},
                        {MutableTensorView(a.data(), Shape{2, 7, 32}), {}});
      attention.Forward(fp32_inputs, {},
                        {MutableTensorView(b.data(), Shape{2, 7, 32}), {}});
      ExpectClose(a, b, "bf16 input vs widened fp32 input",
                  bf16_attention ? kBf16Bound : 1e-6);
      AttentionConfig fp32_config = layer.config;
      fp32_config.weight_dtype = DType::kFloat32;
      NaiveMultiheadAttention(fp32_config, layer.weights, bf16_inputs, {},
                              {MutableTensorView(ref.data(), Shape{2, 7, 32}), {}});
      ExpectClose(a, ref, "bf16 input vs baseline",
                  weights == DType::kFloat32 && !bf16_attention ? 1e-4 : kBf16Bound);
    }
  }
}

// bf16 outputs hold the fp32 results rounded to nearest even: bit for bit, in the
// whole flow, the chunked flow and decoding, and from the naive baseline.
TEST(Bf16Outputs, AreRoundedFp32Results) {
  LayerSpec spec;
  spec.num_heads = 4;
  spec.head_dim = 8;
  spec.query_dim = 32;
  const OwnedLayer layer = MakeLayer(spec, 31);
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<float> x = RandomFloats(2 * 70 * 32, 8);
  const Shape shape{2, 70, 32};
  AttentionMasks masks;
  masks.is_causal = true;
  for (double budget : {64.0 * (1 << 20), 4096.0}) {  // whole, then chunked
    ForwardOptions options;
    options.workspace_budget_bytes = budget;
    std::vector<float> fp32(2 * 70 * 32);
    std::vector<uint16_t> bf16(fp32.size());
    const AttentionInputs inputs{TensorView(x.data(), shape), {}, {}};
    attention.Forward(inputs, masks, {MutableTensorView(fp32.data(), shape), {}},
                      options);
    attention.Forward(inputs, masks,
                      {MutableTensorView(bf16.data(), DType::kBFloat16, shape), {}},
                      options);
    for (size_t i = 0; i < fp32.size(); ++i) {
      ASSERT_EQ(bf16[i], internal::RoundToBf16Bits(fp32[i]))
          << "budget " << budget << " i " << i;
    }
    std::vector<uint16_t> reference(fp32.size());
    NaiveMultiheadAttention(
        layer.config, layer.weights, inputs, masks,
        {MutableTensorView(reference.data(), DType::kBFloat16, shape), {}});
    std::vector<float> widened(fp32.size()), reference_widened(fp32.size());
    internal::Bf16ToFloat(bf16.data(), bf16.size(), widened.data());
    internal::Bf16ToFloat(reference.data(), reference.size(), reference_widened.data());
    ExpectClose(widened, reference_widened, "bf16 output vs baseline", kBf16Bound);
  }
  KvCache cache(layer.config, 2, 70);
  std::vector<float> fp32(2 * 70 * 32);
  std::vector<uint16_t> bf16(fp32.size());
  attention.ForwardWithCache(TensorView(x.data(), shape), {}, cache,
                             MutableTensorView(bf16.data(), DType::kBFloat16, shape));
  attention.Forward({TensorView(x.data(), shape), {}, {}}, masks,
                    {MutableTensorView(fp32.data(), shape), {}});
  std::vector<float> widened(fp32.size());
  internal::Bf16ToFloat(bf16.data(), bf16.size(), widened.data());
  ExpectClose(widened, fp32, "bf16 decode output", kBf16Bound);
}

TEST(Bf16Outputs, AttentionWeightsMustBeFp32) {
  const OwnedLayer layer = MakeLayer(LayerSpec(), 2);
  const MultiheadAttention attention(layer.config, layer.weights);
  std::vector<float> x(2 * 3 * 8), out(x.size());
  std::vector<uint16_t> weights(2 * 3 * 3, 7);
  try {
    attention.Forward(
        {TensorView(x.data(), Shape{2, 3, 8}), {}, {}}, {},
        {MutableTensorView(out.data(), Shape{2, 3, 8}),
         MutableTensorView(weights.data(), DType::kBFloat16, Shape{2, 3, 3})});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("outputs.attn_weights: expected dtype float32, got "
                                   "bfloat16"),
        std::string::npos)
        << e.what();
  }
  for (uint16_t w : weights) ASSERT_EQ(w, 7);
}

// Round to nearest even on the float bits, one value at a time.
uint16_t ScalarBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const uint32_t lower = bits & 0xFFFFu, upper = bits >> 16;
  const bool round_up = lower > 0x8000u || (lower == 0x8000u && (upper & 1u));
  return static_cast<uint16_t>(upper + (round_up ? 1 : 0));
}

TEST(Bf16Convert, RoundsToNearestEvenOverOddLengths) {
  for (size_t n : {1, 7, 16, 33, 100}) {
    std::vector<float> values = RandomFloats(n, static_cast<uint32_t>(n), 1e3f);
    // Exact ties: an odd and an even kept half, each followed by 0x8000.
    const uint32_t ties[2] = {0x3F818000u, 0x3F808000u};
    std::memcpy(&values[0], &ties[n % 2], 4);
    std::vector<uint16_t> bits(n);
    internal::FloatToBf16(values.data(), n, bits.data());
    std::vector<float> back(n);
    internal::Bf16ToFloat(bits.data(), n, back.data());
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(bits[i], ScalarBf16(values[i])) << "n=" << n << " i=" << i;
      EXPECT_LE(std::fabs(back[i] - values[i]), std::fabs(values[i]) * (1.0 / 256)) << i;
    }
  }
}

// Every class of float (normal, subnormal, zero, infinity, NaN; random bit patterns)
// gets the scalar rounding's bits, in the SIMD body and the tail alike; also vectors
// whose only subnormal is one lane among normals (a hardware rounding such as
// AVX512_BF16's flushes subnormals to zero: the library's keeps them).
TEST(Bf16Convert, EveryClassOfFloatAsTheScalarRounding) {
  std::mt19937 random(11);
  for (size_t n : {1, 16, 47, 160}) {
    for (int pattern = 0; pattern < 3; ++pattern) {
      std::vector<uint32_t> words(n);
      for (size_t i = 0; i < n; ++i) {
        const uint32_t word = static_cast<uint32_t>(random());
        // pattern 0: any bits; 1: subnormals only; 2: normals, one subnormal per 16.
        words[i] = pattern == 0   ? word
                   : pattern == 1 ? (word & 0x807FFFFFu) | 1u
                   : i % 16 == 5  ? (word & 0x807FFFFFu) | 1u
                                  : (word & 0xBFFFFFFFu) | 0x00800000u;
      }
      std::vector<float> values(n);
      std::memcpy(values.data(), words.data(), n * 4);
      std::vector<uint16_t> bits(n);
      internal::FloatToBf16(values.data(), n, bits.data());
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(bits[i], internal::RoundToBf16Bits(values[i]))
            << "n=" << n << " pattern " << pattern << " i=" << i << " word " << words[i];
      }
    }
  }
}

// NaNs whose low mantissa bits would carry into the exponent when rounded
// (0x7FFFFFFF became -0) stay NaN, in the SIMD body and the scalar tail alike.
TEST(Bf16Convert, NaNStaysNaN) {
  const uint32_t nans[4] = {0x7FFFFFFFu, 0xFFFFFFFFu, 0x7F80FFFFu, 0x7FC00000u};
  for (size_t n : {1, 4, 17, 64}) {
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i) std::memcpy(&values[i], &nans[i % 4], 4);
    std::vector<uint16_t> bits(n);
    internal::FloatToBf16(values.data(), n, bits.data());
    std::vector<float> back(n);
    internal::Bf16ToFloat(bits.data(), n, back.data());
    for (size_t i = 0; i < n; ++i) {
      EXPECT_TRUE(std::isnan(back[i])) << "n=" << n << " i=" << i << " bits " << bits[i];
      EXPECT_EQ(std::signbit(back[i]), std::signbit(values[i])) << i;
      EXPECT_TRUE(std::isnan([&] {
        const uint32_t one = uint32_t{internal::RoundToBf16Bits(values[i])} << 16;
        float f;
        std::memcpy(&f, &one, 4);
        return f;
      }()))
          << i;
    }
  }
}

// A NaN token through bf16 weights or a bf16 cache reaches its outputs and later
// ones as NaN, as with fp32 and int8 (earlier rows may be NaN too: non_finite_test).
TEST(Bf16Weights, NaNTokenGivesNaNOutputs) {
  OwnedLayer layer = MakeLayer(LayerSpec(), 2);
  layer.config.weight_dtype = DType::kBFloat16;
  const MultiheadAttention attention(layer.config, layer.weights);
  const int64_t e = layer.config.query_dim;
  std::vector<float> x = RandomFloats(3 * e, 3);
  const uint32_t nan_bits = 0x7FFFFFFFu;
  std::memcpy(&x[e + 1], &nan_bits, 4);  // token 1
  for (const DType storage : {DType::kFloat32, DType::kBFloat16}) {
    KvCache cache(layer.config, 1, 3, storage);
    std::vector<float> out(3 * e);
    attention.ForwardWithCache(TensorView(x.data(), Shape{1, 3, e}), {}, cache,
                               MutableTensorView(out.data(), Shape{1, 3, e}));
    for (int64_t i = 0; i < e; ++i) {
      EXPECT_TRUE(std::isnan(out[e + i])) << DTypeName(storage) << " token 1";
      EXPECT_TRUE(std::isnan(out[2 * e + i])) << DTypeName(storage) << " token 2";
    }
  }
}

// config.compute_dtype = kBFloat16: the forward's K/V pages in bf16, and bf16 dot
// products where the CPU has AVX512_BF16. Whole and chunked flows (the chunked one
// keeps its V pages in the output buffer), GQA, rotary, windows and sinks, against
// the fp32 baseline within the README's bound.
struct ComputeCase {
  const char* name;
  int64_t num_heads, num_kv_heads, head_dim, query_dim, seq_len;
  bool causal, rope, window;
  double budget_bytes;  // small: the chunked flow
};

void PrintTo(const ComputeCase& c, std::ostream* os) { *os << c.name; }

class Bf16Compute : public ::testing::TestWithParam<ComputeCase> {};

TEST_P(Bf16Compute, WithinBoundOfFp32Baseline) {
  const ComputeCase& c = GetParam();
  LayerSpec spec;
  spec.num_heads = c.num_heads;
  spec.num_kv_heads = c.num_kv_heads;
  spec.head_dim = c.head_dim;
  spec.query_dim = c.query_dim;
  OwnedLayer layer = MakeLayer(spec, 23);
  if (c.rope) layer.config.rotary.pairing = RotaryPairing::kHalfSplit;
  if (c.window) layer.config.features.sliding_window = 40;
  const AttentionConfig fp32_config = layer.config;
  layer.config.compute_dtype = DType::kBFloat16;
  const MultiheadAttention attention(layer.config, layer.weights);
  const int64_t batch = 2;
  const Shape shape{batch, c.seq_len, c.query_dim};
  const std::vector<float> x = RandomFloats(batch * c.seq_len * c.query_dim, 24);
  AttentionMasks masks;
  masks.is_causal = c.causal;
  ForwardOptions options;
  options.workspace_budget_bytes = c.budget_bytes;
  std::vector<float> out(x.size()), ref(x.size());
  attention.Forward({TensorView(x.data(), shape), {}, {}}, masks,
                    {MutableTensorView(out.data(), shape), {}}, options);
  NaiveMultiheadAttention(fp32_config, layer.weights,
                          {TensorView(x.data(), shape), {}, {}}, masks,
                          {MutableTensorView(ref.data(), shape), {}});
  ExpectClose(out, ref, c.name, kBf16Bound);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Bf16Compute,
    ::testing::Values(
        ComputeCase{"self", 4, 0, 16, 64, 37, false, false, false, 64e6},
        ComputeCase{"gqa_causal_rope", 8, 2, 64, 128, 300, true, true, false, 64e6},
        ComputeCase{"odd_head_dim_window", 3, 0, 17, 24, 150, true, false, true, 64e6},
        ComputeCase{"chunked_causal", 4, 2, 32, 64, 700, true, true, true, 2e5}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Bf16Config, RejectsOtherComputeTypes) {
  OwnedLayer layer = MakeLayer(LayerSpec(), 1);
  layer.config.compute_dtype = DType::kInt8;
  ExpectErrorMentioning([&] { MultiheadAttention(layer.config, layer.weights); },
                        "config.compute_dtype: must be float32 or bfloat16, got int8");
}

TEST(Bf16Config, RejectsOtherWeightTypes) {
  OwnedLayer layer = MakeLayer(LayerSpec(), 1);
  layer.config.weight_dtype = DType::kInt32;
  try {
    MultiheadAttention(layer.config, layer.weights);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weight_dtype"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("int32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mha::testing

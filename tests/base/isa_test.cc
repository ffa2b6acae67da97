// The ISA cap: names, and a process started with MHA_MAX_ISA=sse4 (see CMakeLists)
// running every kernel and projection at SSE4 with unchanged results.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "mha/mha.h"
#include "mha/mha.hpp"
#include "tests/test_util.h"

namespace mha::testing {
namespace {

TEST(IsaCap, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(ParseIsa("sse4"), Isa::kSse4);
  EXPECT_EQ(ParseIsa("avx2"), Isa::kAvx2);
  EXPECT_EQ(ParseIsa("avx512"), Isa::kAvx512);
  EXPECT_EQ(ParseIsa("native"), Isa::kNative);
  ExpectErrorMentioning(
      [] { ParseIsa("AVX2", "MHA_MAX_ISA"); },
      "MHA_MAX_ISA: expected one of sse4, avx2, avx512, native, got 'AVX2'");
  ExpectErrorMentioning([] { ParseIsa(""); }, "isa: expected one of");
}

TEST(IsaCap, EnvironmentCapsKernelsAndProjections) {
  const char* cap = std::getenv("MHA_MAX_ISA");
  ASSERT_TRUE(cap && std::string(cap) == "sse4") << "run through ctest, which sets it";
  LayerSpec spec;
  spec.num_heads = 3;
  spec.head_dim = 16;
  spec.query_dim = 48;
  const OwnedLayer layer = MakeLayer(spec, 7);
  const MultiheadAttention attention(layer.config, layer.weights);
  const int64_t batch = 2, seq = 37;
  const std::vector<float> x = RandomFloats(batch * seq * spec.query_dim, 8);
  const AttentionInputs inputs{
      TensorView(x.data(), Shape{batch, seq, spec.query_dim}), {}, {}};
  AttentionMasks masks;
  masks.is_causal = true;
  std::vector<float> out(x.size()), ref(x.size());
  attention.Forward(inputs, masks,
                    {MutableTensorView(out.data(), inputs.query.shape), {}});
  NaiveMultiheadAttention(layer.config, layer.weights, inputs, masks,
                          {MutableTensorView(ref.data(), inputs.query.shape), {}});
  ExpectClose(out, ref, "output at sse4");

  const IsaReport report = DescribeIsa();
  EXPECT_EQ(report.simd_target, "SSE4");
  EXPECT_EQ(report.onednn_isa, "sse41");
  EXPECT_FALSE(report.bf16_dot_products);
  EXPECT_FALSE(report.amx_tiles);
  EXPECT_FALSE(report.projection_kernels.empty());
  // The C face says the same.
  mha_isa_report c_report;
  ASSERT_EQ(mha_describe_isa(&c_report), MHA_OK);
  EXPECT_EQ(c_report.simd_target, report.simd_target);
  EXPECT_EQ(c_report.onednn_isa, report.onednn_isa);
  EXPECT_EQ(c_report.bf16_dot_products, 0);
  EXPECT_EQ(c_report.amx_tiles, 0);
  std::string kernels;
  for (const std::string& kernel : report.projection_kernels) {
    kernels += (kernels.empty() ? "" : ",") + kernel;
  }
  EXPECT_EQ(c_report.projection_kernels, kernels);
  // oneDNN's ISA is fixed now: a wider cap is refused, the same one accepted.
  ExpectErrorMentioning([] { SetMaxIsa(Isa::kNative); }, "already created a primitive");
  SetMaxIsa(Isa::kSse4);
}

}  // namespace
}  // namespace mha::testing

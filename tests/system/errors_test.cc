// Every invalid argument raises mha::Error naming the argument and the values seen,
// from the layer and from the naive baseline alike, and leaves the outputs as they
// were.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "tests/test_util.h"

namespace mha::testing {
namespace {

// A valid call (B=2, Sq=3, Sk=4, 2 heads of 4, widths 8/6/5) that each case breaks.
struct Call {
  Call() : layer(MakeLayer(Spec(), 5)) {
    query = RandomFloats(2 * 3 * 8, 1);
    key = RandomFloats(2 * 4 * 6, 2);
    value = RandomFloats(2 * 4 * 5, 3);
    inputs = {TensorView(query.data(), Shape{2, 3, 8}),
              TensorView(key.data(), Shape{2, 4, 6}),
              TensorView(value.data(), Shape{2, 4, 5})};
    output.assign(2 * 3 * 8, kSentinel);
    weights_out.assign(2 * 2 * 3 * 4, kSentinel);
    outputs = {MutableTensorView(output.data(), Shape{2, 3, 8}),
               MutableTensorView(weights_out.data(), Shape{2, 2, 3, 4})};
    options.average_attn_weights = false;
  }
  static LayerSpec Spec() {
    LayerSpec spec;
    spec.key_dim = 6;
    spec.value_dim = 5;
    return spec;
  }
  static constexpr float kSentinel = 12345.0f;

  OwnedLayer layer;
  std::vector<float> query, key, value, output, weights_out;
  std::vector<uint8_t> bool_mask = std::vector<uint8_t>(64, 0);
  std::vector<int32_t> int_mask = std::vector<int32_t>(64, 0);
  std::vector<float> float_mask = std::vector<float>(64, 0.0f);
  AttentionInputs inputs;
  AttentionMasks masks;
  AttentionOutputs outputs;
  ForwardOptions options;
};

struct ErrorCase {
  const char* name;
  std::function<void(Call&)> mutate;
  std::vector<std::string> message_parts;
};

void ExpectError(const std::function<void()>& run, const ErrorCase& c) {
  try {
    run();
    ADD_FAILURE() << c.name << ": no error";
  } catch (const Error& e) {
    for (const std::string& part : c.message_parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << c.name << ": message \"" << e.what() << "\" lacks \"" << part << "\"";
    }
  }
}

void ExpectUntouched(const Call& call, const char* name) {
  for (float v : call.output) ASSERT_EQ(v, Call::kSentinel) << name << ": output written";
  for (float v : call.weights_out)
    ASSERT_EQ(v, Call::kSentinel) << name << ": weights written";
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const int64_t kHuge = int64_t{1} << 40;

std::vector<ErrorCase> Cases() {
  return {
      {"zero heads",
       [](Call& c) { c.layer.config.num_heads = 0; },
       {"num_heads", "got 0"}},
      {"negative head_dim",
       [](Call& c) { c.layer.config.head_dim = -1; },
       {"head_dim", "-1"}},
      {"zero query_dim", [](Call& c) { c.layer.config.query_dim = 0; }, {"query_dim"}},
      {"negative key_dim",
       [](Call& c) { c.layer.config.key_dim = -2; },
       {"key_dim", "-2"}},
      {"kv heads not dividing",
       [](Call& c) { c.layer.config.num_kv_heads = 3; },
       {"num_kv_heads", "divide num_heads 2", "got 3"}},
      {"NaN scale", [](Call& c) { c.layer.config.scale = kNaN; }, {"scale", "nan"}},
      {"model width overflow",
       [](Call& c) { c.layer.config.num_heads = c.layer.config.head_dim = kHuge; },
       {"num_heads * head_dim", "1099511627776"}},
      {"null query weight",
       [](Call& c) { c.layer.weights.query.weight.data = nullptr; },
       {"weights.query.weight", "null"}},
      {"int32 key weight",
       [](Call& c) { c.layer.weights.key.weight.dtype = DType::kInt32; },
       {"weights.key.weight", "float32", "int32"}},
      {"value weight shape",
       [](Call& c) {
         c.layer.weights.value.weight.shape = Shape{8, 4};
       },
       {"weights.value.weight", "[8, 5]", "[8, 4]"}},
      {"layout mismatch",
       [](Call& c) { c.layer.weights.query.layout = WeightLayout::kHeadsInHeadDim; },
       {"weights.query.weight", "[2, 8, 4]", "[8, 8]"}},
      {"query bias shape",
       [](Call& c) { c.layer.weights.query.bias.shape = Shape{7}; },
       {"weights.query.bias", "[8]", "[7]"}},
      {"output weight rank",
       [](Call& c) {
         c.layer.weights.output.weight.shape = Shape{8, 8, 1};
       },
       {"weights.output.weight", "rank 2", "[8, 8, 1]"}},
      {"output per-head layout",
       [](Call& c) { c.layer.weights.output.layout = WeightLayout::kHeadsInHeadDim; },
       {"weights.output.weight", "kHeadsInHeadDim"}},
      {"output layout out of range",
       [](Call& c) { c.layer.weights.output.layout = static_cast<WeightLayout>(99); },
       {"weights.output.weight", "unknown layout 99"}},
      {"output bias alone",
       [](Call& c) { c.layer.weights.output.weight = TensorView(); },
       {"weights.output.bias", "without a weight"}},
      {"output bias shape",
       [](Call& c) { c.layer.weights.output.bias.shape = Shape{9}; },
       {"weights.output.bias", "[8]", "[9]"}},
      {"null query", [](Call& c) { c.inputs.query.data = nullptr; }, {"query", "null"}},
      {"query rank",
       [](Call& c) {
         c.inputs.query.shape = Shape{1, 2, 3, 8};
       },
       {"query", "rank 3", "[1, 2, 3, 8]"}},
      {"query width",
       [](Call& c) {
         c.inputs.query.shape = Shape{2, 4, 6};
       },
       {"query", "last dimension must be 8", "[2, 4, 6]"}},
      {"empty sequence",
       [](Call& c) {
         c.inputs.query.shape = Shape{2, 0, 8};
       },
       {"query", ">= 1", "[2, 0, 8]"}},
      {"query float64",
       [](Call& c) { c.inputs.query.dtype = DType::kInt64; },
       {"query", "float32", "int64"}},
      {"element count overflow",
       [](Call& c) {
         c.inputs.query.shape = Shape{kHuge, kHuge, 8};
       },
       {"query", "overflows"}},
      {"key batch",
       [](Call& c) {
         c.inputs.key.shape = Shape{1, 4, 6};
       },
       {"key/value", "batch size", "[1, 4, 6]"}},
      {"value length",
       [](Call& c) {
         c.inputs.value.shape = Shape{2, 3, 5};
       },
       {"value", "key's 4", "[2, 3, 5]"}},
      {"unbatched key with batched query",
       [](Call& c) {
         c.inputs.key.shape = Shape{4, 6};
       },
       {"key", "rank 3", "[4, 6]"}},
      {"null output",
       [](Call& c) { c.outputs.output.data = nullptr; },
       {"outputs.output", "null"}},
      {"output shape",
       [](Call& c) {
         c.outputs.output.shape = Shape{2, 3, 7};
       },
       {"outputs.output", "[2, 3, 8]", "[2, 3, 7]"}},
      {"averaged weights shape",
       [](Call& c) { c.options.average_attn_weights = true; },
       {"outputs.attn_weights", "[2, 3, 4]", "[2, 2, 3, 4]"}},
      {"negative threads",
       [](Call& c) { c.options.num_threads = -1; },
       {"num_threads", "-1"}},
      {"threads past the limit",  // libgomp ends the process at 40000
       [](Call& c) { c.options.num_threads = 40000; },
       {"num_threads", "[0, 1024]", "40000"}},
      {"threads far past the limit",
       [](Call& c) { c.options.num_threads = 100000; },
       {"num_threads", "100000"}},
      // A zero-size tensor is a shape error, not an absent tensor, whatever its data.
      {"zero-size key",
       [](Call& c) {
         c.inputs.key = TensorView(nullptr, Shape{2, 0, 6});
       },
       {"key", ">= 1", "[2, 0, 6]"}},
      {"zero-size query with a huge dimension",
       [](Call& c) {
         c.inputs.query = TensorView(nullptr, Shape{0, int64_t{1} << 62, 8});
       },
       {"query", ">= 1", "[0, 4611686018427387904, 8]"}},
      {"zero-size attn_mask",
       [](Call& c) {
         c.masks.attn_mask = TensorView(nullptr, DType::kBool, Shape{0, 5});
       },
       {"masks.attn_mask", "[0, 5]"}},
      {"zero-size key_padding_mask",
       [](Call& c) {
         c.masks.key_padding_mask = TensorView(nullptr, DType::kBool, Shape{2, 0});
       },
       {"masks.key_padding_mask", "[2, 4]", "[2, 0]"}},
      {"zero-size key_lengths",
       [](Call& c) {
         c.masks.key_lengths = TensorView(nullptr, DType::kInt64, Shape{0});
       },
       {"masks.key_lengths", "[2]", "[0]"}},
      {"zero-size output bias",
       [](Call& c) { c.layer.weights.output.bias = TensorView(nullptr, Shape{0}); },
       {"weights.output.bias", "[8]", "[0]"}},
      {"null key data with a shape",
       [](Call& c) { c.inputs.key.data = nullptr; },
       {"key", "data is null for shape [2, 4, 6]"}},
      {"attn_mask shape",
       [](Call& c) {
         c.masks.attn_mask = TensorView(c.bool_mask.data(), DType::kBool, Shape{3, 5});
       },
       {"masks.attn_mask", "[3, 4]", "[3, 5]"}},
      {"attn_mask 4-D broadcast",
       [](Call& c) {
         c.masks.attn_mask =
             TensorView(c.bool_mask.data(), DType::kBool, Shape{2, 3, 3, 4});
       },
       {"masks.attn_mask", "does not broadcast", "[2, 3, 3, 4]", "axis 1"}},
      {"attn_mask dtype",
       [](Call& c) {
         c.masks.attn_mask = TensorView(c.int_mask.data(), DType::kInt32, Shape{3, 4});
       },
       {"masks.attn_mask", "bool or float32", "int32"}},
      {"key_padding_mask shape",
       [](Call& c) {
         c.masks.key_padding_mask =
             TensorView(c.bool_mask.data(), DType::kBool, Shape{2, 3});
       },
       {"masks.key_padding_mask", "[2, 4]", "[2, 3]"}},
      {"NaN in a float attn_mask",
       [](Call& c) {
         c.float_mask[1 * 4 + 2] = kNaN;
         c.masks.attn_mask = TensorView(c.float_mask.data(), Shape{3, 4});
       },
       {"masks.attn_mask[1, 2]", "nan", "not a mask value"}},
      {"plus inf in a float attn_mask",
       [](Call& c) {
         c.float_mask[2 * 4 + 3] = std::numeric_limits<float>::infinity();
         c.masks.attn_mask = TensorView(c.float_mask.data(), Shape{3, 4});
       },
       {"masks.attn_mask[2, 3]", "inf"}},
      {"NaN in a float key_padding_mask",
       [](Call& c) {
         c.float_mask[1 * 4 + 0] = kNaN;
         c.masks.key_padding_mask = TensorView(c.float_mask.data(), Shape{2, 4});
       },
       {"masks.key_padding_mask[1, 0]", "nan"}},
      {"NaN in a zero-means-masked mask",
       [](Call& c) {
         std::fill(c.float_mask.begin(), c.float_mask.end(), 1.0f);
         c.float_mask[5] = kNaN;
         c.masks.convention = MaskConvention::kZeroMeansMasked;
         c.masks.key_padding_mask = TensorView(c.float_mask.data(), Shape{2, 4});
       },
       {"masks.key_padding_mask[1, 1]", "nan"}},
      {"key_lengths dtype",
       [](Call& c) { c.masks.key_lengths = TensorView(c.query.data(), Shape{2}); },
       {"masks.key_lengths", "int32 or int64", "float32"}},
      {"key_lengths value",
       [](Call& c) {
         c.int_mask[1] = 5;
         c.masks.key_lengths = TensorView(c.int_mask.data(), DType::kInt32, Shape{2});
       },
       {"masks.key_lengths[1]", "[0, 4]", "got 5"}},
      {"negative key_lengths",
       [](Call& c) {
         c.int_mask[0] = -1;
         c.masks.key_lengths = TensorView(c.int_mask.data(), DType::kInt32, Shape{2});
       },
       {"masks.key_lengths[0]", "got -1"}},
      {"convention",
       [](Call& c) { c.masks.convention = static_cast<MaskConvention>(7); },
       {"masks.convention", "7"}},
      {"strided query",
       [](Call& c) { c.inputs.query = c.inputs.query.WithStrides(24, 8, 0); },
       {"query: must be dense", "got strides [24, 8, 0]"}},
      {"strided output",
       [](Call& c) { c.outputs.output = c.outputs.output.WithStrides(24, 8, 0); },
       {"output: must be dense"}},
  };
}

void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.name; }

class InvalidArgument : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(InvalidArgument, LayerAndBaselineRaiseAndWriteNothing) {
  const ErrorCase& c = GetParam();
  Call call;
  c.mutate(call);
  ExpectError(
      [&] {
        MultiheadAttention(call.layer.config, call.layer.weights)
            .Forward(call.inputs, call.masks, call.outputs, call.options);
      },
      c);
  ExpectError(
      [&] {
        NaiveMultiheadAttention(call.layer.config, call.layer.weights, call.inputs,
                                call.masks, call.outputs, call.options);
      },
      c);
  ExpectUntouched(call, c.name);
}

INSTANTIATE_TEST_SUITE_P(Cases, InvalidArgument, ::testing::ValuesIn(Cases()),
                         [](const auto& info) {
                           std::string name = info.param.name;
                           for (char& ch : name) ch = std::isalnum(ch) ? ch : '_';
                           return name;
                         });

TEST(InvalidArgument, ValidCallSucceeds) {
  Call call;
  MultiheadAttention(call.layer.config, call.layer.weights)
      .Forward(call.inputs, call.masks, call.outputs, call.options);
  EXPECT_NE(call.output[0], Call::kSentinel);
}

TEST(InvalidArgument, PackedInProjectionShape) {
  std::vector<float> w(3 * 8 * 8);
  EXPECT_THROW(FromPackedInProjection(TensorView(w.data(), Shape{8, 8}), {}, {}, {}),
               Error);
  try {
    FromPackedInProjection(TensorView(w.data(), Shape{24, 8}),
                           TensorView(w.data(), Shape{8}), {}, {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("in_proj_bias"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[24]"), std::string::npos) << e.what();
  }
}

TEST(InvalidArgument, PackedInProjectionWidthCannotOverflow) {
  const float w[1] = {0.0f};
  // E so large that 3 * E overflows int64: refused without forming the product.
  const int64_t huge = INT64_MAX / 3 + 1;
  ExpectErrorMentioning(
      [&] {
        FromPackedInProjection(TensorView(w, Shape{3 * (huge - 1), huge}), {}, {}, {});
      },
      "in_proj_weight: expected shape [3 * E, E]");
}

TEST(InvalidArgument, ShapeRank) {
  const int64_t dims[5] = {1, 2, 3, 4, 5};
  EXPECT_THROW(Shape(dims, 5), Error);
}

}  // namespace
}  // namespace mha::testing

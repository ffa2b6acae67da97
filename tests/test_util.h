// Test helpers: random data, owned layers in any weight layout, and the fp32
// tolerance every comparison uses.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "mha/mha.hpp"

namespace mha::testing {

std::vector<float> RandomFloats(size_t count, uint32_t seed, float scale = 1.0f);

// A layer whose weights are owned here and viewed by `weights`.
struct OwnedLayer {
  AttentionConfig config;
  AttentionWeights weights;
  std::vector<float> storage[8];  // q, k, v, out weights; q, k, v, out biases
};

struct LayerSpec {
  int64_t num_heads = 2, head_dim = 4;
  int64_t num_kv_heads = 0;  // 0: num_heads
  int64_t query_dim = 8, key_dim = 0, value_dim = 0;
  WeightLayout layout = WeightLayout::kOutIn;
  bool qkv_bias = true;
  bool output_projection = true;
  WeightLayout output_layout = WeightLayout::kOutIn;
  int64_t output_dim = 0;  // 0: query_dim
  bool output_bias = true;
};

OwnedLayer MakeLayer(const LayerSpec& spec, uint32_t seed);

// The double-precision layer's causal self-attention outputs of x ([tokens,
// query_dim], one sequence): [tokens, output_dim].
std::vector<float> NaiveCausal(const OwnedLayer& layer, const std::vector<float>& x);

// int8 projections (dynamic quantisation), stated in docs/serving.md:
// max |out - ref| <= kInt8Bound * max(1, max |ref|) against the fp32 layer. The worst
// seen over int8_projection_test and every PyTorch fixture was 1.7e-2 (AVX2: 7-bit
// weights).
constexpr double kInt8Bound = 5e-2;

// A layer stored with reduced-precision weights (bf16, int8) against the fp32
// double-precision baseline: self-attention when key_dim is 0, else cross-attention
// with that key/value width.
struct WeightDtypeCase {
  const char* name;
  int64_t num_heads, num_kv_heads, head_dim, query_dim, key_dim, batch, query_len,
      key_len;
  bool causal;
};

inline void PrintTo(const WeightDtypeCase& c, std::ostream* os) { *os << c.name; }

// max |out - ref| <= bound * max(1, max |ref|) for one forward with `weight_dtype`.
void ExpectWeightDtypeWithinBound(const WeightDtypeCase& c, DType weight_dtype,
                                  double bound, uint32_t seed);

// max |actual - expected| <= 1e-4 * max(1, max |expected|), reported with the index.
void ExpectClose(const std::vector<float>& actual, const std::vector<float>& expected,
                 const char* what, double relative = 1e-4);

// c [rows, n] of a tile product against A [rows, depth] (row-major) times B [depth,
// n] (row-major values) in double, within 1e-5 of the products' magnitudes.
void ExpectTileProduct(const std::vector<float>& a, const std::vector<double>& b,
                       const std::vector<float>& c, size_t rows, size_t n, size_t depth);

// The process's peak resident set so far (getrusage), in KiB.
long MaxResidentKiB();

// Expects `run` to throw mha::Error mentioning `part`.
template <class F>
void ExpectErrorMentioning(const F& run, const std::string& part) {
  try {
    run();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace mha::testing

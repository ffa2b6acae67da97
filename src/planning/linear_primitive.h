// LinearPrimitive: one oneDNN matmul y[M, N] = x[M, K] W[K, N] + bias. One primitive
// with a run-time M, created at construction, serves every batch size and length;
// small M (tiny requests, decode steps) get a fixed-shape primitive instead, made on
// first use and kept in the caller's LinearCall, because oneDNN's run-time-M kernel
// costs about 1.9 us per call there against 0.45 us (measured on this machine).
#pragma once

#include <cstdint>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"
#include "src/planning/packed_weights.h"

namespace mha::internal {

struct LinearShape {
  int64_t in_dim = 0;         // K
  int64_t out_dim = 0;        // N
  int64_t weight_stride = 0;  // row stride of W[K, N] (>= N: W may be a column slice)
  int64_t output_stride = 0;  // row stride of y (>= N: y may be a column slice)
};

// One caller's state for one LinearPrimitive: the primitive and memory objects for
// the last few row counts it ran (whole batches, chunks and their tails), so a
// repeated shape only resets data pointers.
struct LinearCall {
  struct Entry {
    int64_t rows = -1;
    dnnl::primitive primitive;
    dnnl::memory input, output, scratchpad;
    dnnl::memory output_scales, scaled_bias;  // int8 weights
  };
  static constexpr int kEntries = 4;
  Entry entries[kEntries];
  int next_victim = 0;               // replaced round-robin
  std::vector<uint16_t> bf16_input;  // the input rounded to bf16, for bf16 weights
  std::vector<float> float_input;    // a bf16 input widened, for fp32 or int8 weights
  // int8 weights: the quantised input, and per output column the dequantisation
  // scale and the bias divided by it (oneDNN scales the bias with the products).
  std::vector<int8_t> int8_input;
  std::vector<float> output_scales, scaled_bias;
};

class LinearPrimitive {
 public:
  // Row counts up to this use a fixed-shape primitive.
  static constexpr int64_t kFixedShapeRows = 64;

  LinearPrimitive() = default;
  // `weights` (of `storage`), their int8 column `scales` and `bias` (float, null:
  // none) must outlive the primitive. With bf16 weights the input is rounded to bf16
  // and the products accumulate in fp32. With int8 weights the input is quantised
  // per call (symmetric, one scale for the whole input, as PyTorch's
  // quantize_dynamic and ONNX Runtime's DynamicQuantizeMatMul do), the products
  // accumulate in int32, and oneDNN dequantises them as it writes the output.
  LinearPrimitive(const dnnl::engine& engine, const LinearShape& shape,
                  const void* weights, const float* bias, WeightStorage storage,
                  const float* scales);

  // Whether oneDNN can multiply bf16 matrices on this CPU (it cannot without AVX-512).
  static bool Bf16Supported(const dnnl::engine& engine);

  // The largest |q| int8 weights may hold here: 127 with VNNI; 63 without, where
  // oneDNN multiplies through vpmaddubsw, whose 16-bit pair sums saturate beyond
  // that (PyTorch's reduce_range does the same).
  static int Int8WeightLevels();

  // Grows `scratchpad` as the primitive needs (oneDNN runs with user-managed
  // scratchpads, so concurrent callers never share one).
  // `input` holds rows x in_dim floats, or bfloat16 bits when input_bf16.
  void Execute(dnnl::stream& stream, const void* input, bool input_bf16, int64_t rows,
               float* output, LinearCall& call, std::vector<uint8_t>& scratchpad) const;

 private:
  // Execute, with oneDNN's out-of-memory errors left untranslated.
  void Run(dnnl::stream& stream, const void* input, bool input_bf16, int64_t rows,
           float* output, LinearCall& call, std::vector<uint8_t>& scratchpad) const;
  dnnl::matmul::primitive_desc Describe(dnnl::memory::dim rows) const;
  LinearCall::Entry& Prepare(LinearCall& call, int64_t rows) const;
  dnnl::memory::data_type InputType() const;
  // The input in the primitive's type: converted, or quantised into `call`.
  const void* PrepareInput(const void* input, bool input_bf16, int64_t rows,
                           LinearCall& call) const;

  LinearShape shape_;
  WeightStorage storage_ = WeightStorage::kFloat32;
  const float* scales_ = nullptr;
  const float* bias_values_ = nullptr;
  dnnl::engine engine_;
  dnnl::matmul runtime_rows_;
  dnnl::memory::desc runtime_scratchpad_;
  dnnl::memory weights_, bias_;
};

}  // namespace mha::internal

// LinearPrimitive: one oneDNN matmul y[M, N] = x[M, K] W[K, N] + bias. One primitive
// with a run-time M, created at construction, serves every batch size and length;
// small M (tiny requests, decode steps) get a fixed-shape primitive instead, made on
// first use and kept in the caller's LinearCall, because oneDNN's run-time-M kernel
// costs about 1.9 us per call there against 0.45 us (measured on this machine).
#pragma once

#include <cstdint>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

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
  };
  static constexpr int kEntries = 4;
  Entry entries[kEntries];
  int next_victim = 0;               // replaced round-robin
  std::vector<uint16_t> bf16_input;  // the input rounded to bf16, for bf16 weights
  std::vector<float> float_input;    // a bf16 input widened, for fp32 weights
};

class LinearPrimitive {
 public:
  // Row counts up to this use a fixed-shape primitive.
  static constexpr int64_t kFixedShapeRows = 64;

  LinearPrimitive() = default;
  // `weights` (float, or bfloat16 bits when `bf16`) and `bias` (float, null: none)
  // must outlive the primitive. With bf16 weights the input is rounded to bf16 and
  // the products accumulate in fp32.
  LinearPrimitive(const dnnl::engine& engine, const LinearShape& shape,
                  const void* weights, const float* bias, bool bf16);

  // Whether oneDNN can multiply bf16 matrices on this CPU (it cannot without AVX-512).
  static bool Bf16Supported(const dnnl::engine& engine);

  // Grows `scratchpad` as the primitive needs (oneDNN runs with user-managed
  // scratchpads, so concurrent callers never share one).
  // `input` holds rows x in_dim floats, or bfloat16 bits when input_bf16.
  void Execute(dnnl::stream& stream, const void* input, bool input_bf16, int64_t rows,
               float* output, LinearCall& call, std::vector<uint8_t>& scratchpad) const;

 private:
  dnnl::matmul::primitive_desc Describe(dnnl::memory::dim rows) const;
  LinearCall::Entry& Prepare(LinearCall& call, int64_t rows) const;
  dnnl::memory::data_type InputType() const {
    return bf16_ ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
  }

  LinearShape shape_;
  bool bf16_ = false;
  dnnl::engine engine_;
  dnnl::matmul runtime_rows_;
  dnnl::memory::desc runtime_scratchpad_;
  dnnl::memory weights_, bias_;
};

}  // namespace mha::internal

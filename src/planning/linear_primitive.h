// LinearPrimitive: one oneDNN matmul y[M, N] = x[M, K] W[K, N] + bias, created once
// with a run-time M so that every batch size and sequence length reuses it.
#pragma once

#include <cstdint>

#include "oneapi/dnnl/dnnl.hpp"

namespace mha::internal {

struct LinearShape {
  int64_t in_dim = 0;         // K
  int64_t out_dim = 0;        // N
  int64_t weight_stride = 0;  // row stride of W[K, N] (>= N: W may be a column slice)
  int64_t output_stride = 0;  // row stride of y (>= N: y may be a column slice)
};

class LinearPrimitive {
 public:
  LinearPrimitive() = default;
  // `weights` and `bias` (null: none) must outlive the primitive.
  LinearPrimitive(const dnnl::engine& engine, const LinearShape& shape,
                  const float* weights, const float* bias);

  // Bytes of scratchpad Execute needs; callers own it so concurrent calls never share.
  size_t scratchpad_bytes() const { return scratchpad_bytes_; }

  void Execute(dnnl::stream& stream, const float* input, int64_t rows, float* output,
               void* scratchpad) const;

 private:
  LinearShape shape_;
  dnnl::engine engine_;
  dnnl::matmul primitive_;
  dnnl::memory weights_, bias_;
  size_t scratchpad_bytes_ = 0;
  dnnl::memory::desc scratchpad_desc_;
};

}  // namespace mha::internal

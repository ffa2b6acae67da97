// A cached step's and a packed step's C arguments as the C++ calls take them, read
// once for every layer kind (MultiheadAttention and MultiheadLatentAttention).
#pragma once

#include <cstdint>

#include "mha/mha.h"
#include "mha/mha.hpp"

namespace mha::capi {

struct CachedCall {
  mha_cache_forward_args args;  // this release's fields, zeros after them
  mha::TensorView query, new_lengths;
  mha::ForwardOptions options;
  mha::Shape output_shape(int64_t output_dim) const {
    return mha::Shape{args.batch, args.new_tokens, output_dim};
  }
};
// input_dim: the layer's query (or hidden) width.
CachedCall ReadCachedCall(const mha_cache_forward_args* versioned, int64_t input_dim);

struct PackedCall {
  mha_packed_forward_args args;
  mha::TensorView query;
  mha::PackedBatch batch;
  mha::ForwardOptions options;
  mha::Shape output_shape(int64_t output_dim) const {
    return mha::Shape{args.num_tokens, output_dim};
  }
};
PackedCall ReadPackedCall(const mha_packed_forward_args* versioned, int64_t input_dim);

}  // namespace mha::capi

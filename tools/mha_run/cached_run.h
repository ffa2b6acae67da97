// mha-run's cached runs (--cache contiguous|paged, and --latent): a layer's tokens as a
// server runs them, the first S - decode_steps in one step, then one token per step,
// through a contiguous KvCache or a PagedKvCache (packed steps).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mha/mha.hpp"

namespace mha::cli {

struct CachedRun {
  bool paged = false;
  int64_t decode_steps = 0;
  int64_t block_size = 16;  // paged
  DType storage = DType::kFloat32;
  ForwardOptions options;  // num_threads, batch_invariant
};

// input [B, S, width] (float32): causal self-attention of each sequence through the
// cache; returns the output [B, S, output width].
std::vector<float> RunCached(const MultiheadAttention& layer, const CachedRun& run,
                             const TensorView& input);
std::vector<float> RunCached(const MultiheadLatentAttention& layer, const CachedRun& run,
                             const TensorView& input);

}  // namespace mha::cli

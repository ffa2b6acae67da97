// Helpers for paged-cache tests: one continuous-batching step (AppendSlots, then a
// packed ForwardPacked over the chunks of several sequences) and the expected
// outputs of a sequence, from one causal Forward over all its tokens.
#pragma once

#include <utility>
#include <vector>

#include "tests/test_util.h"

namespace mha::testing {

// New tokens of one sequence: rows of embed floats; parents: a token tree
// (PackedBatch::tree_parents; empty: a chain).
struct Chunk {
  int64_t sequence;
  std::vector<float> tokens;
  std::vector<int64_t> parents = {};
};

// AppendSlots for every chunk (layer 0 only: the slots serve every layer), then
// PackedForward.
std::vector<std::vector<float>> AppendAndForward(const MultiheadAttention& attention,
                                                 PagedKvCache& cache,
                                                 const std::vector<Chunk>& chunks,
                                                 int64_t layer = 0,
                                                 const ForwardOptions& options = {});

// Attends every chunk in one packed call, into slots already appended; returns each
// chunk's output.
std::vector<std::vector<float>> PackedForward(const MultiheadAttention& attention,
                                              PagedKvCache& cache,
                                              const std::vector<Chunk>& chunks,
                                              int64_t layer = 0,
                                              const ForwardOptions& options = {});

// One causal Forward over `tokens` ([length, embed]).
std::vector<float> CausalForward(const MultiheadAttention& attention,
                                 const std::vector<float>& tokens);

}  // namespace mha::testing

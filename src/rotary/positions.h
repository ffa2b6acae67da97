// Rotary positions of a call's tokens: caller-given position ids ([B, S] int32 or
// int64) or each sequence's offset + i, checked against the table and widened to
// int64 once per call.
#pragma once

#include <cstdint>

#include "mha/rotary.hpp"
#include "mha/tensor.hpp"

namespace mha::internal {

// Writes positions[b * length + i] for b < batch, i < length: position_ids[b, i]
// when present (shape [batch, length], or [length] when !batched), else
// offsets[b] + i (offsets null: i). Fails naming `name` when a position lies outside
// [0, rotary.max_positions()).
void ResolvePositions(const char* name, const TensorView& position_ids, int64_t batch,
                      int64_t length, bool batched, const int64_t* offsets,
                      const RotaryEmbedding& rotary, int64_t* positions);

}  // namespace mha::internal

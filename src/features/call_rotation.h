// A call's rotary rows, resolved in one place for the layer's forwards, its packed
// steps (which place tokens by slot or tree depth first), the attention-core API and
// the reference: ResolvePositions checks caller-given position ids or places tokens
// at offset + i; CallRotation then makes the rows index the layer's table, or under
// dynamic scaling (transformers' dynamic_rope_update) a table made for this call, one
// row per token at its sequence's length.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "mha/rotary.hpp"
#include "mha/tensor.hpp"

namespace mha::internal {

// What a call's rows are rotated by: table row positions[r] for token row r.
struct RotaryRows {
  const int64_t* positions = nullptr;  // null: no rotary embeddings
  const RotaryEmbedding* table = nullptr;
};

// Writes positions[b * length + i] for b < batch, i < length: position_ids[b, i]
// when present (shape [batch, length], or [length] when !batched), else
// offsets[b] + i (offsets null: i). Fails naming `name` when a position lies outside
// [0, rotary.max_positions()).
void ResolvePositions(const char* name, const TensorView& position_ids, int64_t batch,
                      int64_t length, bool batched, const int64_t* offsets,
                      const RotaryEmbedding& rotary, int64_t* positions);

class CallRotation {
 public:
  // Token rows [0, rows) of `positions`, sequence s owning rows [starts[s],
  // starts[s + 1]), the first counts[s] of them real (counts null: all). Dynamic
  // tables: the call's table and row indices (held here), each sequence at length
  // lengths[s] (null: its real rows' largest position + 1). Otherwise
  // {positions, &rotary}.
  RotaryRows Resolve(const RotaryEmbedding& rotary, const int64_t* positions,
                     int64_t rows, const int64_t* starts, const int64_t* counts,
                     int64_t sequences, const int64_t* lengths = nullptr);
  size_t bytes() const {
    return (row_lengths_.capacity() + row_indices_.capacity()) * sizeof(int64_t);
  }

 private:
  std::vector<int64_t> row_lengths_, row_indices_;
  std::optional<RotaryEmbedding> table_;
};

}  // namespace mha::internal

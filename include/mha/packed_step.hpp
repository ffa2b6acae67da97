// PackedStep: one continuous-batching step over a PagedKvCache, checked and planned
// once for every layer (FlashInfer's plan, then run per layer).
#pragma once

#include <cstdint>
#include <memory>

#include "mha/tensor.hpp"

namespace mha {

class MultiheadAttention;
class MultiheadLatentAttention;
class PagedKvCache;
struct ForwardOptions;

// The new tokens of N sequences of a PagedKvCache, packed without padding: sequence
// i (cache id sequence_ids[i]) owns rows query_start_loc[i] .. query_start_loc[i+1]
// - 1 (cu_seqlens; query_start_loc[0] = 0, query_start_loc[N] = T). Both int32 or
// int64, shapes [N] and [N + 1].
//
// Token trees (speculative decoding): tree_parents ([T] int32/int64, optional) gives
// each new token's parent as an index among its sequence's new tokens, smaller than
// its own, or -1 for a token that follows the cached ones directly (a chain is -1,
// 0, 1, ...). A new token then sees the cached tokens, its ancestors and itself, at
// rotary position cache length + depth (depth 0 for parent -1). Layers with sliding
// windows, attention chunks, ALiBi or query temperature refuse trees (they place a
// token by its slot). PagedKvCache::KeepTokens then keeps the accepted path.
struct PackedBatch {
  TensorView sequence_ids;
  TensorView query_start_loc;
  TensorView tree_parents = {};  // a default: {ids, starts} stays a full initializer
};

// A step: after the step's cache.AppendSlots, Plan checks the batch against the
// cache and resolves each new token's position and token tree, once; every layer's
// ForwardPacked(query, step, layer, output) then only projects, writes its pages and
// attends, the first layer of each form (heads, window, chunk) making the mask and
// task plans the others reuse. options: num_threads, batch_invariant and
// position_ids ([T] int32/int64: rotary positions overriding cache length + slot)
// hold for the whole step; kv_shared is each layer's (PackedLayerOptions).
// Keep one PackedStep and plan it each step: its memory is reused. A plan holds
// while its sequences are unchanged: a layer call fails once AppendSlots, Fork,
// Truncate, KeepTokens or RemoveSequence touched one of them. The cache must outlive
// the layer calls on a step planned over it. One thread at a time
// plans a step; layers may run it from several threads.
class PackedStep {
 public:
  PackedStep();
  ~PackedStep();
  PackedStep(PackedStep&&) noexcept;
  PackedStep& operator=(PackedStep&&) noexcept;

  // Throws mha::Error naming the argument, leaving the step (and its plan) as it was.
  void Plan(PagedKvCache& cache, const PackedBatch& batch, const ForwardOptions& options);
  void Plan(PagedKvCache& cache, const PackedBatch& batch);

  bool planned() const;
  int64_t tokens() const;  // T: the rows every layer's query and output have

  struct Impl;  // opaque: defined inside the library
  Impl& impl() { return *impl_; }
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// One layer's part of a planned step. kv_shared: as ForwardOptions::kv_shared.
struct PackedLayerOptions {
  bool kv_shared = false;
};

}  // namespace mha

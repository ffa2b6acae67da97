// Workspace: every buffer and oneDNN object one Forward call needs, kept between
// calls so that a shape seen before allocates nothing. A pool hands each concurrent
// call its own workspace.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"
#include "src/core/attention_core.h"
#include "src/projection/linear_primitive.h"

namespace mha::internal {

struct Workspace {
  // Grows `buffer` to at least `count` elements (never shrinks) and returns it.
  template <class T>
  static T* Reserve(std::vector<T>& buffer, size_t count) {
    if (buffer.size() < count) buffer.resize(count);
    return buffer.data();
  }

  size_t bytes() const;

  LinearThreads linear_threads;  // the projections' streams and scratch
  // How this call cuts its projections (ForwardOptions::batch_invariant).
  TileRule tile_rule = TileRule::kByRows;
  std::vector<float> projections, merged_heads, per_head_weights, chunks, staged_output;
  std::vector<int64_t> positions, new_lengths;    // per sequence, when decoding
  std::vector<int64_t> batch_rows, sequence_ids;  // per sequence, packed batches
  std::vector<int64_t> rotary_positions;          // per query token, [B, Sq]
  // Dynamic rotary scaling: each row's sequence length and the call's own table.
  std::vector<int64_t> rotary_lengths, rotary_starts;
  // Token trees: each packed row's depth, depth-first place and subtree end
  // (masks/mask_plan.h).
  std::vector<int64_t> tree_depths, tree_intervals;
  std::optional<RotaryEmbedding> call_rotary;
  CoreWorkspace core;  // the attention core's buffers
  // One per LinearPrimitive of the layer: query, key, value, fused QKV, output.
  LinearCall calls[5];
};

class WorkspacePool {
 public:
  // Returns a workspace to the pool when destroyed.
  class Lease {
   public:
    Lease(WorkspacePool& pool, std::unique_ptr<Workspace> workspace)
        : pool_(pool), workspace_(std::move(workspace)) {}
    ~Lease() { pool_.Release(std::move(workspace_)); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Workspace& operator*() const { return *workspace_; }
    Workspace* operator->() const { return workspace_.get(); }

   private:
    WorkspacePool& pool_;
    std::unique_ptr<Workspace> workspace_;
  };

  Lease Acquire();
  size_t idle_bytes();  // total of the workspaces not leased now

 private:
  void Release(std::unique_ptr<Workspace> workspace);

  std::mutex mutex_;
  // Room for every workspace ever made, reserved when each is made, so that Release
  // (from a Lease's destructor, perhaps while an exception unwinds) never allocates.
  std::vector<std::unique_ptr<Workspace>> free_;
  size_t created_ = 0;
};

}  // namespace mha::internal

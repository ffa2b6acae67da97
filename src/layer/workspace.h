// Workspace: every buffer and oneDNN object one Forward call needs, kept between
// calls so that a shape seen before allocates nothing. A pool hands each concurrent
// call its own workspace (Pool: a layer's pool of its workspace type).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "mha/packed_step.hpp"
#include "oneapi/dnnl/dnnl.hpp"
#include "src/core/attention_core.h"
#include "src/features/call_rotation.h"
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

  // The oneDNN state of the layer's primitive `index` (each layer kind numbers its
  // own), made on first use.
  LinearCall& Call(size_t index) {
    if (calls.size() <= index) calls.resize(index + 1);
    return calls[index];
  }
  // Buffer `index` of a layer kind's own (each numbers its own), grown to `count`.
  float* Buffer(size_t index, size_t count) {
    if (buffers.size() <= index) buffers.resize(index + 1);
    return Reserve(buffers[index], count);
  }

  LinearThreads linear_threads;             // the projections' streams and scratch
  std::vector<std::vector<float>> buffers;  // see Buffer
  std::vector<float> per_head_weights, staged_output;
  std::vector<int64_t> positions, new_lengths;  // per sequence, when decoding
  std::vector<int64_t> rotary_positions;        // per query token, [B, Sq]
  std::vector<int64_t> rotary_starts;           // per sequence, + 1
  CallRotation rotation;                        // dynamic rotary scaling's table
  PackedStep step;     // ForwardPacked's with a batch: a step planned for one layer
  CoreWorkspace core;  // the attention core's buffers
  std::vector<LinearCall> calls;  // see Call
};

// A pool of W (a layer's workspaces): a mutex-guarded
// free list; a new one only when all are busy. A workspace holds buffers only: what
// a call decides (its options, its plan) lives in the call or its step.
template <class W>
class Pool {
 public:
  // Returns a workspace to the pool when destroyed.
  class Lease {
   public:
    Lease(Pool& pool, std::unique_ptr<W> workspace)
        : pool_(pool), workspace_(std::move(workspace)) {}
    ~Lease() { pool_.Release(std::move(workspace_)); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    W& operator*() const { return *workspace_; }
    W* operator->() const { return workspace_.get(); }

   private:
    Pool& pool_;
    std::unique_ptr<W> workspace_;
  };

  Lease Acquire() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!free_.empty()) {
        std::unique_ptr<W> workspace = std::move(free_.back());
        free_.pop_back();
        return Lease(*this, std::move(workspace));
      }
    }
    std::unique_ptr<W> workspace = std::make_unique<W>();
    const std::lock_guard<std::mutex> lock(mutex_);
    free_.reserve(created_ + 1);  // may throw: nothing is leased yet
    ++created_;
    return Lease(*this, std::move(workspace));
  }
  size_t idle_bytes() {  // total of the workspaces not leased now
    const std::lock_guard<std::mutex> lock(mutex_);
    size_t total = 0;
    for (const auto& workspace : free_) total += workspace->bytes();
    return total;
  }

 private:
  void Release(std::unique_ptr<W> workspace) {
    const std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(std::move(workspace));  // within the capacity Acquire reserved
  }

  std::mutex mutex_;
  // Room for every workspace ever made, reserved when each is made, so that Release
  // (from a Lease's destructor, perhaps while an exception unwinds) never allocates.
  std::vector<std::unique_ptr<W>> free_;
  size_t created_ = 0;
};

using WorkspacePool = Pool<Workspace>;

}  // namespace mha::internal

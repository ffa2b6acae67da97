// internal::Layer: the one pipeline behind every attention layer's forwards,
// check -> project -> write pages -> attention core -> output projection (RunQueries,
// pipeline.cc), and the flows built on it: over a contiguous KvCache
// (cached_forward.cc) and over a planned PackedStep (packed_forward.cc). A layer kind
// subclasses it and gives its projection strategy through the hooks below
// (MultiheadAttention: fused QKV, or queries apart from keys and values;
// MultiheadLatentAttention: q LoRA and kv_a, absorbed or expanded); it never copies a
// flow. A kind with several forms names the one a call runs by an index (ChooseForm).
#pragma once

#include <cstdint>
#include <optional>

#include "mha/attention.hpp"
#include "src/cache/kv_cache_storage.h"
#include "src/core/attention_core.h"
#include "src/core/write_kv_pages.h"
#include "src/features/call_rotation.h"
#include "src/features/mask_plan.h"
#include "src/layer/packed_step.h"
#include "src/layer/workspace.h"
#include "src/projection/linear_primitive.h"
#include "src/validation/problem.h"

namespace mha::internal {

class Layer {
 public:
  // Query rows [first_row, first_row + rows) of `input` through the pipeline;
  // sequence b's start at b * rows_per_batch (0: the call's one sequence), or
  // (packed) batch_rows[b].
  struct QueryPass {
    TileRule tile_rule;  // how the call cuts its projections
    const TensorView* input = nullptr;
    int64_t first_row = 0, rows = 0, rows_per_batch = 0;
    const int64_t* batch_rows = nullptr;
    // Where the rows' own keys and values are written (their rows are set from the
    // projection). Null: the pages hold them already.
    const KvWrite* kv = nullptr;
    float* output = nullptr;  // rows of output_dim floats
    bool padded = false;      // rows past params.query_counts[b] are padding: zeros
    const TaskPlan* plan = nullptr;  // a step's (null: planned here)
    int form = 0;                    // which of the layer's forms runs
  };
  // A projection of a pass's rows: [rows, stride] floats. query: the heads the core
  // reads; key and value: the rows written into the pages (null when not asked).
  struct Projected {
    const float* query = nullptr;
    int64_t query_stride = 0;
    const float* key = nullptr;
    const float* value = nullptr;
    int64_t kv_stride = 0;
  };

  Layer(int64_t input_dim, int64_t output_dim, const char* input_name)
      : input_dim(input_dim), output_dim(output_dim), input_name(input_name) {}
  virtual ~Layer() = default;

  // Appends new_lengths[b] (absent: all) of input's [B, S, input_dim] rows to each
  // of the first B sequences of `cache` (kv_shared: reads the last ones another
  // layer appended) and attends causally over each sequence. Returns the form run.
  int ForwardWithCache(const TensorView& input, const TensorView& new_lengths,
                       KvCache::Impl& cache, const MutableTensorView& output,
                       const ForwardOptions& options) const;
  // A continuous-batching step: planned here for this layer alone, or planned once.
  void ForwardPacked(const TensorView& input, const PackedBatch& batch,
                     PagedKvCache::Impl& cache, int64_t layer,
                     const MutableTensorView& output,
                     const ForwardOptions& options) const;
  void ForwardPacked(const TensorView& input, const PackedStep::Impl& step, int64_t layer,
                     const MutableTensorView& output, bool kv_shared,
                     Workspace& workspace) const;
  void RunQueries(const QueryPass& pass, AttentionParams params, const MaskPlan& masks,
                  Workspace& workspace) const;

  // The core's params for `problem` in `form`, its rows rotated by rotary_rows.
  AttentionParams BaseParams(const Problem& problem, const RotaryRows& rotary_rows,
                             TileRule tile_rule, int form) const;
  // Rotary rows of the query tokens ([B, Sq], in workspace.rotary_positions): at
  // offsets[b] + i by default (offsets null: i). counts: the real rows of each
  // sequence (null: all), whose positions set a dynamic table's lengths.
  RotaryRows RotaryPositions(const Problem& problem, const TensorView& position_ids,
                             const int64_t* offsets, const int64_t* counts,
                             Workspace& workspace) const;
  // bf16 outputs are computed in fp32 (in the workspace) and rounded at the end.
  MutableTensorView StageOutput(const MutableTensorView& output,
                                Workspace& workspace) const;
  void FinishOutput(const MutableTensorView& staged,
                    const MutableTensorView& output) const;
  // Projects `rows` rows with `linear` (its oneDNN state workspace.Call(call)): of
  // fp32 `input`, or rows [first_row, first_row + rows) of a caller's fp32 or bf16.
  static void RunLinear(const LinearPrimitive& linear, size_t call, const float* input,
                        int64_t rows, float* output, TileRule tile_rule,
                        Workspace& workspace);
  static void RunLinear(const LinearPrimitive& linear, size_t call,
                        const TensorView& input, int64_t first_row, int64_t rows,
                        float* output, TileRule tile_rule, Workspace& workspace);

  // The hooks of a layer kind.
  // Checks a cached call's input, output and options; batch_size and query_len set.
  virtual Problem CheckInput(const TensorView& input, const MutableTensorView& output,
                             const ForwardOptions& options) const = 0;
  // Fails unless a cache of this block layout suits the layer.
  virtual void CheckCacheLayout(const BlockLayout& layout) const = 0;
  // The form a call whose sequences start at first_positions runs.
  virtual int ChooseForm(const int64_t* /*first_positions*/,
                         int64_t /*sequences*/) const {
    return 0;
  }
  // options.num_threads, or what the call's size suggests.
  virtual int ThreadsFor(const Problem& /*problem*/, int num_threads) const {
    return num_threads;
  }
  // How a call cuts the projections (ForwardOptions::batch_invariant).
  virtual TileRule TileRuleFor(bool batch_invariant) const {
    return batch_invariant ? TileRule::kBatchInvariant : TileRule::kByRows;
  }
  // The core's head sizes, scale and logit features in `form`.
  virtual void SetCoreParams(AttentionParams& params, int form) const = 0;
  // How the layer's keys and values are written: heads, widths, norms, rotation.
  virtual KvWrite KvWriteFor(const RotaryRows& rotary_rows,
                             int64_t positions_per_sequence) const = 0;
  // Projects a pass's rows (keys and values too when pass.kv); a form may point
  // params at pages of its own.
  virtual Projected Project(const QueryPass& pass, AttentionParams& params,
                            Workspace& workspace) const = 0;
  // Where the core writes the pass's context (zeros first when pass.padded).
  virtual HeadRows<float> ContextRows(const QueryPass& pass,
                                      Workspace& workspace) const = 0;
  // The context into pass.output.
  virtual void ProjectOutput(const float* context, const QueryPass& pass,
                             Workspace& workspace) const = 0;

  int64_t input_dim, output_dim;
  const char* input_name;
  AttentionFeatures features;             // the masks' and logits' options
  std::optional<RotaryEmbedding> rotary;  // rotates the written keys and the queries
  mutable WorkspacePool workspaces;

 private:
  Problem CheckCacheCall(const TensorView& input, const TensorView& new_lengths,
                         const KvCache::Impl& cache, const MutableTensorView& output,
                         const ForwardOptions& options, Workspace& workspace) const;
  void CheckPackedInput(const TensorView& input) const;
  void CheckPackedLayer(const TensorView& input, const PackedStep::Impl& step,
                        int64_t layer, const MutableTensorView& output) const;
};

}  // namespace mha::internal

// Layer::ForwardPacked: one continuous-batching step over a paged KV cache. The
// packed tokens of every sequence are projected at once (no padding rows), their keys
// and values written into the cache's blocks, and the attention core attends each
// sequence's queries over its blocks in place (a kv_shared layer projects queries
// only, over blocks another layer wrote). A step is planned once for every layer
// (PackedStep), or here for one.
#include <algorithm>

#include "src/base/check.h"
#include "src/base/parallel_for.h"
#include "src/cache/paged_kv_cache_storage.h"
#include "src/layer/layer.h"
#include "src/layer/packed_step.h"

namespace mha::internal {

void Layer::CheckPackedInput(const TensorView& input) const {
  if (input.shape.rank() != 2 || input.shape[1] != input_dim) {
    Fail(input_name, ": expected shape [T, ", input_dim, "], got ",
         input.shape.ToString());
  }
  if (input.dtype != DType::kFloat32 && input.dtype != DType::kBFloat16) {
    Fail(input_name, ": expected dtype float32 or bfloat16, got ",
         DTypeName(input.dtype));
  }
  CheckTensor(input_name, input, input.dtype, input.shape);
}

// The layer's own checks of a planned step: the cache fits the layer, the input and
// output have the step's rows, trees and positions suit the layer.
void Layer::CheckPackedLayer(const TensorView& input, const PackedStep::Impl& step,
                             int64_t layer, const MutableTensorView& output) const {
  step.CheckCurrent(layer);
  const PagedKvCache::Impl& cache = *step.cache;
  CheckCacheLayout(cache.layout);
  const int64_t window = features.sliding_window.value_or(0);
  if (cache.options.sliding_window > 0 &&
      (window <= 0 || window > cache.options.sliding_window)) {
    Fail("cache: keeps a sliding window of ", cache.options.sliding_window,
         " tokens, this layer's sliding_window is ", window,
         " (must be in [1, the cache's])");
  }
  const int64_t chunk = features.attention_chunk_size.value_or(0);
  if (cache.options.attention_chunk_size > 0 &&
      (chunk <= 0 || cache.options.attention_chunk_size % chunk != 0)) {
    Fail("cache: keeps attention chunks of ", cache.options.attention_chunk_size,
         " tokens, this layer's attention_chunk_size is ", chunk,
         " (must be > 0 and divide the cache's)");
  }
  CheckPackedInput(input);
  const int64_t tokens = step.rows.tokens;
  if (input.shape[0] != tokens) {
    Fail(input_name, ": expected shape [T=", tokens, ", ", input_dim,
         "] (the step's packed rows), got ", input.shape.ToString());
  }
  CheckOutput("output", output, Shape{tokens, output_dim}, /*bf16_allowed=*/true);
  if (step.rows.has_tree && (features.sliding_window || features.attention_chunk_size ||
                             features.alibi || features.temperature_tuning)) {
    Fail(
        "batch.tree_parents: token trees place tokens by depth, and this layer's "
        "sliding window, attention chunk, ALiBi or query temperature by slot");
  }
  if (!rotary && step.rows.has_position_ids) {
    Fail("options.position_ids: given to a layer without rotary embeddings");
  }
  if (rotary && step.rows.max_position >= rotary->max_positions()) {
    Fail("rotary positions: must be in [0, ", rotary->max_positions(), "), got ",
         step.rows.max_position);
  }
}

void Layer::ForwardPacked(const TensorView& input, const PackedBatch& batch,
                          PagedKvCache::Impl& cache, int64_t layer,
                          const MutableTensorView& output,
                          const ForwardOptions& options) const {
  const WorkspacePool::Lease workspace = workspaces.Acquire();
  CheckPackedInput(input);
  PackedStep::Impl& step = workspace->step.impl();
  ForwardOptions step_options = options;
  step_options.kv_shared = false;  // the layer's, not the step's
  step.Plan(cache, batch, step_options, input.shape[0]);
  ForwardPacked(input, step, layer, output, options.kv_shared, *workspace);
}

void Layer::ForwardPacked(const TensorView& input, const PackedStep::Impl& step,
                          int64_t layer, const MutableTensorView& output, bool kv_shared,
                          Workspace& workspace) const {
  CheckPackedLayer(input, step, layer, output);
  const TileRule tile_rule = TileRuleFor(step.batch_invariant);
  const PackedStep::Impl::Rows& rows = step.rows;
  const RotaryRows rotary_rows =
      rotary ? workspace.rotation.Resolve(*rotary, rows.positions.data(), rows.tokens,
                                          rows.rows.data(), nullptr, rows.sequences)
             : RotaryRows{};
  const MutableTensorView staged = StageOutput(output, workspace);
  if (rows.tokens == 0) return;
  // Everything is checked: from here on the cache and output are written.
  Problem sizes;
  sizes.batch_size = 1;  // the thread heuristic sees T rows against the longest keys
  sizes.query_len = rows.tokens;
  sizes.key_len = rows.key_len;
  const ScopedThreadCount thread_count(ThreadsFor(sizes, step.num_threads));
  Problem problem;
  problem.batch_size = rows.sequences;
  problem.query_len = rows.query_len;
  problem.key_len = rows.key_len;
  const PackedStep::Impl::LayerPages pages{&step, layer};
  KvWrite write = KvWriteFor(rotary_rows, 0);
  write.batch_end = rows.sequences;
  write.counts = rows.counts.data();
  write.first_positions = rows.first_positions.data();
  write.pages = pages;
  AttentionParams params = BaseParams(problem, rotary_rows, tile_rule, /*form=*/0);
  params.pages = pages;
  params.page_size = step.cache->options.block_size;
  params.query_counts = rows.counts.data();
  const PackedStep::Impl::FormPlan& plan = step.PlanFor(params, features);
  RunQueries({tile_rule, &input, 0, rows.tokens, 0, rows.rows.data(),
              kv_shared ? nullptr : &write, staged.floats(), false, &plan.tasks},
             params, plan.masks, workspace);
  FinishOutput(staged, output);
}

}  // namespace mha::internal

// MultiheadAttention::ForwardPacked: one continuous-batching step over a paged KV
// cache. The packed tokens of every sequence are projected by one fused QKV GEMM
// (no padding rows), their keys and values written into the cache's blocks, and the
// attention core attends each sequence's queries over its blocks in place (a
// kv_shared layer projects queries only, over blocks another layer wrote).
#include <algorithm>

#include "src/attention/layer_impl.h"
#include "src/attention/packed_step.h"
#include "src/base/check.h"
#include "src/cache/paged_kv_cache_storage.h"
#include "src/threading/parallel_for.h"

namespace mha {

using internal::AttentionParams;
using internal::Fail;
using internal::Problem;
using internal::Workspace;

void MultiheadAttention::Impl::CheckCacheShape(int64_t num_kv_heads, int64_t head_dim,
                                               bool latent) const {
  if (latent) {
    Fail(
        "cache: made for multi-head latent attention layers (latents, no keys and "
        "values of their own)");
  }
  if (!packed.qkv_fused()) {
    Fail(
        "a KV cache needs a self-attention layer (key_dim = value_dim = query_dim), "
        "got query_dim=",
        config.query_dim, " key_dim=", config.resolved_key_dim(),
        " value_dim=", config.resolved_value_dim());
  }
  if (num_kv_heads != config.resolved_num_kv_heads() || head_dim != config.head_dim) {
    Fail("cache: made for num_kv_heads=", num_kv_heads, " head_dim=", head_dim,
         ", this layer has num_kv_heads=", config.resolved_num_kv_heads(),
         " head_dim=", config.head_dim);
  }
}

// The layer's own checks of a planned step: the cache fits the layer, the query
// and output have the step's rows, trees and positions suit the layer.
void MultiheadAttention::Impl::CheckPackedLayer(const TensorView& query,
                                                const PackedStep::Impl& step,
                                                int64_t layer,
                                                const MutableTensorView& output) const {
  step.CheckCurrent(layer);
  const PagedKvCache::Impl& cache = *step.cache;
  CheckCacheShape(cache.num_kv_heads, cache.head_dim, cache.latent);
  const AttentionFeatures& f = config.features;
  const int64_t window = f.sliding_window.value_or(0);
  if (cache.options.sliding_window > 0 &&
      (window <= 0 || window > cache.options.sliding_window)) {
    Fail("cache: keeps a sliding window of ", cache.options.sliding_window,
         " tokens, this layer's sliding_window is ", window,
         " (must be in [1, the cache's])");
  }
  const int64_t chunk = f.attention_chunk_size.value_or(0);
  if (cache.options.attention_chunk_size > 0 &&
      (chunk <= 0 || cache.options.attention_chunk_size % chunk != 0)) {
    Fail("cache: keeps attention chunks of ", cache.options.attention_chunk_size,
         " tokens, this layer's attention_chunk_size is ", chunk,
         " (must be > 0 and divide the cache's)");
  }
  CheckPackedQuery(query);
  const int64_t tokens = step.rows.tokens;
  if (query.shape[0] != tokens) {
    Fail("query: expected shape [T=", tokens, ", ", config.query_dim,
         "] (the step's packed rows), got ", query.shape.ToString());
  }
  internal::CheckOutput("output", output, Shape{tokens, output_dim},
                        /*bf16_allowed=*/true);
  if (step.rows.has_tree &&
      (f.sliding_window || f.attention_chunk_size || f.alibi || f.temperature_tuning)) {
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

void MultiheadAttention::Impl::CheckPackedQuery(const TensorView& query) const {
  if (query.shape.rank() != 2 || query.shape[1] != config.query_dim) {
    Fail("query: expected shape [T, ", config.query_dim, "], got ",
         query.shape.ToString());
  }
  if (query.dtype != DType::kFloat32 && query.dtype != DType::kBFloat16) {
    Fail("query: expected dtype float32 or bfloat16, got ", DTypeName(query.dtype));
  }
  internal::CheckTensor("query", query, query.dtype, query.shape);
}

// The step's positions (dynamic scaling: the layer's own table for them).
internal::RotaryRows MultiheadAttention::Impl::PackedRotaryRows(
    const PackedStep::Impl& step, Workspace& workspace) const {
  if (!rotary) return {};
  const PackedStep::Impl::Rows& rows = step.rows;
  return workspace.rotation.Resolve(*rotary, rows.positions.data(), rows.tokens,
                                    rows.rows.data(), nullptr, rows.sequences);
}

void MultiheadAttention::Impl::ForwardPacked(const TensorView& query,
                                             const PackedBatch& batch,
                                             PagedKvCache::Impl& cache, int64_t layer,
                                             const MutableTensorView& output,
                                             const ForwardOptions& options) const {
  const internal::WorkspacePool::Lease workspace = workspaces.Acquire();
  CheckPackedQuery(query);
  PackedStep::Impl& step = *workspace->step.impl_;
  ForwardOptions step_options = options;
  step_options.kv_shared = false;  // the layer's, not the step's
  step.Plan(cache, batch, step_options, query.shape[0]);
  ForwardPacked(query, step, layer, output, options.kv_shared, *workspace);
}

void MultiheadAttention::Impl::ForwardPacked(const TensorView& query,
                                             const PackedStep::Impl& step, int64_t layer,
                                             const MutableTensorView& output,
                                             bool kv_shared, Workspace& workspace) const {
  CheckPackedLayer(query, step, layer, output);
  const internal::TileRule tile_rule = TileRuleFor(step.batch_invariant);
  const internal::RotaryRows rotary_rows = PackedRotaryRows(step, workspace);
  const MutableTensorView staged = StageOutput(output, workspace);
  const PackedStep::Impl::Rows& rows = step.rows;
  if (rows.tokens == 0) return;
  // Everything is checked: from here on the cache and output are written.
  Problem sizes;
  sizes.batch_size = 1;  // the thread heuristic sees T rows against the longest keys
  sizes.query_len = rows.tokens;
  sizes.key_len = rows.key_len;
  const internal::ScopedThreadCount thread_count(ThreadsFor(sizes, step.num_threads));
  Problem problem;
  problem.batch_size = rows.sequences;
  problem.query_len = rows.query_len;
  problem.key_len = rows.key_len;
  const PackedStep::Impl::LayerPages pages{&step, layer};
  internal::KvWrite write = LayerKvWrite(rotary_rows, 0);
  write.batch_end = rows.sequences;
  write.counts = rows.counts.data();
  write.first_positions = rows.first_positions.data();
  write.pages = pages;
  AttentionParams params = BaseParams(problem, rotary_rows, tile_rule);
  params.pages = pages;
  params.page_size = step.cache->options.block_size;
  params.query_counts = rows.counts.data();
  const PackedStep::Impl::FormPlan& plan = step.PlanFor(params, config.features);
  RunQueries({tile_rule, &query, 0, rows.tokens, 0, rows.rows.data(),
              kv_shared ? nullptr : &write, staged.floats(), false, &plan.tasks},
             params, plan.masks, workspace);
  FinishOutput(staged, output);
}

void MultiheadAttention::ForwardPacked(const TensorView& query, const PackedBatch& batch,
                                       PagedKvCache& cache, int64_t layer,
                                       const MutableTensorView& output,
                                       const ForwardOptions& options) const {
  impl_->ForwardPacked(query, batch, *cache.impl_, layer, output, options);
}

void MultiheadAttention::ForwardPacked(const TensorView& query, const PackedStep& step,
                                       int64_t layer, const MutableTensorView& output,
                                       const PackedLayerOptions& options) const {
  const internal::WorkspacePool::Lease workspace = impl_->workspaces.Acquire();
  impl_->ForwardPacked(query, *step.impl_, layer, output, options.kv_shared, *workspace);
}

}  // namespace mha

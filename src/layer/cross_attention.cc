// Cross-attention over a cached memory (Whisper, T5, BART decoders): the encoder
// output is projected to keys and values once, into a KvCache; every decoder step
// then projects only its queries and attends over the cache's pages.
#include <algorithm>

#include "src/base/check.h"
#include "src/base/parallel_for.h"
#include "src/layer/multihead_attention_impl.h"

namespace mha {

using internal::AttentionParams;
using internal::Fail;
using internal::Problem;
using internal::Workspace;

void MultiheadAttention::Impl::CheckMemoryCache(const KvCache::Impl& cache,
                                                int64_t batch) const {
  if (rotary) Fail("cross-attention: the layer has rotary embeddings (not supported)");
  CheckCacheHeads(cache.pages.layout());
  if (batch > cache.max_batch) {
    Fail("batch ", batch, " exceeds the cache's max_batch ", cache.max_batch);
  }
}

void MultiheadAttention::Impl::ProjectMemory(const TensorView& memory,
                                             const TensorView& memory_lengths,
                                             KvCache::Impl& cache) const {
  if (config.resolved_key_dim() != config.resolved_value_dim()) {
    Fail("ProjectMemory: needs key_dim = value_dim (one memory feeds both), got ",
         config.resolved_key_dim(), " and ", config.resolved_value_dim());
  }
  if (memory.shape.rank() != 3 || memory.shape[2] != config.resolved_key_dim()) {
    Fail("memory: expected shape [B, S, ", config.resolved_key_dim(), "], got ",
         memory.shape.ToString());
  }
  if (memory.dtype != DType::kFloat32 && memory.dtype != DType::kBFloat16) {
    Fail("memory: expected dtype float32 or bfloat16, got ", DTypeName(memory.dtype));
  }
  internal::CheckTensor("memory", memory, memory.dtype, memory.shape);
  const int64_t batch = memory.shape[0], length = memory.shape[1];
  CheckMemoryCache(cache, batch);
  if (length > cache.max_seq_len) {
    Fail("memory: length ", length, " exceeds the cache's max_seq_len ",
         cache.max_seq_len);
  }
  const internal::WorkspacePool::Lease workspace = workspaces.Acquire();
  int64_t* counts = Workspace::Reserve(workspace->new_lengths, batch);
  if (memory_lengths.present()) {
    if (memory_lengths.dtype != DType::kInt32 && memory_lengths.dtype != DType::kInt64) {
      Fail("memory_lengths: expected dtype int32 or int64, got ",
           DTypeName(memory_lengths.dtype));
    }
    internal::CheckTensor("memory_lengths", memory_lengths, memory_lengths.dtype,
                          Shape{batch});
  }
  for (int64_t b = 0; b < batch; ++b) {
    counts[b] =
        memory_lengths.present() ? internal::IntegerAt(memory_lengths, b) : length;
    if (counts[b] < 0 || counts[b] > length) {
      Fail("memory_lengths[", b, "]: must be in [0, ", length, "], got ", counts[b]);
    }
  }
  // Everything is checked. The projections come first: if one fails, the cache is
  // still as it was.
  const int64_t rows = batch * length, kv_dim = config.kv_dim(),
                head_dim = config.head_dim;
  float* keys = workspace->Buffer(kProjectedRows, 2 * rows * kv_dim);
  float* values = keys + rows * kv_dim;
  ProjectKeyRows(memory, memory, 0, rows, keys, values, internal::TileRule::kByRows,
                 *workspace);
  for (int64_t b = 0; b < batch; ++b) cache.Truncate(b, 0);
  const auto pages = [&cache](int64_t b, int64_t kv_head) {
    return cache.Pages(b, kv_head);
  };
  internal::KvWrite write = KvWriteFor({}, 0);
  write.key = {keys, length * kv_dim, head_dim, kv_dim};
  write.value = {values, length * kv_dim, head_dim, kv_dim};
  write.batch_end = batch;
  write.counts = counts;
  write.pages = pages;
  internal::WriteKvPages(write, workspace->core.rotation_scratch);
  for (int64_t b = 0; b < batch; ++b) cache.lengths[b] = counts[b];
}

void MultiheadAttention::Impl::ForwardCrossAttention(
    const TensorView& query, KvCache::Impl& cache, const MutableTensorView& output,
    const ForwardOptions& options) const {
  if (options.kv_shared) {  // the memory's keys and values are read, never written
    Fail("options.kv_shared: does not apply to ForwardCrossAttention");
  }
  if (query.shape.rank() != 3 || query.shape[2] != config.query_dim) {
    Fail("query: expected shape [B, Sq, ", config.query_dim, "], got ",
         query.shape.ToString());
  }
  if (query.dtype != DType::kFloat32 && query.dtype != DType::kBFloat16) {
    Fail("query: expected dtype float32 or bfloat16, got ", DTypeName(query.dtype));
  }
  internal::CheckTensor("query", query, query.dtype, query.shape);
  internal::CheckThreadCount("options.num_threads", options.num_threads);
  Problem problem;
  problem.batch_size = query.shape[0];
  problem.query_len = query.shape[1];
  CheckMemoryCache(cache, problem.batch_size);
  internal::CheckOutput("output", output,
                        Shape{problem.batch_size, problem.query_len, output_dim},
                        /*bf16_allowed=*/true);
  for (int64_t b = 0; b < problem.batch_size; ++b) {
    problem.key_len = std::max(problem.key_len, cache.lengths[b]);
  }
  AttentionMasks masks;
  masks.key_lengths =
      TensorView(cache.lengths.data(), DType::kInt64, Shape{problem.batch_size});
  const internal::MaskPlan plan(masks, AttentionFeatures{}, problem, config.num_heads);
  const internal::TileRule tile_rule = TileRuleFor(options.batch_invariant);
  const internal::WorkspacePool::Lease workspace = workspaces.Acquire();
  const MutableTensorView staged = StageOutput(output, *workspace);
  const internal::ScopedThreadCount thread_count(
      ThreadsFor(problem, options.num_threads));
  const auto pages = [&cache](int64_t b, int64_t kv_head) {
    return cache.Pages(b, kv_head);
  };
  AttentionParams params = BaseParams(problem, {}, tile_rule, /*form=*/0);
  params.pages = pages;
  params.page_size = cache.page_size;
  RunQueries({tile_rule, &query, 0, problem.batch_size * problem.query_len,
              problem.query_len, nullptr, nullptr, staged.floats()},
             params, plan, *workspace);
  FinishOutput(staged, output);
}

void MultiheadAttention::ProjectMemory(const TensorView& memory,
                                       const TensorView& memory_lengths,
                                       KvCache& cache) const {
  impl_->ProjectMemory(memory, memory_lengths, *cache.impl_);
}

void MultiheadAttention::ForwardCrossAttention(const TensorView& query,
                                               const KvCache& cache,
                                               const MutableTensorView& output,
                                               const ForwardOptions& options) const {
  impl_->ForwardCrossAttention(query, *cache.impl_, output, options);
}

}  // namespace mha

// ScaledDotProductAttention: the public attention-core API. Checks its arguments,
// writes the keys and values into workspace pages, then runs the same
// RunAttentionCore the layer uses.
#include "mha/scaled_dot_product_attention.hpp"

#include "src/base/parallel_for.h"
#include "src/core/core_arguments.h"
#include "src/core/write_kv_pages.h"
#include "src/kv/kv_storage.h"

namespace mha {

void ScaledDotProductAttention(const TensorView& query, const TensorView& key,
                               const TensorView& value, const AttentionMasks& masks,
                               const MutableTensorView& output,
                               const CoreOptions& options,
                               const MutableTensorView& logsumexp) {
  // Kept per calling thread, so repeated calls allocate nothing.
  thread_local internal::CoreArguments args;
  args.Check(query, key, value, masks, output, options, logsumexp);
  thread_local internal::CoreWorkspace workspace;
  const internal::ScopedThreadCount thread_count(options.num_threads);
  internal::ContiguousPages& pages = workspace.kv_pages;
  const int64_t page_size = internal::WorkspacePageSize(args.key_len);
  pages.Reset(internal::BlockLayout(page_size, args.num_kv_heads, args.head_dim,
                                    internal::AttentionStorage(options.compute_dtype),
                                    args.value_head_dim),
              args.batch, args.key_len);
  internal::KvWrite write;
  write.key = args.key;
  write.value = args.value;
  write.batch_end = args.batch;
  write.num_kv_heads = args.num_kv_heads;
  write.head_dim = args.head_dim;
  write.value_head_dim = args.value_head_dim;
  write.counts = internal::VisibleKeyCounts(*args.masks, args.batch, args.query_len,
                                            workspace.key_counts);
  write.zero_padding = true;
  write.pages = pages;
  internal::AttentionParams params;
  params.num_heads = args.num_heads;
  params.num_kv_heads = args.num_kv_heads;
  params.head_dim = args.head_dim;
  params.value_head_dim = args.value_head_dim;
  params.query_len = params.query_count = args.query_len;
  params.key_len = args.key_len;
  params.batch_end = args.batch;
  params.query = args.query;
  params.context = args.output;
  params.logsumexp = logsumexp.floats();
  params.query_scale = args.scale;
  internal::SetLogits(args.logits, params);
  params.query_norm = args.qk_norm.QueryHeadNorm();
  write.key_norm = args.qk_norm.KeyHeadNorm();
  write.value_norm = args.qk_norm.ValueHeadNorm();
  params.pages = pages;
  params.page_size = page_size;
  if (args.rotary) {
    write.rotary = args.key_rotary;
    params.rotary = args.query_rotary;
    write.rotary_positions = args.key_rows;
    write.positions_per_sequence = args.key_len;
    params.query_positions = args.query_rows;
  }
  internal::WriteKvPages(write, workspace.rotation_scratch);
  internal::RunAttentionCore(params, *args.masks, workspace);
}

}  // namespace mha

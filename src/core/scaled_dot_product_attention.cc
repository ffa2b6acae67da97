// ScaledDotProductAttention: the public attention-core API. Checks its arguments,
// then hands the views to the same RunAttentionCore the layer uses.
#include "mha/scaled_dot_product_attention.hpp"

#include "src/core/core_arguments.h"
#include "src/threading/parallel_for.h"

namespace mha {

void ScaledDotProductAttention(const AttentionTensor& query, const AttentionTensor& key,
                               const AttentionTensor& value, const AttentionMasks& masks,
                               const MutableAttentionTensor& output,
                               const CoreOptions& options,
                               const MutableTensorView& logsumexp) {
  // Kept per calling thread, so repeated calls allocate nothing.
  thread_local internal::CoreArguments args;
  args.Check(query, key, value, masks, output, options, logsumexp);
  internal::CoreCall call;
  call.num_heads = args.num_heads;
  call.num_kv_heads = args.num_kv_heads;
  call.head_dim = args.head_dim;
  call.query_len = call.query_count = args.query_len;
  call.key_len = args.key_len;
  call.batch_end = args.batch;
  call.query = args.query;
  call.key = args.key;
  call.value = args.value;
  call.context = args.output;
  call.logsumexp = logsumexp.floats();
  call.query_scale = args.scale;
  call.SetLogits(args.logits);
  if (args.rotary) {
    call.rotary = args.rotary;
    call.query_positions = args.query_positions.data();
    call.key_positions = args.key_positions.data();
  }
  thread_local internal::CoreWorkspace workspace;
  const internal::ScopedThreadCount thread_count(options.num_threads);
  internal::RunAttentionCore(call, *args.masks, workspace);
}

}  // namespace mha

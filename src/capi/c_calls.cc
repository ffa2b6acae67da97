// The growing argument structs of cached and packed steps, read by release.
#include "src/capi/c_calls.h"

#include <cstddef>
#include <string>

#include "src/capi/c_support.h"

namespace mha::capi {

CachedCall ReadCachedCall(const mha_cache_forward_args* versioned, int64_t input_dim) {
  // Layouts (mha.h): 1 (to num_threads), 2 (kv_shared), 3 (batch_invariant).
  const size_t releases[] = {offsetof(mha_cache_forward_args, kv_shared),
                             offsetof(mha_cache_forward_args, batch_invariant),
                             sizeof(mha_cache_forward_args)};
  CachedCall call{VersionedArgs(versioned, releases), {}, {}, {}};
  const mha_cache_forward_args& a = call.args;
  // Layouts 1 and 2 share sizeof 64: kv_shared lies in layout 1's padding,
  // which the header says to zero; anything but a flag there is refused rather than
  // read as one.
  if (a.kv_shared != 0 && a.kv_shared != 1) {
    throw mha::Error("mha: args.kv_shared: must be 0 or 1, got " +
                     std::to_string(a.kv_shared) +
                     " (a struct of layout 1 must be zeroed)");
  }
  call.query = mha::TensorView(a.query, mha::Shape{a.batch, a.new_tokens, input_dim});
  if (a.new_lengths) {
    call.new_lengths =
        mha::TensorView(a.new_lengths, mha::DType::kInt64, mha::Shape{a.batch});
  }
  call.options.num_threads = a.num_threads;
  call.options.kv_shared = a.kv_shared != 0;
  call.options.batch_invariant = a.batch_invariant != 0;
  if (a.position_ids) {
    call.options.position_ids = mha::TensorView(a.position_ids, mha::DType::kInt64,
                                                mha::Shape{a.batch, a.new_tokens});
  }
  return call;
}

PackedCall ReadPackedCall(const mha_packed_forward_args* versioned, int64_t input_dim) {
  // Layouts (mha.h): 1 (to num_threads), 2 (kv_shared, tree_parents), 3
  // (batch_invariant).
  const size_t releases[] = {offsetof(mha_packed_forward_args, kv_shared),
                             offsetof(mha_packed_forward_args, batch_invariant),
                             sizeof(mha_packed_forward_args)};
  PackedCall call{VersionedArgs(versioned, releases), {}, {}, {}};
  const mha_packed_forward_args& a = call.args;
  // Checked before num_sequences + 1 is formed.
  if (a.num_sequences < 0 || a.num_sequences == INT64_MAX) {
    throw mha::Error("mha: num_sequences: must be in [0, 2^63 - 1), got " +
                     std::to_string(a.num_sequences));
  }
  call.query = mha::TensorView(a.query, mha::Shape{a.num_tokens, input_dim});
  call.batch = mha::PackedBatch{
      mha::TensorView(a.sequence_ids, mha::DType::kInt64, mha::Shape{a.num_sequences}),
      mha::TensorView(a.query_start_loc, mha::DType::kInt64,
                      mha::Shape{a.num_sequences + 1}),
      a.tree_parents
          ? mha::TensorView(a.tree_parents, mha::DType::kInt64, mha::Shape{a.num_tokens})
          : mha::TensorView()};
  call.options.num_threads = a.num_threads;
  call.options.kv_shared = a.kv_shared != 0;
  call.options.batch_invariant = a.batch_invariant != 0;
  if (a.position_ids) {
    call.options.position_ids =
        mha::TensorView(a.position_ids, mha::DType::kInt64, mha::Shape{a.num_tokens});
  }
  return call;
}

}  // namespace mha::capi

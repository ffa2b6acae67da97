// KvKind: what the library knows of a KV storage kind, one row per line of
// include/mha/kv_storage_kinds.h (ggml's type_traits_cpu): its public spelling, its
// page format's sizes, and its functions, each made by the kind's own file
// (src/kv/kinds/<kind>.cc) from the one flash kernel and the one append. The kernel,
// the tile product and the caches ask the kind; they never name one.
#pragma once

#include <cstdint>

#include "mha/kv_cache.hpp"
#include "mha/tensor.hpp"

namespace mha::internal {

enum class KvStorage {
#define MHA_KV_KIND(Name, C_NAME, c_value, dtype, scales) k##Name = c_value,
#include "mha/kv_storage_kinds.h"
#undef MHA_KV_KIND
};

struct AttentionParams;
struct CoreTask;
struct HeadScratch;
struct KvPages;
class MaskPlan;
struct PanelAppend;
struct ResidualKeys;

// One KV head's page of page_size tokens: its codes (a tile), then what the kind
// keeps beside them (scales), in bytes.
struct PageBytes {
  int64_t codes = 0, total = 0;
};

struct KvKind {
  // Its K page ([rows = head_dim, page_size] K^T) and V page ([page_size,
  // padded_value_head_dim]).
  PageBytes (*key_page)(int64_t page_size, int64_t head_dim);
  PageBytes (*value_page)(int64_t page_size, int64_t padded_value_head_dim);
  // Keys per channel (else null): a cache keeps each sequence's partial last page of
  // keys in fp32 too (KvPages::key_residual), which every write requantises the
  // page from, and moves and truncates keys through these (channel_keys.h).
  const ResidualKeys* residual_keys;
  // Whether it may hold MLA's latent (values in keys: V is the transpose of K^T rows).
  bool latent;
  // The flash kernel over its pages (attention_head.h), a write of new rows
  // (kv_append.h), one token moved (kv_token_copy.h), and tokens [first_row, end_row)
  // of a page cleared for reuse: values and their scales read as zeros, so a 0
  // weight never meets a NaN left in memory.
  void (*attend)(const AttentionParams&, const CoreTask&, const KvPages&, const MaskPlan&,
                 const HeadScratch&, float* partials, float* scratch);
  void (*append)(const PanelAppend&);
  void (*copy_token)(const KvPages&, int64_t from, int64_t to);
  void (*clear_values)(const KvPages&, int64_t page, int64_t first_row, int64_t end_row);
};

const KvKind& KindOf(KvStorage storage);
// Its public spelling (its line of the list).
DType DTypeOf(KvStorage storage);
KvScales ScalesOf(KvStorage storage);
const char* KvScalesName(KvScales scales);  // "kPerToken"

// The kind `storage` with `scales` names, or an error naming `owner`, the pair and
// the pairs that are kinds.
KvStorage KvStorageFor(const char* owner, DType storage, KvScales scales);

}  // namespace mha::internal

// What a KV storage kind costs and where attention may use one: the bytes a token
// takes in pages, the storage of a forward's own pages for a compute dtype, and which
// kinds can hold a latent cache.
#pragma once

#include <cstdint>

#include "mha/kv_cache.hpp"
#include "mha/tensor.hpp"
#include "src/kv/kv_kind.h"

namespace mha::internal {
// The storage of the pages a forward writes its own K/V into for a compute dtype
// (checked by the caller): bf16 only where bf16 dot products run. Elsewhere the
// kernel would widen bf16 back to fp32, slower than fp32 pages and less accurate.
KvStorage AttentionStorage(DType compute_dtype);
// Bytes one token of one KV head takes in a cache of `page_size`-token pages: K, V
// padded to whole panels, and the scales (a page's per-channel ones shared by its
// tokens, rounded up).
// Values in keys (a latent cache): K alone.
int64_t KvTokenBytes(int64_t head_dim, KvStorage storage, int64_t page_size,
                     bool values_in_keys = false);
// Fails, naming `owner`, for a kind that cannot hold a latent cache (its keys are
// its values).
void CheckLatentKind(const char* owner, KvStorage storage);
}  // namespace mha::internal

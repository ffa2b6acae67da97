// CopyToken: one token's key column, value row and (int8) scales moved from one
// position of a KV head's pages to another, byte for byte: speculative decoding's
// accepted path compacted into place (PagedKvCache::KeepTokens). Keys per channel
// are left to the caller: a key moved to another page needs that page's scales.
#pragma once

#include <cstdint>

#include "src/kernels/kv_pages.h"

namespace mha::internal {

// Position `to` of `pages` takes what position `from` holds (same page layout).
void CopyToken(const KvPages& pages, int64_t head_dim, int64_t from, int64_t to);

}  // namespace mha::internal

// PagedKvCache: sequences, block tables, copy-on-write and the sliding window's
// release, over a BlockPool.
#include "mha/paged_kv_cache.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "src/base/check.h"
#include "src/cache/kv_cache_storage.h"
#include "src/cache/paged_kv_cache_storage.h"
#include "src/kv/channel_keys.h"
#include "src/kv/kv_storage.h"
#include "src/kv/tile_sizes.h"
#include "src/validation/latent_config.h"
#include "src/validation/problem.h"

namespace mha {

using internal::Fail;

namespace {

void ValidateOptions(const PagedKvCacheOptions& o) {
  if (o.num_blocks < 1 || o.num_blocks > INT32_MAX) {
    Fail("PagedKvCache: num_blocks must be in [1, 2^31), got ", o.num_blocks);
  }
  if (o.block_size < 16 || o.block_size > static_cast<int64_t>(internal::kMaxPageSize) ||
      o.block_size % 16 != 0) {
    Fail("PagedKvCache: block_size must be a multiple of 16 in [16, 256], got ",
         o.block_size);
  }
  if (o.max_sequences < 1 || o.max_sequences > (int64_t{1} << 24)) {
    Fail("PagedKvCache: max_sequences must be in [1, 2^24], got ", o.max_sequences);
  }
  if (o.num_layers < 1 || o.num_layers > 4096) {
    Fail("PagedKvCache: num_layers must be in [1, 4096], got ", o.num_layers);
  }
  if (o.sliding_window < 0) {
    Fail("PagedKvCache: sliding_window must be >= 0, got ", o.sliding_window);
  }
  if (o.attention_chunk_size < 0) {
    Fail("PagedKvCache: attention_chunk_size must be >= 0, got ", o.attention_chunk_size);
  }
}

// The pool's bytes, checked before anything is allocated.
void CheckPoolBytes(int64_t num_kv_heads, int64_t token_bytes,
                    const PagedKvCacheOptions& o) {
  int64_t bytes = 0;
  if (token_bytes < 0 ||
      !internal::AddressableProduct(
          {o.num_layers, o.num_blocks, o.block_size, num_kv_heads, token_bytes},
          &bytes)) {
    Fail("PagedKvCache: num_layers ", o.num_layers, " x num_blocks ", o.num_blocks,
         " x block_size ", o.block_size, " needs more than 2^47 bytes (", num_kv_heads,
         " KV heads of ", token_bytes, " bytes per token)");
  }
}

int64_t PagesFor(int64_t tokens, int64_t block_size) {
  return (tokens + block_size - 1) / block_size;
}

}  // namespace

PagedKvCache::Impl::Impl(const internal::BlockLayout& block_layout,
                         const PagedKvCacheOptions& o)
    : options(o),
      layout(block_layout),
      num_kv_heads(block_layout.num_kv_heads),
      head_dim(block_layout.head_dim),
      padded_value_head_dim(block_layout.padded_value_head_dim),
      storage(block_layout.storage),
      latent(block_layout.values_in_keys),
      residual_keys(internal::KindOf(block_layout.storage).residual_keys),
      // Sizes checked by CheckPoolBytes before.
      layer_keys_bytes(o.num_blocks * block_layout.block_key_bytes()),
      layer_values_bytes(o.num_blocks * block_layout.block_value_bytes()),
      keys(static_cast<size_t>(o.num_layers * layer_keys_bytes)),
      values(static_cast<size_t>(o.num_layers * layer_values_bytes)),
      pool(o.num_blocks),
      sequences(o.max_sequences) {}

internal::KvPages PagedKvCache::Impl::Pages(int64_t sequence, int64_t layer,
                                            int64_t kv_head) {
  Sequence& s = *sequences.Find(sequence);
  internal::KvPages pages =
      layout.Pages(keys.data() + layer * layer_keys_bytes,
                   values.data() + layer * layer_values_bytes, kv_head);
  pages.page_ids = s.pages.data();
  pages.first_page = s.first_page;
  if (residual_keys) {
    pages.key_residual = s.key_residual.data() +
                         (layer * num_kv_heads + kv_head) * options.block_size * head_dim;
  }
  return pages;
}

void PagedKvCache::Impl::RestoreKeyResiduals(int64_t sequence, int64_t old_length,
                                             int64_t length) {
  for (int64_t layer = 0; layer < options.num_layers; ++layer) {
    for (int64_t kv_head = 0; kv_head < num_kv_heads; ++kv_head) {
      residual_keys->restore(Pages(sequence, layer, kv_head), old_length, length,
                             head_dim);
    }
  }
}

void PagedKvCache::Impl::KeepKeys(int64_t sequence, int64_t first, const int64_t* kept,
                                  int64_t count) {
  const int64_t length = sequences.Find(sequence)->length;
  const int64_t base = first / options.block_size * options.block_size;
  keep_scratch.resize(static_cast<size_t>((length - base) * head_dim));
  for (int64_t layer = 0; layer < options.num_layers; ++layer) {
    for (int64_t kv_head = 0; kv_head < num_kv_heads; ++kv_head) {
      const internal::KvPages pages = Pages(sequence, layer, kv_head);
      float* rows = keep_scratch.data();
      for (int64_t t = base; t < length; ++t) {
        residual_keys->read_key(pages, t, length, head_dim, rows + (t - base) * head_dim);
      }
      for (int64_t k = 0; k < count; ++k) {  // kept[k] >= k: moves down, in place
        std::copy_n(rows + (first + kept[k] - base) * head_dim, head_dim,
                    rows + (first + k - base) * head_dim);
      }
      residual_keys->write_keys(pages, base, rows, first + count - base, head_dim);
    }
  }
}

PagedKvCache::Impl::Sequence& PagedKvCache::Impl::Active(const char* what,
                                                         int64_t sequence) {
  if (sequence < 0 || sequence >= options.max_sequences) {
    Fail("PagedKvCache::", what, ": sequence must be in [0, ", options.max_sequences,
         "), got ", sequence);
  }
  Sequence* s = Find(sequence);
  if (!s) Fail("PagedKvCache::", what, ": sequence ", sequence, " does not exist");
  return *s;
}

PagedKvCache::Impl::Sequence* PagedKvCache::Impl::Find(int64_t sequence) const {
  if (sequence < 0 || sequence >= options.max_sequences) return nullptr;
  Sequence* s = sequences.Find(sequence);
  return s && s->active ? s : nullptr;
}

void PagedKvCache::Impl::CheckDistinct(const char* what, const int64_t* ids,
                                       int64_t count) const {
  ++id_stamp;
  for (int64_t i = 0; i < count; ++i) {
    // Ids are checked to lie in [0, max_sequences) before they come here.
    Sequence& s = *sequences.Find(ids[i]);
    if (s.stamp == id_stamp) Fail(what, ": sequence ", ids[i], " appears twice");
    s.stamp = id_stamp;
  }
}

void PagedKvCache::Impl::CountBlocks(const Sequence& s, int64_t count, int64_t& needed,
                                     std::vector<int32_t>& released,
                                     std::vector<int32_t>& copied) const {
  const int64_t block_size = options.block_size;
  if (count == 0) return;
  // The first new token sees the fewest keys.
  const int64_t keep_from = FirstVisible(s.length);
  for (int64_t p = s.first_page; p < keep_from / block_size; ++p) {
    released.push_back(s.pages[p - s.first_page]);
  }
  needed += std::max<int64_t>(0, PagesFor(s.length + count, block_size) - s.end_page());
  if (s.length % block_size != 0) {
    copied.push_back(s.pages[s.length / block_size - s.first_page]);
  }
}

// Calls `run(block, holders)` for each distinct block of `blocks` (sorted here) with
// how many times it appears.
template <class F>
void ForEachDistinct(std::vector<int32_t>& blocks, const F& run) {
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 0; i < blocks.size();) {
    size_t end = i;
    while (end < blocks.size() && blocks[end] == blocks[i]) ++end;
    run(blocks[i], static_cast<int64_t>(end - i));
    i = end;
  }
}

int64_t PagedKvCache::Impl::FreedBlocks(std::vector<int32_t>& released) const {
  int64_t freed = 0;
  ForEachDistinct(released, [&](int32_t block, int64_t holders) {
    freed += holders == pool.references(block);
  });
  return freed;
}

int64_t PagedKvCache::Impl::CopiedBlocks(std::vector<int32_t>& copied) const {
  int64_t copies = 0;
  ForEachDistinct(copied, [&](int32_t block, int64_t writers) {
    // The last holder to write finds the block private and keeps it.
    copies += std::min<int64_t>(writers, pool.references(block) - 1);
  });
  return copies;
}

int64_t PagedKvCache::Impl::FirstVisible(int64_t position) const {
  int64_t first = 0;
  if (options.sliding_window > 0) {
    first = std::max<int64_t>(first, position - options.sliding_window + 1);
  }
  if (options.attention_chunk_size > 0) {
    first = std::max<int64_t>(
        first, position / options.attention_chunk_size * options.attention_chunk_size);
  }
  return first;
}

int64_t PagedKvCache::Impl::ShortestKeeping(int64_t kept_from) const {
  if (kept_from == 0) return 0;
  // FirstVisible(length) >= kept_from when either bound reaches it; blocks are
  // released only with a window or a chunk, so at least one is set.
  int64_t shortest = std::numeric_limits<int64_t>::max();
  if (options.sliding_window > 0) shortest = kept_from + options.sliding_window - 1;
  if (options.attention_chunk_size > 0) {
    const int64_t chunk = options.attention_chunk_size;
    shortest = std::min(shortest, (kept_from + chunk - 1) / chunk * chunk);
  }
  return shortest;
}

void PagedKvCache::Impl::ReleaseWindow(Sequence& s, int64_t next_position) {
  const int64_t keep_from = FirstVisible(next_position);
  const int64_t released =
      std::max<int64_t>(0, keep_from / options.block_size - s.first_page);
  if (released == 0) return;
  for (int64_t i = 0; i < released; ++i) pool.Release(s.pages[i]);
  s.pages.erase(s.pages.begin(), s.pages.begin() + released);
  s.first_page += released;
}

void PagedKvCache::Impl::Grow(Sequence& s, int64_t count) {
  if (count == 0) return;
  if (s.length % options.block_size != 0) Unshare(s, s.length / options.block_size);
  while (s.end_page() < PagesFor(s.length + count, options.block_size)) {
    const int32_t block = pool.Allocate();
    ZeroKeys(block);
    ZeroValueRows(block, 0);
    s.pages.push_back(block);
  }
  s.length += count;
}

void PagedKvCache::Impl::Unshare(Sequence& s, int64_t page) {
  int32_t& block = s.pages[page - s.first_page];
  if (pool.references(block) == 1) return;
  const int32_t copy = pool.Allocate();
  CopyBlock(block, copy);
  pool.Release(block);
  block = copy;
}

void PagedKvCache::Impl::CopyBlock(int32_t from, int32_t to) {
  for (int64_t layer = 0; layer < options.num_layers; ++layer) {
    uint8_t* layer_keys = keys.data() + layer * layer_keys_bytes;
    std::memcpy(layer_keys + to * layout.block_key_bytes(),
                layer_keys + from * layout.block_key_bytes(), layout.block_key_bytes());
    if (!latent) {  // a latent cache has no V pages (memcpy may not take null)
      uint8_t* layer_values = values.data() + layer * layer_values_bytes;
      std::memcpy(layer_values + to * layout.block_value_bytes(),
                  layer_values + from * layout.block_value_bytes(),
                  layout.block_value_bytes());
    }
  }
}

void PagedKvCache::Impl::ZeroKeys(int32_t block) {
  for (int64_t layer = 0; layer < options.num_layers; ++layer) {
    std::memset(keys.data() + layer * layer_keys_bytes + block * layout.block_key_bytes(),
                0, layout.block_key_bytes());
  }
}

void PagedKvCache::Impl::ZeroValueRows(int32_t block, int64_t first_row) {
  // Latent values are transposed from keys up to the length only: their kind clears
  // their scales alone.
  for (int64_t layer = 0; layer < options.num_layers; ++layer) {
    for (int64_t kv_head = 0; kv_head < num_kv_heads; ++kv_head) {
      internal::KindOf(storage).clear_values(
          layout.Pages(keys.data() + layer * layer_keys_bytes,
                       values.data() + layer * layer_values_bytes, kv_head),
          block, first_row, options.block_size);
    }
  }
}

PagedKvCache::PagedKvCache(const AttentionConfig& config,
                           const PagedKvCacheOptions& options) {
  internal::ValidateConfig(config);
  ValidateOptions(options);
  const internal::KvStorage storage =
      internal::KvStorageFor("PagedKvCache", options.storage, options.scales);
  CheckPoolBytes(config.resolved_num_kv_heads(),
                 internal::KvTokenBytes(config.head_dim, storage, options.block_size),
                 options);
  impl_ = std::make_unique<Impl>(
      internal::BlockLayout(options.block_size, config.resolved_num_kv_heads(),
                            config.head_dim, storage),
      options);
}

PagedKvCache::PagedKvCache(const LatentAttentionConfig& config,
                           const PagedKvCacheOptions& options) {
  internal::ValidateLatentConfig(config);
  ValidateOptions(options);
  if (options.sliding_window != 0 || options.attention_chunk_size != 0) {
    Fail(
        "PagedKvCache: a latent cache keeps every token (sliding_window and "
        "attention_chunk_size must be 0), got ",
        options.sliding_window, " and ", options.attention_chunk_size);
  }
  const internal::KvStorage storage =
      internal::KvStorageFor("PagedKvCache", options.storage, options.scales);
  internal::CheckLatentKind("PagedKvCache", storage);
  const int64_t key_dim = internal::LatentKeyDim(config);
  CheckPoolBytes(1,
                 internal::KvTokenBytes(key_dim, storage, options.block_size,
                                        /*values_in_keys=*/true),
                 options);
  impl_ = std::make_unique<Impl>(
      internal::BlockLayout(options.block_size, 1, key_dim, storage, config.kv_lora_rank,
                            /*values_in_keys=*/true),
      options);
}

PagedKvCache::~PagedKvCache() = default;
PagedKvCache::PagedKvCache(PagedKvCache&&) noexcept = default;
PagedKvCache& PagedKvCache::operator=(PagedKvCache&&) noexcept = default;

const PagedKvCacheOptions& PagedKvCache::options() const { return impl_->options; }

PagedKvCacheStats PagedKvCache::stats() const {
  const std::lock_guard<std::mutex> lock(impl_->mutex);
  PagedKvCacheStats stats;
  stats.num_blocks = impl_->pool.num_blocks();
  stats.free_blocks = impl_->pool.free_blocks();
  stats.used_blocks = stats.num_blocks - stats.free_blocks;
  stats.shared_blocks = impl_->pool.shared_blocks();
  stats.sequences = impl_->active_sequences;
  stats.bytes_per_block = impl_->options.num_layers * (impl_->layout.block_key_bytes() +
                                                       impl_->layout.block_value_bytes());
  stats.residual_bytes = impl_->active_sequences * impl_->ResidualFloats() *
                         static_cast<int64_t>(sizeof(float));
  return stats;
}

bool PagedKvCache::contains(int64_t sequence) const {
  const std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->Find(sequence) != nullptr;
}

int64_t PagedKvCache::length(int64_t sequence) const {
  const std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->Active("length", sequence).length;
}

void PagedKvCache::AddSequence(int64_t sequence) {
  const std::lock_guard<std::mutex> lock(impl_->mutex);
  if (sequence < 0 || sequence >= impl_->options.max_sequences) {
    Fail("PagedKvCache::AddSequence: sequence must be in [0, ",
         impl_->options.max_sequences, "), got ", sequence);
  }
  Impl::Sequence& s = impl_->sequences.Use(sequence);
  if (s.active) Fail("PagedKvCache::AddSequence: sequence ", sequence, " already exists");
  s.key_residual.resize(static_cast<size_t>(impl_->ResidualFloats()));
  s.active = true;
  s.length = 0;
  s.first_page = 0;
  s.appended_from = 0;
  s.pages.clear();
  impl_->Touch(s);
  ++impl_->active_sequences;
}

void PagedKvCache::RemoveSequence(int64_t sequence) {
  const std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl::Sequence& s = impl_->Active("RemoveSequence", sequence);
  for (const int32_t block : s.pages) impl_->pool.Release(block);
  // Ids may be named by request: an id seen once keeps no block table or residual.
  std::vector<int32_t>().swap(s.pages);
  std::vector<float>().swap(s.key_residual);
  s.active = false;
  --impl_->active_sequences;
}

void PagedKvCache::Fork(int64_t parent, int64_t child) {
  const std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl::Sequence& from = impl_->Active("Fork", parent);
  if (child < 0 || child >= impl_->options.max_sequences) {
    Fail("PagedKvCache::Fork: child must be in [0, ", impl_->options.max_sequences,
         "), got ", child);
  }
  Impl::Sequence& to = impl_->sequences.Use(child);
  if (to.active) Fail("PagedKvCache::Fork: child ", child, " already exists");
  to.key_residual.assign(from.key_residual.begin(), from.key_residual.end());
  to.pages.assign(from.pages.begin(), from.pages.end());
  for (const int32_t block : to.pages) impl_->pool.Share(block);
  to.length = from.length;
  to.first_page = from.first_page;
  // Their blocks are shared now: neither may write before AppendSlots unshares.
  to.appended_from = from.length;
  from.appended_from = from.length;
  impl_->Touch(from);
  impl_->Touch(to);
  to.active = true;
  ++impl_->active_sequences;
}

void PagedKvCache::Impl::CheckTruncate(const char* what, const Sequence& s,
                                       int64_t length) const {
  const int64_t block_size = options.block_size;
  // The next token (at `length`) must still find every key it may see.
  const int64_t kept_from = s.first_page * block_size;
  const int64_t shortest = ShortestKeeping(kept_from);
  if (length < shortest || length > s.length) {
    Fail("PagedKvCache::", what, ": length must be in [", shortest, ", ", s.length, "]",
         kept_from > 0 ? " (tokens before " + std::to_string(kept_from) +
                             " left the sliding window or attention chunk)"
                       : std::string(),
         ", got ", length);
  }
  const int64_t partial_page = length % block_size != 0 ? length / block_size : -1;
  // A shared partial block is copied before its tail is cleared: the other sequences
  // still hold those tokens. The copy may take a block this call frees.
  if (partial_page >= 0 && pool.references(s.pages[partial_page - s.first_page]) > 1) {
    int64_t freed = 0;
    for (size_t i = PagesFor(length, block_size) - s.first_page; i < s.pages.size();
         ++i) {
      freed += pool.references(s.pages[i]) == 1;
    }
    if (pool.free_blocks() + freed == 0) {
      throw OutOfBlocksError("mha: PagedKvCache::" + std::string(what) +
                             ": no free block to copy the shared block holding token " +
                             std::to_string(length));
    }
  }
}

void PagedKvCache::Impl::Truncate(Sequence& s, int64_t length) {
  const int64_t block_size = options.block_size;
  const int64_t partial_page = length % block_size != 0 ? length / block_size : -1;
  const int64_t keep_pages = PagesFor(length, block_size) - s.first_page;
  for (size_t i = keep_pages; i < s.pages.size(); ++i) pool.Release(s.pages[i]);
  s.pages.resize(keep_pages);
  if (partial_page >= 0) {
    Unshare(s, partial_page);
    ZeroValueRows(s.pages[partial_page - s.first_page], length % block_size);
  }
  s.length = length;
  s.appended_from = std::min(s.appended_from, length);
  Touch(s);
}

void PagedKvCache::Truncate(int64_t sequence, int64_t length) {
  const std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl::Sequence& s = impl_->Active("Truncate", sequence);
  impl_->CheckTruncate("Truncate", s, length);
  const int64_t old_length = s.length;
  impl_->Truncate(s, length);
  if (impl_->residual_keys) impl_->RestoreKeyResiduals(sequence, old_length, length);
}

void PagedKvCache::KeepTokens(int64_t sequence, int64_t first, const int64_t* kept,
                              int64_t count) {
  const std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl::Sequence& s = impl_->Active("KeepTokens", sequence);
  if (first < s.appended_from || first > s.length) {
    Fail("PagedKvCache::KeepTokens: first must be in [", s.appended_from, ", ", s.length,
         "] (the tokens the last AppendSlots made room for), got ", first);
  }
  if (count < 0 || count > s.length - first || (count > 0 && !kept)) {
    Fail("PagedKvCache::KeepTokens: count must be in [0, ", s.length - first,
         "] with non-null kept, got ", count);
  }
  for (int64_t k = 0; k < count; ++k) {
    const int64_t lowest = k == 0 ? 0 : kept[k - 1] + 1;
    if (kept[k] < lowest || kept[k] >= s.length - first) {
      Fail("PagedKvCache::KeepTokens: kept[", k, "] must be in [", lowest, ", ",
           s.length - first, ") (increasing offsets from first), got ", kept[k]);
    }
  }
  impl_->CheckTruncate("KeepTokens", s, first + count);
  if (impl_->residual_keys) impl_->KeepKeys(sequence, first, kept, count);
  // kept[k] >= k: each token moves down, onto a slot already read or its own.
  for (int64_t layer = 0; layer < impl_->options.num_layers; ++layer) {
    for (int64_t kv_head = 0; kv_head < impl_->num_kv_heads; ++kv_head) {
      const internal::KvPages pages = impl_->Pages(sequence, layer, kv_head);
      for (int64_t k = 0; k < count; ++k) {
        internal::KindOf(impl_->storage).copy_token(pages, first + kept[k], first + k);
      }
    }
  }
  impl_->Truncate(s, first + count);
}

void PagedKvCache::AppendSlots(const int64_t* sequences, const int64_t* counts,
                               int64_t num_sequences) {
  if (num_sequences < 0 || (num_sequences > 0 && (!sequences || !counts))) {
    Fail("PagedKvCache::AppendSlots: needs num_sequences >= 0 (got ", num_sequences,
         ") and non-null sequences and counts");
  }
  const std::lock_guard<std::mutex> lock(impl_->mutex);
  int64_t needed = 0;
  std::vector<int32_t>& released = impl_->released_scratch;
  std::vector<int32_t>& copied = impl_->copied_scratch;
  released.clear();
  copied.clear();
  for (int64_t i = 0; i < num_sequences; ++i) {
    const Impl::Sequence& s = impl_->Active("AppendSlots", sequences[i]);
    if (counts[i] < 0 || counts[i] > (int64_t{1} << 40)) {
      Fail("PagedKvCache::AppendSlots: counts[", i, "] must be in [0, 2^40], got ",
           counts[i]);
    }
    impl_->CountBlocks(s, counts[i], needed, released, copied);
  }
  impl_->CheckDistinct("PagedKvCache::AppendSlots", sequences, num_sequences);
  needed += impl_->CopiedBlocks(copied);
  const int64_t available = impl_->pool.free_blocks() + impl_->FreedBlocks(released);
  if (needed > available) {
    throw OutOfBlocksError("mha: PagedKvCache::AppendSlots: needs " +
                           std::to_string(needed) + " blocks, " +
                           std::to_string(available) + " are free");
  }
  // Block tables get their room before anything changes: all or nothing holds when
  // memory runs out too.
  for (int64_t i = 0; i < num_sequences; ++i) {
    Impl::Sequence& s = *impl_->Find(sequences[i]);
    const int64_t end_page = PagesFor(s.length + counts[i], impl_->options.block_size);
    s.pages.reserve(static_cast<size_t>(std::max(end_page, s.end_page()) - s.first_page));
  }
  // Releases first, so that one sequence's window feeds another's growth.
  for (int64_t i = 0; i < num_sequences; ++i) {
    Impl::Sequence& s = *impl_->Find(sequences[i]);
    if (counts[i] > 0) impl_->ReleaseWindow(s, s.length);
  }
  for (int64_t i = 0; i < num_sequences; ++i) {
    Impl::Sequence& s = *impl_->Find(sequences[i]);
    if (counts[i] > 0) s.appended_from = s.length;
    impl_->Grow(s, counts[i]);
    impl_->Touch(s);
  }
}

}  // namespace mha

// SequenceTable: a paged cache's per-id state, made on first use in chunks of 256
// ids, so a cache for 2^24 ids costs 512 KB of chunk pointers until ids are used
// (a flat table cost 1.4 GB at creation). Chunks never move: one sequence's entry
// stays put while another id is added. Not thread-safe (the cache guards it).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace mha::internal {

template <class Entry>
class SequenceTable {
 public:
  explicit SequenceTable(int64_t max_ids) : chunks_((max_ids + kChunk - 1) / kChunk) {}

  // The entry of `id` (in [0, max_ids)), value-initialised on first use.
  Entry& Use(int64_t id) {
    std::unique_ptr<Entry[]>& chunk = chunks_[id / kChunk];
    if (!chunk) chunk = std::make_unique<Entry[]>(kChunk);
    return chunk[id % kChunk];
  }

  // The entry of `id` (in [0, max_ids)), or null when no id of its chunk was used.
  Entry* Find(int64_t id) const {
    const std::unique_ptr<Entry[]>& chunk = chunks_[id / kChunk];
    return chunk ? &chunk[id % kChunk] : nullptr;
  }

 private:
  static constexpr int64_t kChunk = 256;
  std::vector<std::unique_ptr<Entry[]>> chunks_;
};

}  // namespace mha::internal

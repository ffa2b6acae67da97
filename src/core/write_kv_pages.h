// WriteKvPages: the one way keys and values reach the attention kernel. New K and V
// rows (projections, or the core API's tensors) are written once per (sequence, KV
// head) into pages, keys rotated on the way in for rotary layers: a KV cache's pages
// for cached steps, workspace pages (ContiguousPages) otherwise. In parallel over
// (sequence, KV head).
#pragma once

#include <cstdint>
#include <vector>

#include "mha/rotary.hpp"
#include "src/features/mask_plan.h"
#include "src/kv/head_rows.h"
#include "src/kv/page_source.h"
#include "src/simd/head_norm.h"

namespace mha::internal {

struct KvWrite {
  // Sequence b's new row r of KV head h: key.Row(b, h, r), value.Row(b, h, r).
  HeadRows<const float> key, value;
  int64_t batch_begin = 0, batch_end = 0, num_kv_heads = 0, head_dim = 0;
  int64_t value_head_dim = 0;  // 0: head_dim
  // New rows per sequence: counts[b], or count for every sequence.
  const int64_t* counts = nullptr;
  int64_t count = 0;
  // Page position of sequence b's first new row: first_positions[b], or
  // first_position for every sequence.
  const int64_t* first_positions = nullptr;
  int64_t first_position = 0;
  // Rotary layers: row r of sequence b at position rotary_positions[first + r], where
  // first is key.batch_rows[b] for packed rows, b * positions_per_sequence otherwise.
  const RotaryEmbedding* rotary = nullptr;
  const int64_t* rotary_positions = nullptr;
  int64_t positions_per_sequence = 0;
  // QK-norm of each key before its rotation; Gemma 3n's norm of each value.
  HeadNorm key_norm, value_norm;
  // Workspace pages: also zero the V rows from the last new one to the next multiple
  // of the panel width (the kernel reads them, times a zero weight). Caches are
  // zero-filled already.
  bool zero_padding = false;
  PageSource pages;
};

// Tokens per workspace page for keys key_len long: a kernel key step (kKeyStep),
// or all the keys when fewer.
int64_t WorkspacePageSize(int64_t key_len);

// Keys a call without a cache writes per sequence: those its last query may see
// (masks never let an earlier query see further). Keys masked by key_lengths are
// never read, so a non-finite value there cannot reach the output. Returns counts.
const int64_t* VisibleKeyCounts(const MaskPlan& masks, int64_t batch_size,
                                int64_t query_len, std::vector<int64_t>& counts);

// rotation_scratch: per-thread room for rotating keys, kept between calls.
void WriteKvPages(const KvWrite& write, std::vector<float>& rotation_scratch);

}  // namespace mha::internal

// WriteKvPages: (sequence, KV head) pairs over the threads, AppendToPages for each.
#include "src/core/write_kv_pages.h"

#include <algorithm>

#include "src/base/parallel_for.h"
#include "src/kv/kv_append.h"
#include "src/kv/tile_sizes.h"

namespace mha::internal {

int64_t WorkspacePageSize(int64_t key_len) {
  return static_cast<int64_t>(
      std::min(kKeyStep, RoundUp(static_cast<size_t>(key_len), kPanelWidth)));
}

namespace {

// What AppendToPages needs for sequence b's rows of one KV head.
PanelAppend AppendFor(const KvWrite& write, int64_t b, int64_t kv_head,
                      const KvPages& pages, float* rotation_scratch) {
  PanelAppend append;
  append.keys = write.key.Row(b, kv_head, 0);
  append.values = write.value.Row(b, kv_head, 0);
  append.key_stride = write.key.row_stride;
  append.value_stride = write.value.row_stride;
  append.rows = write.counts ? write.counts[b] : write.count;
  append.head_dim = write.head_dim;
  append.value_head_dim = write.value_head_dim;
  append.pages = &pages;
  append.first = write.first_positions ? write.first_positions[b] : write.first_position;
  append.pad_to = append.first + append.rows;
  if (write.zero_padding) {
    append.pad_to =
        static_cast<int64_t>(RoundUp(static_cast<size_t>(append.pad_to), kPanelWidth));
  }
  if (write.rotary) {
    const int64_t first_row =
        write.key.batch_rows ? write.key.batch_rows[b] : b * write.positions_per_sequence;
    append.rotary = write.rotary;
    append.positions = write.rotary_positions + first_row;
  }
  append.key_norm = write.key_norm;
  append.value_norm = write.value_norm;
  if (write.rotary || write.key_norm.enabled() || write.value_norm.enabled()) {
    append.rotation_scratch = rotation_scratch;
    append.rotation_rows = kRotationRows;
  }
  return append;
}

int64_t ValueHeadDim(const KvWrite& write) {
  return write.value_head_dim > 0 ? write.value_head_dim : write.head_dim;
}

// Below this many floats a write runs on the calling thread.
constexpr int64_t kSerialWriteFloats = 1 << 14;

int64_t WrittenFloats(const KvWrite& write) {
  int64_t rows = 0;
  for (int64_t b = write.batch_begin; b < write.batch_end; ++b) {
    rows += write.counts ? write.counts[b] : write.count;
  }
  return rows * write.num_kv_heads * (write.head_dim + ValueHeadDim(write));
}

}  // namespace

const int64_t* VisibleKeyCounts(const MaskPlan& masks, int64_t batch_size,
                                int64_t query_len, std::vector<int64_t>& counts) {
  if (counts.size() < static_cast<size_t>(batch_size)) counts.resize(batch_size);
  for (int64_t b = 0; b < batch_size; ++b) counts[b] = masks.KeyEnd(b, query_len - 1);
  return counts.data();
}

void WriteKvPages(const KvWrite& write, std::vector<float>& rotation_scratch) {
  const int64_t kv_heads = write.num_kv_heads;
  const int64_t units = (write.batch_end - write.batch_begin) * kv_heads;
  const bool transformed =
      write.rotary || write.key_norm.enabled() || write.value_norm.enabled();
  const size_t rotation_floats =
      transformed ? kRotationRows * std::max(write.head_dim, ValueHeadDim(write)) : 0;
  const size_t floats = TeamSize() * rotation_floats;
  if (rotation_scratch.size() < floats) rotation_scratch.resize(floats);
  const auto write_unit = [&](int64_t index, float* scratch) {
    const int64_t b = write.batch_begin + index / kv_heads;
    const int64_t kv_head = index % kv_heads;
    const KvPages pages = write.pages(b, kv_head);
    AppendToPages(AppendFor(write, b, kv_head, pages, scratch));
  };
  if (WrittenFloats(write) < kSerialWriteFloats) {  // less than waking a team costs
    for (int64_t index = 0; index < units; ++index) {
      write_unit(index, rotation_scratch.data());
    }
    return;
  }
  ParallelFor(units, rotation_scratch.data(), rotation_floats, write_unit);
}

}  // namespace mha::internal

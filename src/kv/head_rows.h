// HeadRows: where the rows of one head of one sequence are, in any tensor layout.
#pragma once

#include <cstdint>

namespace mha::internal {

// Rows of a [B, H, S, D] tensor in any layout: row r of head h of batch b starts at
// data + b * batch_stride + h * head_stride + r * row_stride. Packed batches (no
// padding) start batch b at row batch_rows[b] instead.
template <class T>
struct HeadRows {
  T* data = nullptr;
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0;
  const int64_t* batch_rows = nullptr;
  T* Row(int64_t batch, int64_t head, int64_t row) const {
    const int64_t first =
        batch_rows ? batch_rows[batch] * row_stride : batch * batch_stride;
    return data + first + head * head_stride + row * row_stride;
  }
};

}  // namespace mha::internal

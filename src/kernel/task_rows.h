// TaskRows: where one task's rows are (flash-attention's per-block info), derived once
// from the call's AttentionParams and the planner's CoreTask: its query, context,
// log-sum-exp and probability rows, and the position and head of each kernel row.
#pragma once

#include <cstdint>

#include "src/kernel/attention_params.h"

namespace mha::internal {

class TaskRows {
 public:
  // partials: where tasks with a partial key range write (task.partial on).
  TaskRows(const AttentionParams& params, const CoreTask& task, float* partials);

  // Kernel row r is query task.first_row + r / heads of head task.head + r % heads
  // (RowQuery, RowHead: attention_params.h), at position first_query + r / heads in
  // its sequence as the masks see it.
  int64_t Position(int64_t r) const { return first_query_ + QueryIndex(r); }
  int64_t Head(int64_t r) const { return first_head_ + (heads_ == 1 ? 0 : r % heads_); }
  // Row r's query and context (head_dim floats each), its log-sum-exp (null: not
  // asked for) and its probabilities (key_len floats; null: not asked for).
  const float* Query(int64_t r) const { return query_ + Offset(r, query_steps_); }
  float* Context(int64_t r) const { return context_ + Offset(r, context_steps_); }
  float* LogSumExp(int64_t r) const {
    return logsumexp_ ? logsumexp_ + Offset(r, logsumexp_steps_) : nullptr;
  }
  float* Probabilities(int64_t r) const {
    return probabilities_ ? probabilities_ + Offset(r, probability_steps_) : nullptr;
  }
  // The distance between consecutive query rows when it is one for all of them (one
  // head, or one position), else 0: the rows must be gathered.
  int64_t QueryStride() const {
    return heads_ == 1 ? query_steps_.query : rows_ == 1 ? query_steps_.head : 0;
  }
  // Rotary position of the query at sequence position q: query_positions[q].
  const int64_t* query_positions() const { return query_positions_; }

 private:
  struct Steps {  // floats from one query row to the next, and from one head to the next
    int64_t query = 0, head = 0;
  };
  // Row r's query within the task; one head needs no division (tens of cycles).
  int64_t QueryIndex(int64_t r) const { return heads_ == 1 ? r : r / heads_; }
  int64_t Offset(int64_t r, Steps steps) const {
    return heads_ == 1 ? r * steps.query
                       : (r / heads_) * steps.query + (r % heads_) * steps.head;
  }

  int64_t heads_ = 1, rows_ = 1, first_head_ = 0, first_query_ = 0;
  const float* query_ = nullptr;
  float* context_ = nullptr;
  float* logsumexp_ = nullptr;
  float* probabilities_ = nullptr;
  Steps query_steps_, context_steps_, logsumexp_steps_, probability_steps_;
  const int64_t* query_positions_ = nullptr;
};

}  // namespace mha::internal

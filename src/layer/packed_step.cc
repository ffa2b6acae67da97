// PackedStep: a packed batch checked against the paged cache, its positions and
// token trees resolved, once per step; the mask and task plans per layer form.
#include "src/layer/packed_step.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "src/base/check.h"
#include "src/base/parallel_for.h"

namespace mha {

using internal::Fail;
using internal::IntegerAt;

namespace {

// Grows a buffer for a checked, non-negative count (never shrinks: reused memory).
template <class T>
T* Reserve(std::vector<T>& buffer, int64_t count) {
  if (buffer.size() < static_cast<size_t>(count)) buffer.resize(count);
  return buffer.data();
}

// An int32 or int64 vector of `length` elements, or fails naming it.
void CheckIndexTensor(const char* name, const TensorView& tensor, int64_t length) {
  if (tensor.dtype != DType::kInt32 && tensor.dtype != DType::kInt64) {
    Fail(name, ": expected dtype int32 or int64, got ", DTypeName(tensor.dtype));
  }
  internal::CheckTensor(name, tensor, tensor.dtype, Shape{length});
}

// Token trees (PackedBatch::tree_parents, checked: each token's parent is an earlier
// new token of its sequence, or -1): each row's depth, and its depth-first place and
// subtree end in intervals[2 * tokens], the mask MaskPlan::ForCache takes.
void BuildTokenTree(const TensorView& tree_parents, PackedStep::Impl::Rows& step) {
  CheckIndexTensor("batch.tree_parents", tree_parents, step.tokens);
  const int64_t* rows = step.rows.data();
  int64_t* depths = Reserve(step.depths, step.tokens);
  int64_t* preorder = Reserve(step.intervals, 2 * step.tokens);
  int64_t* subtree_end = preorder + step.tokens;
  for (int64_t b = 0; b < step.sequences; ++b) {
    for (int64_t row = rows[b]; row < rows[b + 1]; ++row) {
      const int64_t i = row - rows[b], parent = IntegerAt(tree_parents, row);
      if (parent < -1 || parent >= i) {
        Fail("batch.tree_parents[", row, "]: must be in [-1, ", i,
             ") (a new token of the same sequence before it, or -1), got ", parent);
      }
      depths[row] = parent < 0 ? 0 : depths[rows[b] + parent] + 1;
    }
    // Subtree sizes, children (always later rows) first.
    std::fill(subtree_end + rows[b], subtree_end + rows[b + 1], int64_t{1});
    for (int64_t row = rows[b + 1] - 1; row >= rows[b]; --row) {
      const int64_t parent = IntegerAt(tree_parents, row);
      if (parent >= 0) subtree_end[rows[b] + parent] += subtree_end[row];
    }
    // Depth-first places, parents first: a node takes its parent's next free place
    // and moves it past its subtree; its own next free place then lives in
    // subtree_end, which ends at place + size once its children are placed.
    int64_t next_root = 0;
    for (int64_t row = rows[b]; row < rows[b + 1]; ++row) {
      const int64_t parent = IntegerAt(tree_parents, row);
      int64_t& next = parent < 0 ? next_root : subtree_end[rows[b] + parent];
      preorder[row] = next;
      next += subtree_end[row];
      subtree_end[row] = preorder[row] + 1;
    }
  }
  step.has_tree = true;
}

}  // namespace

void PackedStep::Impl::CheckRows(PagedKvCache::Impl& cache, const PackedBatch& batch,
                                 int64_t tokens) {
  if (batch.sequence_ids.shape.rank() != 1) {
    Fail("batch.sequence_ids: expected shape [N], got ",
         batch.sequence_ids.shape.ToString());
  }
  const int64_t n = batch.sequence_ids.shape[0];
  CheckIndexTensor("batch.sequence_ids", batch.sequence_ids, n);
  CheckIndexTensor("batch.query_start_loc", batch.query_start_loc, n + 1);
  if (tokens < 0) tokens = std::max<int64_t>(0, IntegerAt(batch.query_start_loc, n));
  const std::lock_guard<std::mutex> lock(cache.mutex);
  // Distinct live sequences: no more of them than the cache holds. Checked before
  // the buffers are sized from n; rows are sized after each count is checked
  // against the room the cache made.
  if (n > cache.active_sequences) {
    Fail("batch.sequence_ids: ", n, " sequences, but the cache holds ",
         cache.active_sequences);
  }
  Rows& step = next;
  int64_t* ids = Reserve(step.ids, n);
  int64_t* rows = Reserve(step.rows, n + 1);
  int64_t* counts = Reserve(step.counts, n);
  int64_t* first_positions = Reserve(step.first_positions, n);
  uint64_t* versions = Reserve(step.versions, n);
  step.sequences = n;
  step.tokens = tokens;
  step.query_len = step.key_len = 0;
  rows[0] = IntegerAt(batch.query_start_loc, 0);
  if (rows[0] != 0) Fail("batch.query_start_loc[0]: must be 0, got ", rows[0]);
  for (int64_t i = 0; i < n; ++i) {
    ids[i] = IntegerAt(batch.sequence_ids, i);
    rows[i + 1] = IntegerAt(batch.query_start_loc, i + 1);
    // Compared before subtracting: INT64_MIN - rows[i] would overflow.
    if (rows[i + 1] < rows[i] || rows[i + 1] > tokens) {
      Fail("batch.query_start_loc[", i + 1, "]: must be in [", rows[i], ", ", tokens,
           "], got ", rows[i + 1]);
    }
    counts[i] = rows[i + 1] - rows[i];
    const PagedKvCache::Impl::Sequence* found = cache.Find(ids[i]);
    if (!found) {
      Fail("batch.sequence_ids[", i, "]: ", ids[i], " is not a sequence of the cache");
    }
    first_positions[i] = found->length - counts[i];
    versions[i] = found->version;
    // Only the slots the last AppendSlots made are private to the sequence.
    if (first_positions[i] < found->appended_from) {
      Fail("batch: sequence ", ids[i], " has ", counts[i],
           " new tokens but its last cache.AppendSlots made room for ",
           found->length - found->appended_from,
           " (after Fork or Truncate: none); call cache.AppendSlots first");
    }
    step.query_len = std::max(step.query_len, counts[i]);
    step.key_len = std::max(step.key_len, found->length);
  }
  cache.CheckDistinct("batch.sequence_ids", ids, n);
  if (rows[n] != tokens) {
    Fail("batch.query_start_loc[", n, "]: must equal the packed rows T=", tokens,
         ", got ", rows[n]);
  }
}

void PackedStep::Impl::ResolvePositions(const TensorView& position_ids) {
  Rows& step = next;
  step.has_position_ids = position_ids.present();
  int64_t* positions = Reserve(step.positions, step.tokens);
  step.max_position = -1;
  for (int64_t b = 0; b < step.sequences; ++b) {
    for (int64_t row = step.rows[b]; row < step.rows[b + 1]; ++row) {
      const int64_t slot = step.has_tree ? step.depths[row] : row - step.rows[b];
      positions[row] = step.has_position_ids ? IntegerAt(position_ids, row)
                                             : step.first_positions[b] + slot;
      if (positions[row] < 0) {
        Fail("options.position_ids[", row, "]: must be >= 0, got ", positions[row]);
      }
      step.max_position = std::max(step.max_position, positions[row]);
    }
  }
}

void PackedStep::Impl::Plan(PagedKvCache::Impl& target, const PackedBatch& batch,
                            const ForwardOptions& options, int64_t tokens) {
  internal::CheckThreadCount("options.num_threads", options.num_threads);
  if (options.kv_shared) {
    Fail("options.kv_shared: each layer's choice (PackedLayerOptions), not the step's");
  }
  CheckRows(target, batch, tokens);
  next.has_tree = false;
  if (batch.tree_parents.present()) BuildTokenTree(batch.tree_parents, next);
  if (options.position_ids.present()) {
    CheckIndexTensor("options.position_ids", options.position_ids, next.tokens);
  }
  ResolvePositions(options.position_ids);
  std::swap(rows, next);
  cache = &target;
  num_threads = options.num_threads;
  batch_invariant = options.batch_invariant;
  const std::lock_guard<std::mutex> lock(mutex_);
  form_count_ = 0;
}

void PackedStep::Impl::CheckCurrent(int64_t layer) const {
  if (!cache) Fail("step: not planned (call step.Plan(cache, batch) first)");
  if (layer < 0 || layer >= cache->options.num_layers) {
    Fail("layer: must be in [0, ", cache->options.num_layers, "), got ", layer);
  }
  const std::lock_guard<std::mutex> lock(cache->mutex);
  for (int64_t i = 0; i < rows.sequences; ++i) {
    const PagedKvCache::Impl::Sequence* found = cache->Find(rows.ids[i]);
    if (!found || found->version != rows.versions[i]) {
      Fail("step: sequence ", rows.ids[i],
           " changed after the step was planned (AppendSlots, Fork, Truncate, "
           "KeepTokens or RemoveSequence); plan the step again");
    }
  }
}

internal::TokenTree PackedStep::Impl::tree() const {
  if (!rows.has_tree) return {};
  return {rows.intervals.data(), rows.intervals.data() + rows.tokens, rows.rows.data()};
}

const PackedStep::Impl::FormPlan& PackedStep::Impl::PlanFor(
    const internal::AttentionParams& params, const AttentionFeatures& features) const {
  FormPlan key{params.num_heads,
               params.num_kv_heads,
               params.ValueHeadDim(),
               features.sliding_window.value_or(0),
               features.sliding_window_right.value_or(-1),
               features.attention_chunk_size.value_or(0),
               params.split_decode_keys,
               internal::TeamSize(),
               internal::MaskPlan::ForCache(rows.first_positions.data(), rows.key_len,
                                            features, tree()),
               {}};
  const auto same = [&key](const FormPlan& form) {
    return std::tie(form.num_heads, form.num_kv_heads, form.value_head_dim, form.window,
                    form.window_right, form.chunk, form.split_decode_keys,
                    form.threads) ==
           std::tie(key.num_heads, key.num_kv_heads, key.value_head_dim, key.window,
                    key.window_right, key.chunk, key.split_decode_keys, key.threads);
  };
  const std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < form_count_; ++i) {
    if (same(*forms_[i])) return *forms_[i];
  }
  if (form_count_ == forms_.size()) forms_.push_back(std::make_unique<FormPlan>(key));
  FormPlan& form = *forms_[form_count_];
  internal::TaskPlan tasks = std::move(form.tasks);  // its memory, reused
  form = std::move(key);
  form.tasks = std::move(tasks);
  internal::PlanTasks(params, form.masks, form.threads, form.tasks);
  ++form_count_;
  return form;
}

size_t PackedStep::Impl::bytes() const {
  size_t total = 0;
  for (const Rows* buffers : {&rows, &next}) {
    for (const std::vector<int64_t>* buffer :
         {&buffers->ids, &buffers->rows, &buffers->counts, &buffers->first_positions,
          &buffers->depths, &buffers->intervals, &buffers->positions}) {
      total += buffer->capacity() * sizeof(int64_t);
    }
    total += buffers->versions.capacity() * sizeof(uint64_t);
  }
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& form : forms_) {
    total += (form->tasks.tasks.capacity() + form->tasks.unsplit.capacity() +
              form->tasks.candidate.capacity()) *
                 sizeof(internal::CoreTask) +
             form->tasks.groups.capacity() * sizeof(internal::SplitGroup);
  }
  return total;
}

PackedStep::PackedStep() : impl_(std::make_unique<Impl>()) {}
PackedStep::~PackedStep() = default;
PackedStep::PackedStep(PackedStep&&) noexcept = default;
PackedStep& PackedStep::operator=(PackedStep&&) noexcept = default;

void PackedStep::Plan(PagedKvCache& cache, const PackedBatch& batch,
                      const ForwardOptions& options) {
  impl_->Plan(*cache.impl_, batch, options, -1);
}
void PackedStep::Plan(PagedKvCache& cache, const PackedBatch& batch) {
  Plan(cache, batch, ForwardOptions{});
}

bool PackedStep::planned() const { return impl_->cache != nullptr; }
int64_t PackedStep::tokens() const { return impl_->rows.tokens; }

}  // namespace mha

// CoreArguments: validation of the attention-core API's tensors and options.
#include "src/core/core_arguments.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "src/base/check.h"
#include "src/features/call_rotation.h"

namespace mha::internal {
namespace {

// Largest head_dim taken: far above any model's (Gemma: 256), small enough that the
// kernel's per-thread tiles stay a few MiB.
constexpr int64_t kMaxHeadDim = 4096;

struct Sizes {
  int64_t batch, heads, seq, head_dim;
};

// The bytes from a view's first float to its last must be addressable: its pointer
// arithmetic may not overflow.
void CheckViewExtent(const char* name, const Shape& shape, const int64_t* strides) {
  int64_t extent = shape[3];
  for (int axis = 0; axis < 3; ++axis) {
    int64_t span = 0;
    if (__builtin_mul_overflow(shape[axis] - 1, strides[axis], &span) ||
        __builtin_add_overflow(extent, span, &extent) ||
        extent > kMaxAddressableBytes / static_cast<int64_t>(sizeof(float))) {
      Fail(name, ".strides: the view of shape ", shape.ToString(), " with strides [",
           strides[0], ", ", strides[1], ", ", strides[2],
           "] spans more than 2^47 bytes");
    }
  }
}

// Threads write the output's rows at once: no two may share a float. Taken from the
// smallest stride up, each axis must step past everything the smaller ones cover.
void CheckRowsDisjoint(const char* name, const Shape& shape, const int64_t* strides) {
  int order[3] = {0, 1, 2};
  std::sort(order, order + 3, [&](int a, int b) { return strides[a] < strides[b]; });
  int64_t covered = shape[3];  // elements one row spans, then the inner axes do
  for (const int axis : order) {
    if (shape[axis] == 1) continue;
    if (strides[axis] < covered) {
      Fail(name, ".strides: rows overlap (axis ", axis, " steps ", strides[axis],
           " elements, the axes inside it span ", covered, ") for shape ",
           shape.ToString(), "; an output's rows must be disjoint");
    }
    covered = strides[axis] * (shape[axis] - 1) + covered;
  }
}

// Reads [B, H, S, D] sizes whatever the layout and resolves the view's strides.
template <class Tensor, class T>
Sizes CheckTensorView(const char* name, const Tensor& tensor, HeadLayout layout,
                      HeadRows<T>* rows) {
  const bool bhsd = layout == HeadLayout::kBHSD;
  const Shape& shape = tensor.shape;
  if (tensor.dtype != DType::kFloat32) {
    Fail(name, ": expected dtype float32, got ", DTypeName(tensor.dtype));
  }
  if (shape.rank() != 4) {
    Fail(name, ": expected rank 4 (", bhsd ? "[B, H, S, D]" : "[B, S, H, D]",
         "), got shape ", shape.ToString());
  }
  CheckedNumElements(name, shape, sizeof(float));
  const Sizes sizes{shape[0], bhsd ? shape[1] : shape[2], bhsd ? shape[2] : shape[1],
                    shape[3]};
  if (sizes.batch < 1 || sizes.heads < 1 || sizes.seq < 1 || sizes.head_dim < 1) {
    Fail(name, ": every dimension must be >= 1, got shape ", shape.ToString());
  }
  if (!tensor.data) Fail(name, ": data is null for shape ", shape.ToString());
  int64_t strides[3] = {tensor.strides[0], tensor.strides[1], tensor.strides[2]};
  if (!strides[0] && !strides[1] && !strides[2]) {  // dense
    strides[2] = shape[3];
    strides[1] = shape[2] * strides[2];
    strides[0] = shape[1] * strides[1];
  }
  for (int axis = 0; axis < 3; ++axis) {
    if (strides[axis] < sizes.head_dim && shape[axis] > 1) {
      Fail(name, ".strides[", axis, "]: must be >= head_dim ", sizes.head_dim,
           " (rows may not overlap), got ", strides[axis], " for shape ",
           shape.ToString());
    }
  }
  CheckViewExtent(name, shape, strides);
  if constexpr (std::is_same_v<T, float>) CheckRowsDisjoint(name, shape, strides);
  T* data = static_cast<T*>(tensor.data);
  *rows = bhsd ? HeadRows<T>{data, strides[0], strides[1], strides[2]}
               : HeadRows<T>{data, strides[0], strides[2], strides[1]};
  return sizes;
}

void CheckSame(const char* what, const char* name, int64_t expected, int64_t got) {
  if (expected != got) Fail(name, ": ", what, " must be ", expected, ", got ", got);
}

}  // namespace

CoreArguments::CoreArguments(const TensorView& query, const TensorView& key,
                             const TensorView& value, const AttentionMasks& masks,
                             const MutableTensorView& output, const CoreOptions& options,
                             const MutableTensorView& logsumexp) {
  Check(query, key, value, masks, output, options, logsumexp);
}

void CoreArguments::Check(const TensorView& query_view, const TensorView& key_view,
                          const TensorView& value_view, const AttentionMasks& mask_views,
                          const MutableTensorView& output_view,
                          const CoreOptions& options,
                          const MutableTensorView& logsumexp) {
  CheckThreadCount("options.num_threads", options.num_threads);
  CheckComputeDtype("options.compute_dtype", options.compute_dtype);
  if (options.layout != HeadLayout::kBHSD && options.layout != HeadLayout::kBSHD) {
    Fail("options.layout: unknown value ", static_cast<int>(options.layout));
  }
  CheckSizes(query_view, key_view, value_view, output_view, options.layout);
  if (logsumexp.present()) {
    CheckOutput("logsumexp", logsumexp, Shape{batch, num_heads, query_len});
  }
  scale = options.scale ? *options.scale : 1.0f / std::sqrt(float(head_dim));
  if (!std::isfinite(scale)) {
    Fail("options.scale: must be finite, got ", scale);
  }
  sizes.batch_size = batch;
  sizes.query_len = query_len;
  sizes.key_len = key_len;
  ValidateFeatures(options.features, num_heads);
  masks.emplace(mask_views, options.features, sizes, num_heads);
  logits.Set(options.features, options.sinks, num_heads, "options.sinks");
  if (options.features.qk_norm &&
      options.features.qk_norm->scope != QkNormScope::kPerHead) {
    Fail(
        "options.features.qk_norm.scope: the core normalises each head's rows "
        "(kPerHead); a norm across heads belongs to the layer's projections");
  }
  qk_norm.Set(options.features.qk_norm, options.query_norm_weight,
              options.key_norm_weight, num_heads, num_kv_heads, head_dim, "options.");
  if (!qk_norm.value_ones.empty() && value_head_dim != head_dim) {
    Fail("options.features.qk_norm.value_norm: needs the value's head_dim (",
         value_head_dim, ") equal to the key's (", head_dim, ")");
  }
  ResolveRotary(options, mask_views.causal_alignment);
}

void CoreArguments::CheckSizes(const TensorView& query_view, const TensorView& key_view,
                               const TensorView& value_view,
                               const MutableTensorView& output_view, HeadLayout layout) {
  const Sizes q = CheckTensorView("query", query_view, layout, &query);
  const Sizes k = CheckTensorView("key", key_view, layout, &key);
  const Sizes v = CheckTensorView("value", value_view, layout, &value);
  const Sizes o = CheckTensorView("output", output_view, layout, &output);
  batch = q.batch;
  num_heads = q.heads;
  num_kv_heads = k.heads;
  query_len = q.seq;
  key_len = k.seq;
  head_dim = q.head_dim;
  if (head_dim > kMaxHeadDim) {
    Fail("query: head_dim must be <= ", kMaxHeadDim, ", got ", head_dim);
  }
  CheckSame("batch (query's)", "key", batch, k.batch);
  CheckSame("batch (query's)", "value", batch, v.batch);
  CheckSame("head_dim (query's)", "key", head_dim, k.head_dim);
  value_head_dim = v.head_dim;  // may differ from the keys', as in PyTorch
  if (value_head_dim > kMaxHeadDim) {
    Fail("value: head_dim must be <= ", kMaxHeadDim, ", got ", value_head_dim);
  }
  CheckSame("heads (key's)", "value", num_kv_heads, v.heads);
  CheckSame("sequence length (key's)", "value", key_len, v.seq);
  if (num_heads % num_kv_heads != 0) {
    Fail("key: heads ", num_kv_heads, " must divide the query's heads ", num_heads);
  }
  if (o.batch != batch || o.heads != num_heads || o.seq != query_len ||
      o.head_dim != value_head_dim) {
    Fail("output: expected sizes [B=", batch, ", H=", num_heads, ", S=", query_len,
         ", D=", value_head_dim, " (value's)] in its layout, got shape ",
         output_view.shape.ToString());
  }
}

void CoreArguments::ResolveRotary(const CoreOptions& options, CausalAlignment alignment) {
  rotary = query_rotary = key_rotary = options.rotary;
  query_rows = key_rows = nullptr;
  if (!rotary) {
    if (options.query_positions.present() || options.key_positions.present()) {
      Fail("options.query_positions/key_positions: given without options.rotary");
    }
    return;
  }
  CheckSame("head_dim (query's)", "options.rotary", head_dim, rotary->head_dim());
  query_positions.resize(batch * query_len);
  key_positions.resize(batch * key_len);
  // A query sits at one position for its mask, window, ALiBi and rotation alike:
  // i top-left aligned, Sk - Sq + i bottom-right aligned.
  const bool bottom_right = alignment == CausalAlignment::kBottomRight;
  query_offsets.assign(batch, bottom_right ? key_len - query_len : 0);
  ResolvePositions("options.query_positions", options.query_positions, batch, query_len,
                   true, query_offsets.data(), *rotary, query_positions.data());
  ResolvePositions("options.key_positions", options.key_positions, batch, key_len, true,
                   nullptr, *rotary, key_positions.data());
  query_rows = query_positions.data();
  key_rows = key_positions.data();
  if (!rotary->dynamic()) return;
  // transformers' seq_len: the sequence's largest position + 1, queries and keys alike.
  sequence_lengths.assign(batch, 0);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < query_len; ++i) {
      sequence_lengths[b] =
          std::max(sequence_lengths[b], query_positions[b * query_len + i] + 1);
    }
    for (int64_t j = 0; j < key_len; ++j) {
      sequence_lengths[b] =
          std::max(sequence_lengths[b], key_positions[b * key_len + j] + 1);
    }
  }
  const RotaryRows queries = Rotate(query_rotation, query_positions, query_len);
  const RotaryRows keys = Rotate(key_rotation, key_positions, key_len);
  query_rotary = queries.table;
  query_rows = queries.positions;
  key_rotary = keys.table;
  key_rows = keys.positions;
}

RotaryRows CoreArguments::Rotate(CallRotation& rotation,
                                 const std::vector<int64_t>& positions, int64_t len) {
  row_starts.resize(batch + 1);
  for (int64_t b = 0; b <= batch; ++b) row_starts[b] = b * len;
  return rotation.Resolve(*rotary, positions.data(), batch * len, row_starts.data(),
                          nullptr, batch, sequence_lengths.data());
}

}  // namespace mha::internal

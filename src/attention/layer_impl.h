// MultiheadAttention::Impl: the layer's packed weights, primitives and workspace
// pool, shared by its forward flows (multihead_attention.cc: whole and chunked;
// decode.cc: with a KV cache), and the row views those flows hand the attention core.
#pragma once

#include <cstdint>

#include "mha/attention.hpp"
#include "src/api/problem.h"
#include "src/attention/kv_cache_storage.h"
#include "src/attention/workspace.h"
#include "src/kernels/attention_head.h"
#include "src/masks/mask_plan.h"
#include "src/planning/linear_primitive.h"
#include "src/planning/packed_weights.h"

namespace mha {
namespace internal {

// Rows of a matrix per batch element: row i of batch b starts at
// data + b * batch_stride + i * row_stride.
template <class T>
struct Rows {
  T* data = nullptr;
  int64_t batch_stride = 0, row_stride = 0;
  T* Row(int64_t batch, int64_t row) const {
    return data + batch * batch_stride + row * row_stride;
  }
};

// One call of the attention core: queries [first_query, first_query + query_count)
// of batches [batch_begin, batch_end); Row(b, 0) of query/context is first_query's.
struct AttendSlab {
  int64_t batch_begin = 0, batch_end = 0, first_query = 0, query_count = 0;
  Rows<const float> query, key, value;
  Rows<float> context;
  float* probabilities = nullptr;  // [B, num_heads, Sq, Sk], or null
  // Decoding: keys and values from the cache's panels, and per-batch query counts.
  KvCache::Impl* cache = nullptr;
  const int64_t* query_counts = nullptr;
};

}  // namespace internal

struct MultiheadAttention::Impl {
  enum LinearIndex {
    kQueryLinear,
    kKeyLinear,
    kValueLinear,
    kFusedLinear,
    kOutputLinear
  };

  Impl(const AttentionConfig& layer_config, const AttentionWeights& weights);

  void Forward(const AttentionInputs& inputs, const AttentionMasks& masks,
               const AttentionOutputs& outputs, const ForwardOptions& options) const;
  void ForwardWhole(const internal::Problem& problem, const internal::MaskPlan& masks,
                    const AttentionOutputs& outputs, bool average,
                    internal::Workspace& workspace) const;
  void ForwardInChunks(const internal::Problem& problem, const internal::MaskPlan& masks,
                       bool values_in_output, int64_t chunk_rows,
                       const AttentionOutputs& outputs,
                       internal::Workspace& workspace) const;
  void Attend(const internal::Problem& problem, const internal::MaskPlan& masks,
              const internal::AttendSlab& slab, internal::Workspace& workspace) const;
  internal::HeadTask MakeTask(const internal::Problem& problem,
                              const internal::AttendSlab& slab, int64_t batch,
                              int64_t head, int64_t heads_per_task) const;
  void RunFlow(const internal::Problem& problem, const internal::MaskPlan& mask_plan,
               bool is_causal, const AttentionOutputs& outputs,
               const ForwardOptions& options, internal::Workspace& workspace) const;
  MutableTensorView StageOutput(const MutableTensorView& output,
                                internal::Workspace& workspace) const;
  void FinishOutput(const MutableTensorView& staged,
                    const MutableTensorView& output) const;
  int ThreadsFor(const internal::Problem& problem, const ForwardOptions& options) const;
  void ForwardWithCache(const TensorView& query, const TensorView& new_lengths,
                        KvCache::Impl& cache, const MutableTensorView& output,
                        const ForwardOptions& options) const;
  internal::Problem ValidateCacheCall(const TensorView& query,
                                      const TensorView& new_lengths,
                                      const KvCache::Impl& cache,
                                      const MutableTensorView& output,
                                      const ForwardOptions& options,
                                      internal::Workspace& workspace) const;
  void AppendToCache(const internal::Problem& problem, const float* qkv,
                     KvCache::Impl& cache, const int64_t* new_lengths) const;
  // Projects `rows` rows of `input` with linears[index] into `output`.
  void Linear(int index, const float* input, int64_t rows, float* output,
              internal::Workspace& workspace) const {
    linears[index].Execute(workspace.stream, input, /*input_bf16=*/false, rows, output,
                           workspace.calls[index], workspace.scratchpad);
  }
  // Projects rows [first_row, first_row + rows) of a caller's fp32 or bf16 input.
  void Linear(int index, const TensorView& input, int64_t first_row, int64_t rows,
              float* output, internal::Workspace& workspace) const {
    const int64_t width = input.shape[input.shape.rank() - 1];
    const auto* bytes = static_cast<const uint8_t*>(input.data);
    linears[index].Execute(workspace.stream,
                           bytes + first_row * width * DTypeSize(input.dtype),
                           input.dtype == DType::kBFloat16, rows, output,
                           workspace.calls[index], workspace.scratchpad);
  }

  AttentionConfig config;
  int64_t output_dim;
  dnnl::engine engine;
  internal::PackedWeights packed;
  internal::LinearPrimitive linears[5];
  bool has_output = false;
  mutable internal::WorkspacePool workspaces;
};

}  // namespace mha

// MultiheadAttention: packs weights and creates primitives once; each Forward leases
// a workspace, runs the projections (oneDNN), per-(batch, head) attention (Highway,
// OpenMP) and the output projection (oneDNN).
#include "mha/attention.hpp"

#include <algorithm>

#include "src/api/problem.h"
#include "src/attention/workspace.h"
#include "src/kernels/attention_head.h"
#include "src/masks/mask_plan.h"
#include "src/planning/linear_primitive.h"
#include "src/planning/packed_weights.h"
#include "src/planning/weight_layout.h"
#include "src/threading/parallel_for.h"

namespace mha {

using internal::LinearPrimitive;
using internal::PackedProjection;
using internal::PackedWeights;
using internal::Problem;
using internal::Workspace;

namespace {

enum LinearIndex { kQueryLinear, kKeyLinear, kValueLinear, kFusedLinear, kOutputLinear };

// Below about this many multiply-adds (projections plus attention) a forward runs on
// one thread: waking a second costs more than it saves. The measured crossover lies
// between 0.8e5 and 3e5 (docs/performance.md).
constexpr double kSingleThreadBelow = 1 << 17;

LinearPrimitive MakeLinear(const dnnl::engine& engine, const PackedProjection& packed,
                           int64_t output_stride) {
  return LinearPrimitive(engine, {packed.in_dim, packed.out_dim, packed.stride, output_stride},
                         packed.weights, packed.bias);
}

// Where the attention finds the projected Q, K and V rows of every head.
struct ProjectedInputs {
  const float* rows[3] = {};  // query, key, value
  int64_t strides[3] = {};
};

// averaged[b, i] = mean over heads of per_head[b, h, i], i < plane.
void AverageHeads(const float* per_head, int64_t batch_size, int64_t num_heads,
                  int64_t plane, float* averaged) {
  const float inverse = 1.0f / static_cast<float>(num_heads);
  for (int64_t b = 0; b < batch_size; ++b) {
    float* out = averaged + b * plane;
    std::fill(out, out + plane, 0.0f);
    for (int64_t h = 0; h < num_heads; ++h) {
      const float* in = per_head + (b * num_heads + h) * plane;
      for (int64_t i = 0; i < plane; ++i) out[i] += in[i];
    }
    for (int64_t i = 0; i < plane; ++i) out[i] *= inverse;
  }
}

}  // namespace

struct MultiheadAttention::Impl {
  Impl(const AttentionConfig& layer_config, const AttentionWeights& weights);

  void Forward(const AttentionInputs& inputs, const AttentionMasks& masks,
               const AttentionOutputs& outputs, const ForwardOptions& options) const;
  ProjectedInputs Project(const Problem& problem, Workspace& workspace) const;
  void Attend(const Problem& problem, const internal::MaskPlan& masks,
              const ProjectedInputs& projected, float* context, float* probabilities,
              Workspace& workspace) const;
  int ThreadsFor(const Problem& problem, const ForwardOptions& options) const;

  AttentionConfig config;
  int64_t output_dim;
  PackedWeights packed;
  dnnl::engine engine;
  LinearPrimitive linears[5];
  bool has_output = false;
  mutable internal::WorkspacePool workspaces;
};

MultiheadAttention::Impl::Impl(const AttentionConfig& layer_config,
                               const AttentionWeights& weights)
    : config(layer_config),
      output_dim(internal::ValidateLayer(layer_config, weights)),
      packed(layer_config, weights, output_dim),
      engine(dnnl::engine::kind::cpu, 0),
      workspaces(engine) {
  const int64_t model_dim = config.model_dim();
  for (int input = PackedWeights::kQuery; input <= PackedWeights::kValue; ++input) {
    linears[input] = MakeLinear(
        engine, packed.InputProjection(static_cast<PackedWeights::Input>(input)), model_dim);
  }
  if (packed.qkv_fused()) {
    linears[kFusedLinear] = MakeLinear(engine, packed.FusedQkv(), 3 * model_dim);
  }
  has_output = packed.OutputProjection().weights != nullptr;
  if (has_output) {
    linears[kOutputLinear] = MakeLinear(engine, packed.OutputProjection(), output_dim);
  }
}

ProjectedInputs MultiheadAttention::Impl::Project(const Problem& problem,
                                                  Workspace& workspace) const {
  const int64_t model_dim = config.model_dim();
  const int64_t query_rows = problem.batch_size * problem.query_len;
  const int64_t key_rows = problem.batch_size * problem.key_len;
  ProjectedInputs projected;
  if (problem.self_attention && packed.qkv_fused()) {
    float* qkv = Workspace::Reserve(workspace.projections, query_rows * 3 * model_dim);
    linears[kFusedLinear].Execute(workspace.stream, problem.query.floats(), query_rows, qkv,
                                  workspace.calls[kFusedLinear], workspace.scratchpad);
    for (int input = 0; input < 3; ++input) {
      projected.rows[input] = qkv + input * model_dim;
      projected.strides[input] = 3 * model_dim;
    }
    return projected;
  }
  const TensorView* sources[3] = {&problem.query, &problem.key, &problem.value};
  const int64_t rows[3] = {query_rows, key_rows, key_rows};
  float* next = Workspace::Reserve(workspace.projections, (query_rows + 2 * key_rows) * model_dim);
  for (int input = 0; input < 3; ++input) {
    linears[input].Execute(workspace.stream, sources[input]->floats(), rows[input], next,
                           workspace.calls[input], workspace.scratchpad);
    projected.rows[input] = next;
    projected.strides[input] = model_dim;
    next += rows[input] * model_dim;
  }
  return projected;
}

void MultiheadAttention::Impl::Attend(const Problem& problem, const internal::MaskPlan& masks,
                                      const ProjectedInputs& projected, float* context,
                                      float* probabilities, Workspace& workspace) const {
  const int64_t num_heads = config.num_heads, head_dim = config.head_dim;
  const int64_t sq = problem.query_len, sk = problem.key_len;
  const internal::HeadScratch layout(sk, head_dim, probabilities != nullptr);
  float* scratch = Workspace::Reserve(workspace.head_scratch,
                                      internal::TeamSize() * layout.total_floats);
  internal::ParallelFor(
      problem.batch_size * num_heads, scratch, layout.total_floats,
      [&](int64_t task_index, float* thread_scratch) {
        internal::HeadTask task;
        task.batch = task_index / num_heads;
        task.head = task_index % num_heads;
        task.query_len = sq;
        task.key_len = sk;
        task.head_dim = head_dim;
        const int64_t first_row[3] = {task.batch * sq, task.batch * sk, task.batch * sk};
        const float** starts[3] = {&task.query, &task.key, &task.value};
        int64_t* strides[3] = {&task.query_stride, &task.key_stride, &task.value_stride};
        for (int input = 0; input < 3; ++input) {
          *starts[input] = projected.rows[input] +
                           first_row[input] * projected.strides[input] + task.head * head_dim;
          *strides[input] = projected.strides[input];
        }
        task.context_stride = config.model_dim();
        task.context = context + task.batch * sq * task.context_stride + task.head * head_dim;
        task.probabilities = probabilities ? probabilities + task_index * sq * sk : nullptr;
        internal::AttendHead(task, masks, layout, thread_scratch);
      });
}

int MultiheadAttention::Impl::ThreadsFor(const Problem& problem,
                                         const ForwardOptions& options) const {
  if (options.num_threads > 0) return options.num_threads;
  const double rows = double(problem.batch_size) * (problem.query_len + problem.key_len);
  const double work = rows * config.model_dim() *
                      (double(config.query_dim) + double(problem.key_len) + output_dim);
  return work < kSingleThreadBelow ? 1 : 0;
}

void MultiheadAttention::Impl::Forward(const AttentionInputs& inputs,
                                       const AttentionMasks& masks,
                                       const AttentionOutputs& outputs,
                                       const ForwardOptions& options) const {
  const Problem problem = internal::ValidateForward(config, output_dim, inputs, outputs, options);
  const internal::MaskPlan mask_plan(masks, problem, config.num_heads);
  // Everything is checked: from here on outputs are written.
  const internal::ScopedThreadCount thread_count(ThreadsFor(problem, options));
  const internal::WorkspacePool::Lease workspace = workspaces.Acquire();
  const ProjectedInputs projected = Project(problem, *workspace);

  const int64_t query_rows = problem.batch_size * problem.query_len;
  // Without an output projection the heads merge straight into the output.
  float* context = has_output ? Workspace::Reserve(workspace->merged_heads,
                                                   query_rows * config.model_dim())
                              : outputs.output.data;
  const bool average = outputs.attn_weights.present() && options.average_attn_weights;
  float* probabilities =
      average ? Workspace::Reserve(workspace->per_head_weights,
                                   query_rows * config.num_heads * problem.key_len)
              : outputs.attn_weights.data;
  Attend(problem, mask_plan, projected, context, probabilities, *workspace);
  if (has_output) {
    linears[kOutputLinear].Execute(workspace->stream, context, query_rows,
                                   outputs.output.data, workspace->calls[kOutputLinear],
                                   workspace->scratchpad);
  }
  if (average) {
    AverageHeads(probabilities, problem.batch_size, config.num_heads,
                 problem.query_len * problem.key_len, outputs.attn_weights.data);
  }
}

void MultiheadAttention::Forward(const AttentionInputs& inputs, const AttentionMasks& masks,
                                 const AttentionOutputs& outputs,
                                 const ForwardOptions& options) const {
  impl_->Forward(inputs, masks, outputs, options);
}

MultiheadAttention::MultiheadAttention(const AttentionConfig& config,
                                       const AttentionWeights& weights)
    : impl_(std::make_unique<Impl>(config, weights)) {}
MultiheadAttention::~MultiheadAttention() = default;
MultiheadAttention::MultiheadAttention(MultiheadAttention&&) noexcept = default;
MultiheadAttention& MultiheadAttention::operator=(MultiheadAttention&&) noexcept = default;

const AttentionConfig& MultiheadAttention::config() const { return impl_->config; }
int64_t MultiheadAttention::output_dim() const { return impl_->output_dim; }

}  // namespace mha

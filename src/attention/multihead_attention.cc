// MultiheadAttention: packs weights and creates primitives once; each Forward runs
// projections (oneDNN), per-(batch, head) attention (Highway, OpenMP) and the output
// projection (oneDNN).
#include "mha/attention.hpp"

#include <algorithm>
#include <vector>

#include "src/api/problem.h"
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

namespace {

LinearPrimitive MakeLinear(const dnnl::engine& engine, const PackedProjection& packed,
                           int64_t output_stride) {
  return LinearPrimitive(engine,
                         {packed.in_dim, packed.out_dim, packed.stride, output_stride},
                         packed.weights, packed.bias);
}

// Where Forward finds the projected Q, K and V rows of every head.
struct ProjectedInputs {
  const float* rows[3] = {};  // query, key, value
  int64_t strides[3] = {};
};

// averaged[b, i] = mean over heads of per_head[b, h, i], i < plane.
void AverageHeads(const float* per_head, int64_t batch_size, int64_t num_heads,
                  int64_t plane, float* averaged) {
  const float inverse = 1.0f / static_cast<float>(num_heads);
#pragma omp parallel for schedule(static) if (batch_size * plane > (1 << 16))
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
  Impl(const AttentionConfig& layer_config, const AttentionWeights& weights)
      : config(layer_config),
        output_dim(internal::ValidateLayer(layer_config, weights)),
        packed(layer_config, weights, output_dim),
        engine(dnnl::engine::kind::cpu, 0) {
    const int64_t model_dim = config.model_dim();
    if (packed.qkv_fused()) qkv = MakeLinear(engine, packed.FusedQkv(), 3 * model_dim);
    for (int input = PackedWeights::kQuery; input <= PackedWeights::kValue; ++input) {
      inputs[input] = MakeLinear(
          engine, packed.InputProjection(static_cast<PackedWeights::Input>(input)),
          model_dim);
    }
    has_output = packed.OutputProjection().weights != nullptr;
    if (has_output) output = MakeLinear(engine, packed.OutputProjection(), output_dim);
  }

  size_t ScratchpadBytes() const {
    size_t bytes = std::max(qkv.scratchpad_bytes(), output.scratchpad_bytes());
    for (const LinearPrimitive& input : inputs)
      bytes = std::max(bytes, input.scratchpad_bytes());
    return bytes;
  }

  ProjectedInputs Project(const internal::Problem& problem, dnnl::stream& stream,
                          std::vector<float>& workspace, void* scratchpad) const;
  void Forward(const AttentionInputs& inputs, const AttentionMasks& masks,
               const AttentionOutputs& outputs, const ForwardOptions& options) const;
  void Attend(const internal::Problem& problem, const internal::MaskPlan& masks,
              const ProjectedInputs& projected, float* context,
              float* probabilities) const;

  AttentionConfig config;
  int64_t output_dim;
  PackedWeights packed;
  dnnl::engine engine;
  LinearPrimitive qkv, inputs[3], output;
  bool has_output = false;
};

ProjectedInputs MultiheadAttention::Impl::Project(const internal::Problem& problem,
                                                  dnnl::stream& stream,
                                                  std::vector<float>& workspace,
                                                  void* scratchpad) const {
  const int64_t model_dim = config.model_dim();
  const int64_t query_rows = problem.batch_size * problem.query_len;
  const int64_t key_rows = problem.batch_size * problem.key_len;
  ProjectedInputs projected;
  if (problem.self_attention && packed.qkv_fused()) {
    workspace.resize(query_rows * 3 * model_dim);
    qkv.Execute(stream, problem.query.floats(), query_rows, workspace.data(), scratchpad);
    for (int input = 0; input < 3; ++input) {
      projected.rows[input] = workspace.data() + input * model_dim;
      projected.strides[input] = 3 * model_dim;
    }
    return projected;
  }
  const TensorView* sources[3] = {&problem.query, &problem.key, &problem.value};
  const int64_t rows[3] = {query_rows, key_rows, key_rows};
  workspace.resize((query_rows + 2 * key_rows) * model_dim);
  float* next = workspace.data();
  for (int input = 0; input < 3; ++input) {
    inputs[input].Execute(stream, sources[input]->floats(), rows[input], next,
                          scratchpad);
    projected.rows[input] = next;
    projected.strides[input] = model_dim;
    next += rows[input] * model_dim;
  }
  return projected;
}

void MultiheadAttention::Impl::Attend(const internal::Problem& problem,
                                      const internal::MaskPlan& masks,
                                      const ProjectedInputs& projected, float* context,
                                      float* probabilities) const {
  const int64_t num_heads = config.num_heads, head_dim = config.head_dim;
  const int64_t sq = problem.query_len, sk = problem.key_len;
  const internal::HeadScratch layout(sk, head_dim, probabilities != nullptr);
  internal::ParallelFor(
      problem.batch_size * num_heads, layout.total_floats,
      [&](int64_t task_index, float* scratch) {
        internal::HeadTask task;
        task.batch = task_index / num_heads;
        task.head = task_index % num_heads;
        task.query_len = sq;
        task.key_len = sk;
        task.head_dim = head_dim;
        const int64_t first_row[3] = {task.batch * sq, task.batch * sk, task.batch * sk};
        const float* starts[3];
        for (int input = 0; input < 3; ++input) {
          starts[input] = projected.rows[input] +
                          first_row[input] * projected.strides[input] +
                          task.head * head_dim;
        }
        task.query = starts[0];
        task.key = starts[1];
        task.value = starts[2];
        task.query_stride = projected.strides[0];
        task.key_stride = projected.strides[1];
        task.value_stride = projected.strides[2];
        task.context_stride = config.model_dim();
        task.context =
            context + task.batch * sq * task.context_stride + task.head * head_dim;
        task.probabilities =
            probabilities ? probabilities + task_index * sq * sk : nullptr;
        internal::AttendHead(task, masks, layout, scratch);
      });
}

void MultiheadAttention::Impl::Forward(const AttentionInputs& inputs,
                                       const AttentionMasks& masks,
                                       const AttentionOutputs& outputs,
                                       const ForwardOptions& options) const {
  const internal::Problem problem =
      internal::ValidateForward(config, output_dim, inputs, outputs, options);
  const internal::MaskPlan mask_plan(masks, problem, config.num_heads);
  // Everything is checked: from here on outputs are written.
  const internal::ScopedThreadCount thread_count(options.num_threads);
  dnnl::stream stream(engine);
  std::vector<uint8_t> scratchpad(ScratchpadBytes());
  std::vector<float> projections;
  const ProjectedInputs projected =
      Project(problem, stream, projections, scratchpad.data());

  const int64_t query_rows = problem.batch_size * problem.query_len;
  std::vector<float> merged_heads;
  float* context = outputs.output.data;  // without an output projection: the output
  if (has_output) {
    merged_heads.resize(query_rows * config.model_dim());
    context = merged_heads.data();
  }
  const bool average = outputs.attn_weights.present() && options.average_attn_weights;
  std::vector<float> per_head;
  float* probabilities = outputs.attn_weights.data;
  if (average) {
    per_head.resize(query_rows * config.num_heads * problem.key_len);
    probabilities = per_head.data();
  }
  Attend(problem, mask_plan, projected, context, probabilities);
  if (has_output) {
    output.Execute(stream, context, query_rows, outputs.output.data, scratchpad.data());
  }
  if (average) {
    AverageHeads(per_head.data(), problem.batch_size, config.num_heads,
                 problem.query_len * problem.key_len, outputs.attn_weights.data);
  }
}

void MultiheadAttention::Forward(const AttentionInputs& inputs,
                                 const AttentionMasks& masks,
                                 const AttentionOutputs& outputs,
                                 const ForwardOptions& options) const {
  impl_->Forward(inputs, masks, outputs, options);
}

MultiheadAttention::MultiheadAttention(const AttentionConfig& config,
                                       const AttentionWeights& weights)
    : impl_(std::make_unique<Impl>(config, weights)) {}
MultiheadAttention::~MultiheadAttention() = default;
MultiheadAttention::MultiheadAttention(MultiheadAttention&&) noexcept = default;
MultiheadAttention& MultiheadAttention::operator=(MultiheadAttention&&) noexcept =
    default;

const AttentionConfig& MultiheadAttention::config() const { return impl_->config; }
int64_t MultiheadAttention::output_dim() const { return impl_->output_dim; }

}  // namespace mha

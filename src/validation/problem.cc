// Validation of configs and forward-call arguments.
#include "src/validation/problem.h"

#include <cmath>

#include "src/base/check.h"
#include "src/features/logit_features.h"

namespace mha::internal {
namespace {

void CheckPositive(const char* name, int64_t value) {
  if (value <= 0) Fail("config.", name, ": must be > 0, got ", value);
}

// Checks a [B, S, dim] or [S, dim] input and returns its (batch, length).
void CheckInput(const char* name, const TensorView& tensor, int64_t dim, bool batched,
                int64_t* batch_size, int64_t* length) {
  if (!tensor.present()) Fail(name, ": data is null");
  const Shape& shape = tensor.shape;
  const int rank = batched ? 3 : 2;
  if (shape.rank() != rank) {
    Fail(name, ": expected rank ", rank, " (", batched ? "[B, S, " : "[S, ", dim,
         "]), got shape ", shape.ToString());
  }
  *batch_size = batched ? shape[0] : 1;
  *length = shape[rank - 2];
  if (*batch_size < 1 || *length < 1) {
    Fail(name, ": batch and sequence length must be >= 1, got shape ", shape.ToString());
  }
  if (shape[rank - 1] != dim) {
    Fail(name, ": last dimension must be ", dim, ", got shape ", shape.ToString());
  }
  if (tensor.dtype != DType::kFloat32 && tensor.dtype != DType::kBFloat16) {
    Fail(name, ": expected dtype float32 or bfloat16, got ", DTypeName(tensor.dtype));
  }
  CheckTensor(name, tensor, tensor.dtype, shape);
}

Shape Batched(bool batched, int64_t batch_size, const Shape& rest) {
  return batched ? rest.Prepended(batch_size) : rest;
}

}  // namespace

void ValidateConfig(const AttentionConfig& config) {
  CheckPositive("num_heads", config.num_heads);
  CheckPositive("head_dim", config.head_dim);
  CheckPositive("query_dim", config.query_dim);
  if (config.key_dim < 0) Fail("config.key_dim: must be >= 0, got ", config.key_dim);
  if (config.value_dim < 0)
    Fail("config.value_dim: must be >= 0, got ", config.value_dim);
  int64_t model_dim = 0;
  if (__builtin_mul_overflow(config.num_heads, config.head_dim, &model_dim) ||
      model_dim > (int64_t{1} << 31)) {
    Fail("config: num_heads * head_dim too large (num_heads=", config.num_heads,
         ", head_dim=", config.head_dim, ")");
  }
  if (config.num_kv_heads < 0 ||
      (config.num_kv_heads && config.num_heads % config.num_kv_heads != 0)) {
    Fail("config.num_kv_heads: must divide num_heads ", config.num_heads, ", got ",
         config.num_kv_heads);
  }
  if (config.weight_dtype != DType::kFloat32 && config.weight_dtype != DType::kBFloat16 &&
      config.weight_dtype != DType::kInt8) {
    Fail("config.weight_dtype: must be float32, bfloat16 or int8, got ",
         DTypeName(config.weight_dtype));
  }
  CheckComputeDtype("config.compute_dtype", config.compute_dtype);
  if (config.scale && !(std::isfinite(*config.scale) && *config.scale != 0.0f)) {
    Fail("config.scale: must be finite and non-zero, got ", *config.scale);
  }
  ValidateFeatures(config.features, config.num_heads);
}

Problem ValidateForward(const AttentionConfig& config, int64_t output_dim,
                        const AttentionInputs& inputs, const AttentionOutputs& outputs,
                        const ForwardOptions& options) {
  CheckThreadCount("options.num_threads", options.num_threads);
  if (!(options.workspace_budget_bytes > 0.0)) {
    Fail("options.workspace_budget_bytes: must be > 0, got ",
         options.workspace_budget_bytes);
  }
  Problem problem;
  problem.query = inputs.query;
  problem.key = inputs.key.present() ? inputs.key : inputs.query;
  problem.value = inputs.value.present() ? inputs.value : inputs.query;
  problem.batched = inputs.query.shape.rank() != 2;
  problem.self_attention = problem.key.data == problem.query.data &&
                           problem.value.data == problem.query.data &&
                           problem.key.shape == problem.query.shape &&
                           problem.value.shape == problem.query.shape;

  int64_t key_batch = 0, value_batch = 0, value_len = 0;
  CheckInput("query", problem.query, config.query_dim, problem.batched,
             &problem.batch_size, &problem.query_len);
  CheckInput("key", problem.key, config.resolved_key_dim(), problem.batched, &key_batch,
             &problem.key_len);
  CheckInput("value", problem.value, config.resolved_value_dim(), problem.batched,
             &value_batch, &value_len);
  if (key_batch != problem.batch_size || value_batch != problem.batch_size) {
    Fail("key/value: batch size must match query's ", problem.batch_size, ", got key ",
         problem.key.shape.ToString(), " and value ", problem.value.shape.ToString());
  }
  if (value_len != problem.key_len) {
    Fail("value: sequence length must match key's ", problem.key_len, ", got value ",
         problem.value.shape.ToString());
  }

  const int64_t b = problem.batch_size, sq = problem.query_len, sk = problem.key_len;
  CheckOutput("outputs.output", outputs.output,
              Batched(problem.batched, b, Shape{sq, output_dim}), /*bf16_allowed=*/true);
  if (outputs.attn_weights.present()) {
    const Shape expected =
        options.average_attn_weights
            ? Batched(problem.batched, b, Shape{sq, sk})
            : Batched(problem.batched, b, Shape{config.num_heads, sq, sk});
    CheckOutput("outputs.attn_weights", outputs.attn_weights, expected);
  }
  return problem;
}

}  // namespace mha::internal

// QK-norm's weights checked and resolved.
#include "src/features/qk_norm.h"

#include <cmath>
#include <string>

#include "src/base/check.h"

namespace mha::internal {
namespace {

// Names are built only for errors: the core API's repeated calls allocate nothing.
void Keep(const TensorView& view, int64_t width, bool unit_offset, const char* prefix,
          const char* name, std::vector<float>& out) {
  if (!view.present()) Fail(prefix, name, ": required by features.qk_norm");
  if (view.dtype != DType::kFloat32 || view.shape != Shape{width}) {
    CheckTensor((std::string(prefix) + name).c_str(), view, DType::kFloat32,
                Shape{width});
  }
  out.resize(width);
  for (int64_t k = 0; k < width; ++k) {
    const float w = view.floats()[k];
    if (!std::isfinite(w)) Fail(prefix, name, "[", k, "]: must be finite, got ", w);
    out[k] = unit_offset ? 1.0f + w : w;  // float32, as Gemma3RMSNorm adds it
  }
}

}  // namespace

void QkNormWeights::Set(const std::optional<QkNorm>& qk_norm,
                        const TensorView& query_weight, const TensorView& key_weight,
                        int64_t num_heads, int64_t num_kv_heads, int64_t head_dim,
                        const char* prefix) {
  query.clear();
  key.clear();
  value_ones.clear();
  if (!qk_norm) {
    if (query_weight.present() || key_weight.present()) {
      Fail(prefix, query_weight.present() ? "query_norm_weight" : "key_norm_weight",
           ": given without features.qk_norm");
    }
    return;
  }
  across_heads = qk_norm->scope == QkNormScope::kAcrossHeads;
  eps = static_cast<float>(qk_norm->eps);
  Keep(query_weight, across_heads ? num_heads * head_dim : head_dim, qk_norm->unit_offset,
       prefix, "query_norm_weight", query);
  Keep(key_weight, across_heads ? num_kv_heads * head_dim : head_dim,
       qk_norm->unit_offset, prefix, "key_norm_weight", key);
  if (qk_norm->value_norm) value_ones.assign(head_dim, 1.0f);
}

}  // namespace mha::internal

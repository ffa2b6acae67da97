// The storage helpers of kv_storage.h.
#include "src/kv/kv_storage.h"

#include "src/base/check.h"
#include "src/base/isa_cap.h"
#include "src/kv/kv_kind.h"
#include "src/kv/kv_pages.h"

namespace mha {
namespace internal {

KvStorage AttentionStorage(DType compute_dtype) {
  return compute_dtype == DType::kBFloat16 && Bf16DotProductsRun() ? KvStorage::kBFloat16
                                                                   : KvStorage::kFloat32;
}

void CheckLatentKind(const char* owner, KvStorage storage) {
  if (!KindOf(storage).latent) {
    Fail(owner, ": storage ", DTypeName(DTypeOf(storage)), " with scales ",
         KvScalesName(ScalesOf(storage)),
         " quantises keys and values differently, and a latent cache's keys are its "
         "values: use kPerToken");
  }
}

int64_t KvTokenBytes(int64_t head_dim, KvStorage storage, int64_t page_size,
                     bool values_in_keys) {
  // head_dim <= 2^45 (ValidateConfig, ValidateLatentConfig) and page_size <= 256: a
  // page's bytes fit.
  const BlockLayout layout(page_size, 1, head_dim, storage, 0, values_in_keys);
  return (layout.key_page_bytes + layout.value_page_bytes + page_size - 1) / page_size;
}

}  // namespace internal

}  // namespace mha

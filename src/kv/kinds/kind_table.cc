// The kind table: one row per line of include/mha/kv_storage_kinds.h, each defined by
// its kind's file (src/kv/kinds/<kind>.cc), and the public spellings looked up in
// the same list.
#include <string>

#include "src/base/check.h"
#include "src/kv/kv_kind.h"

namespace mha::internal {

#define MHA_KV_KIND(Name, C_NAME, c_value, dtype, scales) \
  extern const KvKind kKvKind##Name;
#include "mha/kv_storage_kinds.h"
#undef MHA_KV_KIND

namespace {

struct Listed {
  KvStorage storage;
  DType dtype;
  KvScales scales;
  const KvKind* kind;
};

constexpr Listed kListed[] = {
#define MHA_KV_KIND(Name, C_NAME, c_value, dtype, scales) \
  {KvStorage::k##Name, DType::dtype, KvScales::scales, &kKvKind##Name},
#include "mha/kv_storage_kinds.h"
#undef MHA_KV_KIND
};

const Listed& Find(KvStorage storage) {
  for (const Listed& listed : kListed) {
    if (listed.storage == storage) return listed;
  }
  Fail("KV storage kind ", static_cast<int>(storage), " is not in the kind list");
}

}  // namespace

const char* KvScalesName(KvScales scales) {
  switch (scales) {
    case KvScales::kPerToken:
      return "kPerToken";
    case KvScales::kNone:
      return "kNone";
    case KvScales::kPerChannelKeys:
      return "kPerChannelKeys";
    case KvScales::kPerGroup:
      return "kPerGroup";
  }
  return "unknown";
}

const KvKind& KindOf(KvStorage storage) { return *Find(storage).kind; }
DType DTypeOf(KvStorage storage) { return Find(storage).dtype; }
KvScales ScalesOf(KvStorage storage) { return Find(storage).scales; }

KvStorage KvStorageFor(const char* owner, DType storage, KvScales scales) {
  std::string kinds;
  for (const Listed& listed : kListed) {
    if (listed.dtype == storage && listed.scales == scales) return listed.storage;
    kinds += std::string(kinds.empty() ? "" : ", ") + DTypeName(listed.dtype) + "/" +
             KvScalesName(listed.scales);
  }
  Fail(owner, ": storage ", DTypeName(storage), " with scales ", KvScalesName(scales),
       " is not a KV storage kind; the kinds (storage/scales): ", kinds);
}

}  // namespace mha::internal

// Every KV storage kind of include/mha/kv_storage_kinds.h, for the suites that run
// over all of them: a new kind is covered there without a test edit.
#pragma once

#include <vector>

#include "mha/kv_cache.hpp"
#include "mha/tensor.hpp"

namespace mha::testing {

struct KvKindSpelling {
  const char* name;  // the list's Name: "Int8ChannelKeys"
  DType storage;
  KvScales scales;
};

inline const std::vector<KvKindSpelling>& AllKvKinds() {
  static const std::vector<KvKindSpelling> kinds = {
#define MHA_KV_KIND(Name, C_NAME, c_value, dtype, scales) \
  {#Name, DType::dtype, KvScales::scales},
#include "mha/kv_storage_kinds.h"
#undef MHA_KV_KIND
  };
  return kinds;
}

}  // namespace mha::testing

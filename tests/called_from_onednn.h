// CalledFromOneDnn: whether the current call stack passes through libdnnl, for the
// tests that tell oneDNN's allocations from mha's.
#pragma once

#include <dlfcn.h>
#include <execinfo.h>

#include <cstring>

namespace mha::testing {

inline bool CalledFromOneDnn() {
  void* frames[64];
  const int count = backtrace(frames, 64);
  for (int i = 0; i < count; ++i) {
    Dl_info info;
    if (dladdr(frames[i], &info) && info.dli_fname &&
        std::strstr(info.dli_fname, "libdnnl")) {
      return true;
    }
  }
  return false;
}

}  // namespace mha::testing

// CPUID reads for src/platform/cpu_features.h, once per process.
#include "src/platform/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace mha::internal {

bool CpuHasAvx512Bf16() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax >> 5 & 1u) != 0;
  }();
  return has;
#else
  return false;
#endif
}

}  // namespace mha::internal

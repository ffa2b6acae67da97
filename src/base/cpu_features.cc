// CPUID reads for src/base/cpu_features.h, once per process.
#include "src/base/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
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

bool CpuHasAvx512Vnni() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = [] {
    constexpr unsigned kVnni = 1u << 11;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (ecx & kVnni) != 0;
  }();
  return has;
#else
  return false;
#endif
}

#if defined(__linux__) && defined(__x86_64__)
namespace {

constexpr unsigned kAmxBf16Bit = 1u << 22, kAmxTileBit = 1u << 24;  // CPUID 7.0 EDX
constexpr unsigned kTileStateBits = 3u << 17;  // XCR0: TILECFG and TILEDATA
constexpr long kArchRequestXcompPermission = 0x1023;
constexpr long kXfeatureTileData = 18;

bool OsSavesTileState() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx >> 27 & 1u) == 0) {
    return false;  // no OSXSAVE: xgetbv would fault
  }
  unsigned xcr0_low = 0, xcr0_high = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  return (xcr0_low & kTileStateBits) == kTileStateBits;
}

}  // namespace
#endif

bool CpuHasAmxBf16() {
#if defined(__linux__) && defined(__x86_64__)
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    if ((edx & (kAmxBf16Bit | kAmxTileBit)) != (kAmxBf16Bit | kAmxTileBit)) return false;
    return OsSavesTileState() &&
           syscall(SYS_arch_prctl, kArchRequestXcompPermission, kXfeatureTileData) == 0;
  }();
  return has;
#else
  return false;
#endif
}

}  // namespace mha::internal

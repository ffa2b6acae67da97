// AlignedVector: a std::vector whose data start on a cache line. K/V pages and the
// kernel's scratch are read by whole SIMD vectors; from malloc they would start 16
// bytes past a line, and every 64-byte load would then touch two lines. Large ones
// (a KV cache's pool) start on a 2 MiB boundary and ask for transparent huge pages:
// decode reads one KV head's pages a block apart, each on its own 4 KiB page, and
// with 4 KiB pages every one of them missed the TLB.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace mha::internal {

constexpr size_t kCacheLine = 64;
constexpr size_t kHugePage = size_t{2} << 20;

// An allocation's alignment: huge pages from 4 of them on.
inline size_t AllocationAlignment(size_t bytes) {
  return bytes >= 4 * kHugePage ? kHugePage : kCacheLine;
}

// Asks the kernel to back [p, p + bytes) with huge pages (a hint: it may not).
inline void AdviseHugePages(void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (AllocationAlignment(bytes) == kHugePage) {
    madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
  }
#else
  (void)p;
  (void)bytes;
#endif
}

template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  explicit CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    void* p = ::operator new (bytes, std::align_val_t{AllocationAlignment(bytes)});
    AdviseHugePages(p, bytes);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    ::operator delete (p, std::align_val_t{AllocationAlignment(n * sizeof(T))});
  }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const CacheLineAllocator<U>&) const {
    return false;
  }
};

template <typename T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace mha::internal

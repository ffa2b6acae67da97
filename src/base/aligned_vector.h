// AlignedVector: a std::vector whose data start on a cache line. K/V pages and the
// kernel's scratch are read by whole SIMD vectors; from malloc they would start 16
// bytes past a line, and every 64-byte load would then touch two lines.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace mha::internal {

constexpr size_t kCacheLine = 64;

template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  explicit CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kCacheLine}));
  }
  void deallocate(T* p, size_t) { ::operator delete (p, std::align_val_t{kCacheLine}); }
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

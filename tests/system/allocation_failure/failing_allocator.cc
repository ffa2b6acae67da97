// The operator new replacements behind AllocationFailure. One countdown is shared by
// every thread; the allocation that takes it to zero fails. Memory comes from malloc
// and memalign, which a sanitizer intercepts, so LeakSanitizer still sees every block.
#include "tests/system/allocation_failure/failing_allocator.h"

#include <malloc.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

#include "tests/called_from_onednn.h"

namespace {

std::atomic<long> g_countdown{0};  // <= 0: disarmed
std::atomic<bool> g_failed{false};
thread_local bool t_unwinding = false;  // backtrace() may allocate

// True for the allocation that must fail. The countdown stops at 1 while oneDNN
// allocates, so that its allocations are counted but the failure falls after them.
bool FailThisOne() {
  if (t_unwinding || g_countdown.load(std::memory_order_relaxed) <= 0) return false;
  if (g_countdown.fetch_sub(1) != 1) return false;
  t_unwinding = true;
  const bool spared = mha::testing::CalledFromOneDnn();
  t_unwinding = false;
  if (spared) {
    g_countdown = 1;
    return false;
  }
  g_failed = true;
  return true;
}

void* Allocate(size_t size, size_t alignment) {
  if (FailThisOne()) return nullptr;
  if (size == 0) size = 1;
  return alignment <= alignof(std::max_align_t) ? std::malloc(size)
                                                : memalign(alignment, size);
}

void* AllocateOrThrow(size_t size, size_t alignment) {
  if (void* p = Allocate(size, alignment)) return p;
  throw std::bad_alloc();
}

}  // namespace

namespace mha::testing {

AllocationFailure::AllocationFailure(long n) {
  g_failed = false;
  g_countdown = n;
}

AllocationFailure::~AllocationFailure() { g_countdown = 0; }

bool AllocationFailure::happened() const { return g_failed; }

}  // namespace mha::testing

#define MHA_CALLER __builtin_(0)

void* operator new(size_t size) { return AllocateOrThrow(size, 0); }
void* operator new[](size_t size) { return AllocateOrThrow(size, 0); }
void* operator new(size_t size, std::align_val_t alignment) {
  return AllocateOrThrow(size, static_cast<size_t>(alignment));
}
void* operator new[](size_t size, std::align_val_t alignment) {
  return AllocateOrThrow(size, static_cast<size_t>(alignment));
}
void* operator new(size_t size, const std::nothrow_t&) noexcept {
  return Allocate(size, 0);
}
void* operator new[](size_t size, const std::nothrow_t&) noexcept {
  return Allocate(size, 0);
}
void* operator new(size_t size, std::align_val_t alignment,
                   const std::nothrow_t&) noexcept {
  return Allocate(size, static_cast<size_t>(alignment));
}
void* operator new[](size_t size, std::align_val_t alignment,
                     const std::nothrow_t&) noexcept {
  return Allocate(size, static_cast<size_t>(alignment));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

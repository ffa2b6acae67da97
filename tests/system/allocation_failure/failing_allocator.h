// FailingAllocator: linked into a test binary, it replaces operator new (every form),
// so that a test can make the Nth allocation from a point on fail and check what the
// code under test does then: mha's allocations and the standard library's on its
// behalf. oneDNN's are never failed, because oneDNN 2.6 does not survive that: its
// objects come from a class operator new that returns null into a constructor, and
// a std::bad_alloc inside primitive creation corrupts its primitive cache (a broken
// promise for that primitive, then a crash when the cache is next emptied).
#pragma once

namespace mha::testing {

// While alive, allocation number `n` (1-based, counted from construction over every
// thread) fails once, or the first after it made outside oneDNN: operator new
// throws std::bad_alloc, nothrow new returns null. Later allocations succeed again.
class AllocationFailure {
 public:
  explicit AllocationFailure(long n);
  ~AllocationFailure();
  AllocationFailure(const AllocationFailure&) = delete;
  AllocationFailure& operator=(const AllocationFailure&) = delete;

  bool happened() const;  // whether allocation n was reached (and failed)
};

}  // namespace mha::testing

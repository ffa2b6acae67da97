// OpenMP helpers: a per-call thread count and a parallel loop with per-thread
// scratch. Inside a caller's own parallel region the loop runs on the calling
// thread only, so mha never oversubscribes the machine.
#pragma once

#include <omp.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mha::internal {

// Sets OpenMP's thread count (which oneDNN reads too) for one call and restores it.
class ScopedThreadCount {
 public:
  explicit ScopedThreadCount(int num_threads) : previous_(omp_get_max_threads()) {
    if (num_threads > 0) omp_set_num_threads(num_threads);
  }
  ~ScopedThreadCount() { omp_set_num_threads(previous_); }
  ScopedThreadCount(const ScopedThreadCount&) = delete;
  ScopedThreadCount& operator=(const ScopedThreadCount&) = delete;

 private:
  int previous_;
};

// Calls body(task, scratch) for task in [0, count) across the OpenMP team; each
// thread gets its own `scratch_floats` floats, allocated before the region so that
// nothing inside it can throw.
template <class Body>
void ParallelFor(int64_t count, size_t scratch_floats, const Body& body) {
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  std::vector<float> scratch(static_cast<size_t>(threads) * scratch_floats);
#pragma omp parallel num_threads(threads) if (threads > 1 && count > 1)
  {
    float* mine = scratch.data() + omp_get_thread_num() * scratch_floats;
#pragma omp for schedule(static)
    for (int64_t task = 0; task < count; ++task) body(task, mine);
  }
}

}  // namespace mha::internal

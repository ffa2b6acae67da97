// OpenMP helpers: a per-call thread count and a parallel loop over caller-provided
// per-thread scratch. Inside a caller's own parallel region the loop runs on the
// calling thread only, so mha never oversubscribes the machine.
#pragma once

#include <omp.h>

#include <cstddef>
#include <cstdint>

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

// Threads a parallel loop started here would get.
inline int TeamSize() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

// kStatic: equal shares of similar tasks; kDynamic: tasks of uneven cost, taken one
// at a time (ordered longest first by the caller).
enum class Schedule { kStatic, kDynamic };

// Calls body(task, thread_scratch) for task in [0, count); thread t of the team gets
// scratch + t * scratch_floats, so `scratch` must hold TeamSize() * scratch_floats.
template <class Body>
void ParallelFor(int64_t count, float* scratch, size_t scratch_floats, const Body& body,
                 Schedule schedule = Schedule::kStatic) {
  const int threads = TeamSize();
  if (threads == 1 || count <= 1) {  // no team to wake
    for (int64_t task = 0; task < count; ++task) body(task, scratch);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    float* mine = scratch + omp_get_thread_num() * scratch_floats;
    if (schedule == Schedule::kStatic) {
#pragma omp for schedule(static)
      for (int64_t task = 0; task < count; ++task) body(task, mine);
    } else {
#pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < count; ++task) body(task, mine);
    }
  }
}

}  // namespace mha::internal

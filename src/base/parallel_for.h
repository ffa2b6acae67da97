// OpenMP helpers: a per-call thread count and the one team pass every parallel loop
// of mha runs through. Inside a caller's own parallel region the loop runs on the
// calling thread only, so mha never oversubscribes the machine.
//
// A server shares its cores with other threads. So tasks are claimed one at a time
// from a shared counter: a thread the OS deschedules holds at most the task it
// started, and its teammates take the rest. And each thread but the caller keeps a
// CPU of its own, placed at each pass after the caller's (mha/threads.hpp), so a
// neighbour does not get a core to itself while two of a call's threads share the
// other (docs/serving.md, "Threads on a shared CPU").
#pragma once

#include <omp.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "src/base/thread_placement.h"

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

// Calls body(task, thread) for task in [0, count) on a team of up to `team` threads,
// thread 0 being the caller; each thread's calls run with a thread count of one (so a
// oneDNN call inside a task is single-threaded).
template <class Body>
void RunTeam(int64_t count, int team, const Body& body) {
  std::atomic<int64_t> next{0};
  const CallerCpus caller = ReadCallerCpus(team);
#pragma omp parallel num_threads(team)
  {
    omp_set_num_threads(1);
    const int thread = omp_get_thread_num();
    if (thread > 0) PlaceTeamThread(caller, thread);
    for (int64_t task = next.fetch_add(1, std::memory_order_relaxed); task < count;
         task = next.fetch_add(1, std::memory_order_relaxed)) {
      body(task, thread);
    }
  }
}

// Calls body(task, thread_scratch) for task in [0, count); thread t of the team gets
// scratch + t * scratch_floats, so `scratch` must hold TeamSize() * scratch_floats.
// Tasks may differ in cost; callers order the longest first.
template <class Body>
void ParallelFor(int64_t count, float* scratch, size_t scratch_floats, const Body& body) {
  const int threads = TeamSize();
  if (threads == 1 || count <= 1) {  // no team to wake
    for (int64_t task = 0; task < count; ++task) body(task, scratch);
    return;
  }
  RunTeam(count, threads, [&](int64_t task, int thread) {
    body(task, scratch + thread * scratch_floats);
  });
}

}  // namespace mha::internal

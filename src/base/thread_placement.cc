// ThreadPlacement (mha/threads.hpp): the process-wide choice, and each team thread's
// pin, remembered per thread with the mask it had before, which kUnbound restores.
#include "src/base/thread_placement.h"

#include <omp.h>
#include <pthread.h>

#include <atomic>
#include <string>

#include "mha/error.hpp"
#include "mha/threads.hpp"

namespace mha {
namespace {

std::atomic<ThreadPlacement> placement{ThreadPlacement::kSpread};

}  // namespace

ThreadPlacement ParseThreadPlacement(std::string_view name, std::string_view argument) {
  if (name == "spread") return ThreadPlacement::kSpread;
  if (name == "unbound") return ThreadPlacement::kUnbound;
  throw Error(std::string(argument) + ": expected one of spread, unbound, got '" +
              std::string(name) + "'");
}

void SetThreadPlacement(ThreadPlacement value) { placement.store(value); }
ThreadPlacement GetThreadPlacement() { return placement.load(); }

namespace internal {
namespace {

// This thread's pin: the CPU it keeps (-1: none) and the mask it had before.
struct Pin {
  int cpu = -1;
  cpu_set_t before;
};
thread_local Pin pin;

// The CPU `thread` keeps: the thread-th allowed CPU after the caller's, cyclically
// (Linux numbers SMT siblings after every core's first, so small teams get cores).
int TargetCpu(const CallerCpus& caller, int thread) {
  int cpu = caller.cpu;
  for (int found = 0; found < thread;) {
    cpu = (cpu + 1) % CPU_SETSIZE;
    if (CPU_ISSET(cpu, &caller.allowed)) ++found;
  }
  return cpu;
}

void Release() {
  if (pin.cpu < 0) return;
  pthread_setaffinity_np(pthread_self(), sizeof(cpu_set_t), &pin.before);
  pin.cpu = -1;
}

}  // namespace

CallerCpus ReadCallerCpus(int team) {
  CallerCpus caller;
  caller.spread = GetThreadPlacement() == ThreadPlacement::kSpread &&
                  omp_get_proc_bind() == omp_proc_bind_false &&
                  sched_getaffinity(0, sizeof(cpu_set_t), &caller.allowed) == 0 &&
                  team <= CPU_COUNT(&caller.allowed);
  if (caller.spread) caller.cpu = sched_getcpu();
  return caller;
}

void PlaceTeamThread(const CallerCpus& caller, int thread) {
  const int target = caller.spread ? TargetCpu(caller, thread) : -1;
  if (target == pin.cpu) return;
  if (target < 0) {
    Release();
    return;
  }
  if (pin.cpu < 0 &&
      pthread_getaffinity_np(pthread_self(), sizeof(cpu_set_t), &pin.before) != 0) {
    return;  // no mask to restore later: stay unpinned
  }
  cpu_set_t mask;
  CPU_ZERO(&mask);
  CPU_SET(target, &mask);
  if (pthread_setaffinity_np(pthread_self(), sizeof(cpu_set_t), &mask) == 0) {
    pin.cpu = target;
  }
}

}  // namespace internal
}  // namespace mha

// ThreadPlacement applied to a team: the caller's CPU and allowed set, read once per
// team pass, and each other thread moved to its own CPU of that set when it is not
// there already (one system call the first time, none while nothing moves).
#pragma once

#include <sched.h>

namespace mha::internal {

// What a team's threads need from its caller.
struct CallerCpus {
  bool spread = false;  // ThreadPlacement::kSpread applies to this pass
  int cpu = -1;         // where the caller runs
  cpu_set_t allowed;    // the caller's allowed set
};

CallerCpus ReadCallerCpus(int team);

// Called by thread `thread` (> 0) of a team at the start of each pass.
void PlaceTeamThread(const CallerCpus& caller, int thread);

}  // namespace mha::internal

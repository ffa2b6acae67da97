// Where the threads of mha's parallel loops run. A server shares its cores with
// other threads; OpenMP leaves placement to the OS unless OMP_PROC_BIND is set
// before the process starts, which a library cannot do (docs/serving.md, "Threads
// on a shared CPU").
#pragma once

#include <string_view>

namespace mha {

// kSpread (the default): each thread of a team but the caller keeps one CPU of the
// caller's allowed set, starting after the CPU the caller runs on, so no two of the
// call's threads share a core however the OS places a neighbour (as ONNX Runtime
// places its intra-op threads). The caller itself is never pinned; a team larger
// than its allowed set, or a process started with OMP_PROC_BIND, is left unpinned.
// kUnbound: the OS places every thread (threads pinned before are released); what a
// server running several teams at once may prefer, as teams pin relative to their own
// callers, not to each other.
enum class ThreadPlacement { kSpread, kUnbound };

// "spread" or "unbound"; throws mha::Error naming `argument` and the accepted names
// otherwise.
ThreadPlacement ParseThreadPlacement(std::string_view name,
                                     std::string_view argument = "placement");

// For every later call of the process, from any thread.
void SetThreadPlacement(ThreadPlacement placement);
ThreadPlacement GetThreadPlacement();

}  // namespace mha

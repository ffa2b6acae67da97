// mha-run's command line, callable in-process so tests can drive it.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace mha::cli {

// Runs `mha-run args...`; returns the exit code (0 ok, 1 bad input, 2 bad usage)
// after printing any error to `err`, and --help's text to `out`.
int RunMhaCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
inline int RunMhaCli(const std::vector<std::string>& args, std::ostream& err) {
  return RunMhaCli(args, err, err);
}

}  // namespace mha::cli

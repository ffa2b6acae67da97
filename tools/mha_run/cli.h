// mha-run's command line, callable in-process so tests can drive it.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace mha::cli {

// Runs `mha-run args...`; returns the exit code (0 ok, 1 bad input, 2 bad usage)
// after printing any error to `err`.
int RunMhaCli(const std::vector<std::string>& args, std::ostream& err);

}  // namespace mha::cli

// mha-run entry point; see cli.h.
#include <iostream>

#include "tools/mha_run/cli.h"

int main(int argc, char** argv) {
  return mha::cli::RunMhaCli(std::vector<std::string>(argv + 1, argv + argc), std::cout,
                             std::cerr);
}

#!/usr/bin/env bash
# Fresh machine to first result: installs dependencies, builds into build/, and runs
# mha-demo (BERT-base-sized attention against the naive baseline).
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"
./build/tools/mha-demo

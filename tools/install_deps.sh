#!/usr/bin/env bash
# Installs mha's build and test dependencies from Debian packages (needs root or sudo).
set -euo pipefail

packages=(
  cmake g++ make pkg-config
  libdnnl-dev ocl-icd-opencl-dev opencl-headers  # oneDNN 2.6; its CMake config needs OpenCL headers
  libhwy-dev                                     # Highway 1.0.3
  libgtest-dev libbenchmark-dev                  # GoogleTest, Google Benchmark
  nlohmann-json3-dev                             # safetensors headers (libmha, build only)
  clang libclang-rt-14-dev libomp-dev            # the libFuzzer targets (tests/fuzz/)
  pybind11-dev python3-dev python3-numpy         # the Python module (src/python/)
  python3-pytest python3-matplotlib              # its tests; the attention heatmaps
  python3-torch python3-torchvision              # torch interop; mha.torch against ViT-B/16
  libopenblas0-pthread                           # a real BLAS under Debian's torch (it has none)
  python3-pip python3-venv python3-setuptools python3-wheel  # pip install . (offline)
  libopenmpi-dev openmpi-bin                     # the tensor-parallel example and test
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install_deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"

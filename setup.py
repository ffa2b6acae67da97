"""pip's entry to mha: configures and builds the Python module and mha-run with CMake
(in build/pip, Release, without the tests, benchmarks and MPI example), then installs
the module, its type stubs and mha-run. The version is CMakeLists.txt's."""
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join("build", "pip")  # relative: data_files paths are
with open(os.path.join(ROOT, "CMakeLists.txt")) as cmake_lists:
    VERSION = re.search(r"project\(mha VERSION (\S+)", cmake_lists.read()).group(1)


def progress_stream():
    """Where a person sees the build's progress: pip keeps a build's own output to
    itself unless -v, so the terminal when there is one, else stderr."""
    try:
        return open("/dev/tty", "w")
    except OSError:
        return sys.stderr


def build_with_progress(command):
    """Runs the CMake build, its output passed on as it comes (pip -v shows it), and a
    line at each tenth of CMake's [ NN%] counter on the terminal."""
    stream = progress_stream()
    print("mha: building the module with CMake in build/pip (minutes: a Release build "
          "of every SIMD target)", file=stream, flush=True)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    shown = -1
    for line in process.stdout:
        sys.stdout.write(line)
        percent = re.match(r"\[\s*(\d+)%\]", line)
        if percent and int(percent.group(1)) // 10 > shown:
            shown = int(percent.group(1)) // 10
            print(f"mha: build {shown * 10}%", file=stream, flush=True)
    if process.wait() != 0:
        raise subprocess.CalledProcessError(process.returncode, command)
    if stream is not sys.stderr:
        stream.close()


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.path.join(ROOT, BUILD)
        subprocess.check_call([
            "cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
            "-DMHA_BUILD_TESTS=OFF", "-DMHA_BUILD_BENCHMARKS=OFF",
            "-DMHA_BUILD_MPI_EXAMPLE=OFF", "-DMHA_BUILD_PYTHON=ON", "-DMHA_BUILD_TOOLS=ON",
            f"-DPython_EXECUTABLE={sys.executable}"])
        build_with_progress(["cmake", "--build", build, "-j", str(os.cpu_count() or 1),
                             "--target", "mha_python", "mha-run"])
        built = os.path.join(build, "python")
        module = next(name for name in os.listdir(built)
                      if name.startswith("mha.") and name.endswith(".so"))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(built, module), target)
        shutil.copyfile(os.path.join(built, "mha.pyi"),
                        os.path.join(os.path.dirname(target), "mha.pyi"))
        # The pure-Python submodules (mha.torch), in the folder the module's
        # __path__ names.
        submodules = os.path.join(os.path.dirname(target), "mha")
        os.makedirs(submodules, exist_ok=True)
        for name in os.listdir(os.path.join(built, "mha")):
            if name.endswith(".py"):
                shutil.copyfile(os.path.join(built, "mha", name),
                                os.path.join(submodules, name))


setup(
    name="mha",
    version=VERSION,
    description="Fast multi-head attention for CPUs (oneDNN, Highway, OpenMP)",
    long_description=open(os.path.join(ROOT, "README.md")).read(),
    long_description_content_type="text/markdown",
    license="see the repository",
    python_requires=">=3.9",
    install_requires=["numpy"],
    ext_modules=[Extension("mha", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    data_files=[("bin", [os.path.join(BUILD, "tools", "mha-run")])],
    zip_safe=False,
)

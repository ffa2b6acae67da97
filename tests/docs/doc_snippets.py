"""Every Python block of README.md, CHANGELOG.md and docs/*.md runs, and every C/C++
block compiles, as written. A fragment that uses names it does not define says which
context supplies them in an HTML comment just above it, e.g.
    <!-- snippet context: layer_weights -->
(invisible when rendered); CONTEXTS below define them. A block runs in a fresh
interpreter in a temporary directory; C++ fragments are compiled (-fsyntax-only) as the
body of a function after the context's declarations, whole programs (with main) as
they are.

usage: doc_snippets.py SOURCE_DIR PYTHONPATH CXX [-I... flags for mpi.h]"""
import glob
import os
import re
import subprocess
import sys
import tempfile

# Python contexts: code run before the block.
PYTHON_CONTEXTS = {
    "torch_mha": """
import numpy as np, torch
torch_mha = torch.nn.MultiheadAttention(64, 8)
x = torch.randn(5, 2, 64)
q = k = v = np.random.default_rng(0).standard_normal((2, 8, 5, 8), dtype=np.float32)
""",
}

# C++ contexts: declarations before the function whose body is the block.
CPP_CONTEXTS = {
    "layer_weights": """
const float *in_proj_weight = nullptr, *in_proj_bias = nullptr,
            *out_proj_weight = nullptr, *out_proj_bias = nullptr, *x = nullptr;
float* out = nullptr;
const int64_t B = 2, S = 128;
""",
    "core": """
const float *q_data = nullptr, *k_data = nullptr, *v_data = nullptr;
float* out_data = nullptr;
const int64_t B = 1, Hq = 8, Hkv = 2, Sq = 4, Sk = 16, D = 64, Dv = 64;
""",
    "latent": """
std::vector<float> q;
mha::TensorView hidden;
mha::MutableTensorView output;
""",
    "layer": """
mha::AttentionConfig config;
mha::AttentionWeights weights;
const mha::MultiheadAttention& attention = *static_cast<mha::MultiheadAttention*>(nullptr);
mha::TensorView prompt, next_token, encoder_out, memory_lengths, decoder_step;
mha::MutableTensorView out, out1;
int64_t batch = 1, max_memory_len = 64;
""",
    "tensor_parallel": """
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>
mha::AttentionConfig config;
mha::AttentionWeights weights;
int rank = 0, world_size = 2;
int64_t max_batch = 1, max_seq_len = 64;
mha::AttentionInputs inputs;
mha::AttentionMasks masks;
mha::MutableTensorView partial;
float* partial_data = nullptr;
int count = 0;
MPI_Comm comm = MPI_COMM_WORLD;
""",
}

BLOCK = re.compile(
    r"(?:<!-- snippet context: (?P<context>\w+) -->\n)?^```(?P<lang>python|cpp|c)\n"
    r"(?P<code>.*?)^```", re.S | re.M)


def blocks(source_dir):
    files = [os.path.join(source_dir, "README.md"), os.path.join(source_dir, "CHANGELOG.md")]
    files += sorted(glob.glob(os.path.join(source_dir, "docs", "*.md")))
    for path in files:
        text = open(path).read()
        for match in BLOCK.finditer(text):
            line = text[:match.start("code")].count("\n")
            where = f"{os.path.relpath(path, source_dir)}:{line}"
            yield where, match.group("lang"), match.group("context"), match.group("code")


def run_python(where, context, code, pythonpath):
    if "torch" in (context or "") + code:
        try:
            import torch  # noqa: F401
        except ImportError:
            print(f"{where}: skipped (needs torch, not installed)")
            return True
    prelude = PYTHON_CONTEXTS[context] if context else ""
    with tempfile.TemporaryDirectory() as cwd:
        result = subprocess.run([sys.executable, "-c", prelude + code], cwd=cwd,
                                env=dict(os.environ, PYTHONPATH=pythonpath),
                                capture_output=True, text=True, timeout=600)
    if result.returncode:
        print(f"{where}: python block failed:\n{result.stderr}")
    return result.returncode == 0


def compile_cpp(where, context, code, source_dir, cxx, flags):
    lines = ((CPP_CONTEXTS[context] if context else "") + code).splitlines()
    # Preprocessor lines (the includes) go to the top, the rest into the function.
    top = "".join(l + "\n" for l in lines if l.startswith("#"))
    body = "".join(l + "\n" for l in lines if not l.startswith("#"))
    if "int main(" in code:
        unit = top + body
    else:
        unit = ("#include <cstdint>\n#include <vector>\n#include <mha/mha.hpp>\n" + top +
                "void Snippet() {\n" + body + "}\n")
    with tempfile.NamedTemporaryFile("w", suffix=".cc") as file:
        file.write(unit)
        file.flush()
        result = subprocess.run(
            [cxx, "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
             "-Wno-unused-variable", "-Wno-unused-but-set-variable",
             "-I", os.path.join(source_dir, "include"), *flags, file.name],
            capture_output=True, text=True)
    if result.returncode:
        print(f"{where}: C++ block does not compile:\n{result.stderr}")
    return result.returncode == 0


def main():
    source_dir, pythonpath, cxx, *flags = sys.argv[1:]
    pythonpath = os.path.abspath(pythonpath)
    checked = failed = 0
    for where, lang, context, code in blocks(source_dir):
        ok = (run_python(where, context, code, pythonpath) if lang == "python" else
              compile_cpp(where, context, code, source_dir, cxx, flags))
        checked += 1
        failed += not ok
        print(f"{where}: {lang}{' (' + context + ')' if context else ''}: "
              f"{'ok' if ok else 'FAILED'}")
    print(f"{checked} blocks, {failed} failed")
    return 1 if failed or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())

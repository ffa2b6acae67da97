"""tools/serve_sim with a tiny model: a stream that forces forks and preemptions ends
with every request bitwise equal to it run alone through contiguous caches, and the
report and plot are written; without batch-invariant projections the check fails."""
import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "tools", "serve_sim"))
import serve_sim  # noqa: E402
from model import AttentionModel  # noqa: E402
from workload import poisson_requests  # noqa: E402

TINY = ["--hidden", "256", "--heads", "4", "--kv-heads", "2", "--layers", "2",
        "--requests", "40", "--rate", "1000", "--num-blocks", "48", "--max-running", "16",
        "--prompt-len", "8:300", "--output-len", "4:40", "--fork-fraction", "0.2"]


@pytest.mark.parametrize("storage", ["float32", "bfloat16"])
def test_tiny_stream_is_bitwise_each_request_alone(tmp_path, capsys, storage):
    summary_path, plot_path = tmp_path / "summary.json", tmp_path / "run.png"
    status = serve_sim.main(TINY + ["--storage", storage, "--verify",
                                    "--json", str(summary_path), "--plot", str(plot_path)])
    # Not a terminal: a progress line at each tenth of each phase, ending at the total.
    progress = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith(("serving: ", "verifying: "))]
    assert 2 <= len(progress) <= 22, progress
    assert progress[-1].startswith("verifying: ") and "/" in progress[-1]
    summary = json.loads(summary_path.read_text())
    assert status == 0
    assert summary["forks"] > 0 and summary["preemptions"] > 0
    assert summary["bitwise_equal"] == summary["requests"] == 40 + summary["forks"]
    assert summary["peak_block_use"] == 1.0
    assert plot_path.stat().st_size > 10000


def test_without_batch_invariance_requests_differ_from_alone():
    args = serve_sim.parse_args(TINY)
    requests = poisson_requests(args.requests, args.rate, args.prompt_len,
                                args.output_len, args.fork_fraction, args.samples,
                                args.vocab, args.seed)
    model = AttentionModel(2, 256, 4, 2, args.vocab, 0, batch_invariant=False)
    finished, _, _, _ = serve_sim.serve(model, requests, args)
    assert serve_sim.verify(model, finished)


def test_requests_larger_than_the_pool_are_refused():
    with pytest.raises(SystemExit, match="needs .* blocks .* the pool has 4"):
        serve_sim.main(TINY + ["--num-blocks", "4"])


@pytest.mark.parametrize("rows,message", [
    ("arrival,prompt_len,output_len\n", "no requests"),
    ("arrival,prompt_len,output_len\nnan,8,4\n", "row 2: lengths and samples"),
    ("arrival,prompt_len,output_len\ninf,8,4\n", "row 2: lengths and samples"),
    ("arrival,prompt_len,output_len\n0,8\n", "row 2: TypeError"),
    ("arrival,prompt_len,output_len\n0,1000000000000,4\n", "row 2: needs"),
    ("arrival,prompt_len,output_len,samples\n0,8,4,17\n", "row 2: 17 samples"),
    (b"arrival,prompt_len,output_len\n\xff\xfe,8,4\n", "not UTF-8"),
])
def test_bad_trace_rows_are_refused_naming_the_row(tmp_path, rows, message):
    trace = tmp_path / "trace.csv"
    if isinstance(rows, bytes):
        trace.write_bytes(rows)
    else:
        trace.write_text(rows)
    with pytest.raises(SystemExit, match=message):
        serve_sim.main(["--trace", str(trace), "--max-running", "16", "--layers", "1",
                        "--hidden", "64", "--heads", "2", "--kv-heads", "1"])


def test_admission_reserves_the_slots_a_prompt_forks_into(tmp_path):
    summary_path = tmp_path / "summary.json"
    status = serve_sim.main(["--hidden", "64", "--heads", "2", "--kv-heads", "1",
                             "--layers", "1", "--requests", "30", "--rate", "1000",
                             "--max-running", "4", "--samples", "3",
                             "--fork-fraction", "0.5", "--prompt-len", "4:20",
                             "--output-len", "2:6", "--json", str(summary_path)])
    summary = json.loads(summary_path.read_text())
    assert status == 0 and summary["forks"] > 0


@pytest.mark.parametrize("flags,message", [
    (["--watermark", "0.99"], "--watermark 0.99 keeps 47 of the 48 free: it would never"),
    (["--watermark", "1.0"], "serve_sim: --watermark: expected a share of the blocks"),
    (["--max-batched-tokens", "0"], "serve_sim: --max-batched-tokens: expected an integer"),
    (["--rate", "nan"], "serve_sim: --rate: expected a finite number"),
    (["--rate", "-1"], "serve_sim: --rate: expected a finite number"),
    (["--requests", "0"], "serve_sim: --requests: expected an integer >= 1"),
    (["--samples", "0"], "serve_sim: --samples: expected an integer >= 1"),
    (["--block-size", "10"], "serve_sim: --block-size: expected a multiple of 16"),
    (["--heads", "3"], "serve_sim: --hidden: expected a multiple of --heads 3"),
    (["--kv-heads", "3"], "serve_sim: --kv-heads: expected a divisor of --heads"),
    (["--fork-fraction", "2"], "serve_sim: --fork-fraction: expected a share in"),
    (["--seed", "-1"], "serve_sim: --seed: expected an integer >= 0"),
    (["--threads", "-2"], "serve_sim: --threads: expected an integer >= 0"),
    (["--num-blocks", "0"], "serve_sim: --num-blocks: expected an integer >= 1"),
    (["--trace", "/nonexistent/trace.csv"], "serve_sim: --trace: No such file"),
])
def test_flags_that_would_hang_or_crash_are_refused_naming_the_flag(flags, message):
    """Each once hung the run (a watermark that admits nothing, no token budget, a NaN
    rate) or ended in a traceback."""
    with pytest.raises(SystemExit, match=re.escape(message)):
        serve_sim.main(TINY + flags)

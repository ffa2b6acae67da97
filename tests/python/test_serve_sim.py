"""tools/serve_sim with a tiny model: a stream that forces forks and preemptions ends
with every request bitwise equal to it run alone through contiguous caches, and the
report and plot are written; without batch-invariant projections the check fails."""
import json
import os
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
def test_tiny_stream_is_bitwise_each_request_alone(tmp_path, storage):
    summary_path, plot_path = tmp_path / "summary.json", tmp_path / "run.png"
    status = serve_sim.main(TINY + ["--storage", storage, "--verify",
                                    "--json", str(summary_path), "--plot", str(plot_path)])
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

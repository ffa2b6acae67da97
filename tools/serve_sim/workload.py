"""Requests for the serving simulation: a Poisson stream with prompt and output
lengths drawn uniformly from ranges, or a CSV trace. A request with samples > 1 asks
for that many continuations of one prompt; they share its blocks by fork."""
import csv
import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Request:
    id: int
    arrival: float            # seconds after the start
    prompt: list              # token ids
    max_tokens: int
    samples: int = 1          # continuations of the prompt (forked after its prefill)
    seed: int = 0             # the sampling noise of this continuation
    parent: int = -1          # the request it was forked from, or -1
    # Filled in as it runs.
    generated: list = field(default_factory=list)
    token_times: list = field(default_factory=list)
    preemptions: int = 0
    digest: object = None     # hash of its output rows, in token order


def poisson_requests(count, rate, prompt_range, output_range, fork_fraction, samples,
                     vocab, seed):
    rng = np.random.default_rng(seed)
    arrival = 0.0
    requests = []
    for i in range(count):
        arrival += rng.exponential(1.0 / rate)
        prompt_len = int(rng.integers(prompt_range[0], prompt_range[1] + 1))
        requests.append(Request(
            id=i, arrival=arrival,
            prompt=rng.integers(0, vocab, prompt_len).tolist(),
            max_tokens=int(rng.integers(output_range[0], output_range[1] + 1)),
            samples=samples if rng.random() < fork_fraction else 1,
            seed=int(rng.integers(1 << 30))))
    return requests


def csv_requests(path, vocab, seed, fits):
    """Columns arrival (s), prompt_len, output_len and optionally samples. `fits`
    (prompt_len, output_len, samples) raises for a request the pool cannot hold,
    before its prompt is drawn. Every bad row is refused as "serve_sim: row N: ..."."""
    rng = np.random.default_rng(seed)
    requests = []
    try:
        with open(path, newline="", encoding="utf-8") as file:
            for i, row in enumerate(csv.DictReader(file)):
                where = f"serve_sim: {path} row {i + 2}"
                try:
                    prompt_len, output_len = int(row["prompt_len"]), int(row["output_len"])
                    arrival, samples = float(row["arrival"]), int(row.get("samples") or 1)
                except (KeyError, ValueError, TypeError) as error:
                    raise SystemExit(f"{where}: {error!r}; expected columns arrival, "
                                     "prompt_len, output_len[, samples]")
                if prompt_len < 1 or output_len < 1 or samples < 1 or \
                        not 0 <= arrival < math.inf:
                    raise SystemExit(f"{where}: lengths and samples must be >= 1 and "
                                     f"arrival finite and >= 0, got {dict(row)}")
                fits(f"{where}", prompt_len, output_len, samples)
                requests.append(Request(id=i, arrival=arrival,
                                        prompt=rng.integers(0, vocab, prompt_len).tolist(),
                                        max_tokens=output_len, samples=samples,
                                        seed=int(rng.integers(1 << 30))))
    except UnicodeDecodeError as error:
        raise SystemExit(f"serve_sim: {path}: not UTF-8 text ({error.reason})")
    if not requests:
        raise SystemExit(f"serve_sim: {path}: no requests (a header row, then one row "
                         "per request)")
    return sorted(requests, key=lambda r: r.arrival)

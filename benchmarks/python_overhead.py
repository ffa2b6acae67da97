#!/usr/bin/env python3
"""What Python adds to a packed step: one decode step of 64 sequences over 512 cached
tokens each (Llama 3 8B's attention heads, embed 64: mha_bench's serving shape), timed
from Python (append_slots + forward_packed, as the C++ case times AppendSlots +
ForwardPacked) and by mha_bench's BM_Serve/decode_64x512, alternately, --rounds times;
prints the medians and the overhead ratio.

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/python_overhead.py \\
        --bench build/benchmarks/mha_bench
"""
import argparse
import json
import subprocess
import time

import numpy as np

import mha

HEADS, KV_HEADS, HEAD_DIM, EMBED, SEQUENCES, CACHED = 32, 8, 128, 64, 64, 512


def python_step_seconds(repeats):
    rng = np.random.default_rng(0)
    config = mha.AttentionConfig(
        num_heads=HEADS, head_dim=HEAD_DIM, query_dim=EMBED, num_kv_heads=KV_HEADS,
        rotary=mha.RotaryConfig(pairing=mha.RotaryPairing.half_split, max_positions=40000))
    model, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    layer = mha.MultiheadAttention(
        config, rng.standard_normal((model, EMBED), np.float32) * 0.125,
        rng.standard_normal((kv, EMBED), np.float32) * 0.125,
        rng.standard_normal((kv, EMBED), np.float32) * 0.125,
        rng.standard_normal((EMBED, model), np.float32) * 0.01)
    cache = mha.PagedKvCache(layer, SEQUENCES * (CACHED // 16 + 1), SEQUENCES)
    ids = list(range(SEQUENCES))
    for i in ids:
        cache.add_sequence(i)
    cache.append_slots(ids, [CACHED] * SEQUENCES)
    starts = np.arange(SEQUENCES + 1, dtype=np.int64) * CACHED
    layer.forward_packed(rng.standard_normal((SEQUENCES * CACHED, EMBED), np.float32),
                         np.array(ids), starts, cache)
    query = rng.standard_normal((SEQUENCES, EMBED), np.float32)
    sequence_ids, query_start_loc = np.array(ids), np.arange(SEQUENCES + 1)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        cache.append_slots(ids, [1] * SEQUENCES)
        layer.forward_packed(query, sequence_ids, query_start_loc, cache)
        times.append(time.perf_counter() - start)
        for i in ids:
            cache.truncate(i, CACHED)
    return float(np.median(times))


def cpp_step_seconds(bench):
    result = subprocess.run(
        [bench, "--benchmark_filter=BM_Serve/decode_64x512/", "--benchmark_format=json",
         "--benchmark_min_time=0.5"], check=True, capture_output=True, text=True)
    run = json.loads(result.stdout)["benchmarks"][0]
    return run["real_time"] * {"ms": 1e-3, "us": 1e-6, "ns": 1e-9}[run["time_unit"]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", default="build/benchmarks/mha_bench")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    python, cpp = [], []
    for _ in range(args.rounds):
        cpp.append(cpp_step_seconds(args.bench))
        python.append(python_step_seconds(200))
    python_ms, cpp_ms = 1e3 * np.median(python), 1e3 * np.median(cpp)
    print(f"packed decode step, 64 sequences x 512 cached tokens: C++ {cpp_ms:.3f} ms, "
          f"Python {python_ms:.3f} ms, overhead {100 * (python_ms / cpp_ms - 1):+.1f}% "
          f"(medians of {args.rounds} alternating rounds)")


if __name__ == "__main__":
    main()

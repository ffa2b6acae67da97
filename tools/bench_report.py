#!/usr/bin/env python3
"""Turns mha_bench's JSON into a markdown table and a PNG chart.

Usage:
  ./build/benchmarks/mha_bench --benchmark_repetitions=3 \\
      --benchmark_out=bench.json --benchmark_out_format=json
  python3 tools/bench_report.py bench.json [--plot bench.png] > bench.md

The table has, per case: time, GFLOP/s (useful FLOPs), fraction of BM_GemmPeak from
the same run (and of BM_AmxPeak for bf16 compute, where the CPU has AMX), speedup over
BM_Naive where it ran, and workspace memory; then each "/busy_thread" case's slowdown
against the same case alone. With repetitions the median is used. The chart (needs python3-matplotlib) shows GFLOP/s
per case against the GEMM peak, and GFLOP/s per sequence length for causal attention.
"""
import argparse
import json
import re
import sys

SUFFIXES = re.compile(r"(/iterations:\d+|/repeats:\d+|/real_time|/manual_time|/min_time:[\d.]+)+")


def clean(name):
    return SUFFIXES.sub("", name)


def load(path):
    """Returns {clean name: benchmark row}, medians when repetitions were run."""
    with open(path) as f:
        runs = json.load(f)["benchmarks"]
    rows = {}
    for run in runs:
        aggregate = run.get("aggregate_name")
        if aggregate not in (None, "median"):
            continue
        name = clean(run.get("run_name", run["name"]))
        if aggregate == "median" or name not in rows:
            rows[name] = run
    return rows


def seconds(run):
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[run.get("time_unit", "ns")]
    return run["real_time"] * scale


def fmt_time(s):
    return f"{s * 1e6:.1f} µs" if s < 1e-3 else f"{s * 1e3:.2f} ms"


def table(rows):
    peak = rows.get("BM_GemmPeak", {}).get("GFLOPS")
    amx_peak = rows.get("BM_AmxPeak", {}).get("GFLOPS")
    out = ["| case | time | GFLOP/s | of GEMM peak | of AMX peak | speedup vs naive "
           "| workspace |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for name in ("BM_GemmPeak", "BM_AmxPeak"):
        if name in rows:
            out.append(f"| {name} | {fmt_time(seconds(rows[name]))} "
                       f"| {rows[name]['GFLOPS']:.1f} | | | | |")
    for name, run in rows.items():
        if not name.startswith(("BM_Mha", "BM_Core")) or "/busy_thread" in name:
            continue
        case = name.split("/", 1)[1]
        gflops = run.get("GFLOPS", 0.0)
        naive = rows.get("BM_Naive/" + case.split("/")[0])
        speedup = f"{seconds(naive) / seconds(run):.0f}x" if naive else ""
        fraction = f"{gflops / peak:.2f}" if peak else "?"
        of_amx = f"{gflops / amx_peak:.2f}" if amx_peak and "bf16" in name else ""
        memory = run.get("workspace_MiB")
        memory = f"{memory:.1f} MiB" if memory is not None else ""
        out.append(f"| {name} | {fmt_time(seconds(run))} | {gflops:.1f} | {fraction} "
                   f"| {of_amx} | {speedup} | {memory} |")
    busy = [(name, run) for name, run in rows.items() if name.endswith("/busy_thread")]
    if busy:
        out += ["", "| case beside one busy thread | time | slowdown against alone |",
                "|---|---:|---:|"]
        for name, run in busy:
            alone = rows.get(name[: -len("/busy_thread")])
            slowdown = f"{seconds(run) / seconds(alone):.2f}x" if alone else ""
            out.append(f"| {name} | {fmt_time(seconds(run))} | {slowdown} |")
    return "\n".join(out)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    peak = rows.get("BM_GemmPeak", {}).get("GFLOPS")
    cases = [(n.split("/", 1)[1], r["GFLOPS"]) for n, r in rows.items()
             if n.startswith("BM_Mha/")]
    sweep = sorted((int(re.search(r"s(\d+)", n).group(1)), r["GFLOPS"])
                   for n, r in rows.items() if n.startswith("BM_MhaCausalSweep/"))
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    left.barh([c for c, _ in cases], [g for _, g in cases], color="#3a7bd5")
    if peak:
        left.axvline(peak, color="#d9534f", linestyle="--", label=f"oneDNN GEMM peak {peak:.0f}")
        left.legend(loc="lower right")
    left.set_xlabel("GFLOP/s (useful FLOPs)")
    left.set_title("mha forward per case")
    left.invert_yaxis()
    if sweep:
        right.plot([s for s, _ in sweep], [g for _, g in sweep], marker="o", color="#3a7bd5",
                   label="mha causal (E=768, 12 heads)")
        if peak:
            right.axhline(peak, color="#d9534f", linestyle="--", label="GEMM peak")
        right.set_xscale("log", base=2)
        right.set_xlabel("sequence length")
        right.set_ylabel("GFLOP/s (useful FLOPs)")
        right.set_ylim(bottom=0)
        right.set_title("causal attention vs sequence length")
        right.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json")
    parser.add_argument("--plot", help="write a PNG chart here")
    args = parser.parse_args()
    rows = load(args.json)
    if not rows:
        sys.exit(f"{args.json}: no benchmarks")
    print(table(rows))
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""serve_sim: continuous batching on mha from Python. A stream of requests (Poisson,
or a CSV trace) is served by an attention-only model with random weights through one
mha.PagedKvCache (scheduler.py), on a virtual clock that advances by each step's
measured time and jumps over idle gaps. Prints throughput and TTFT / inter-token
latency percentiles, plots the run (--plot), and with --verify checks that every
request's output rows are bitwise those of the request run alone through contiguous
caches (mha.KvCache), across preemptions and forks.

    PYTHONPATH=build/python /usr/bin/python3 tools/serve_sim/serve_sim.py \\
        --requests 200 --verify --plot serve_sim.png
"""
import argparse
import hashlib
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mha  # noqa: E402
from model import AttentionModel  # noqa: E402
from report import plot, summarize, table  # noqa: E402
from scheduler import Scheduler  # noqa: E402
from workload import csv_requests, poisson_requests  # noqa: E402


def length_range(text):
    low, _, high = text.partition(":")
    low, high = int(low), int(high or low)
    if not 1 <= low <= high:
        raise argparse.ArgumentTypeError(f"expected LOW:HIGH with 1 <= LOW <= HIGH, got {text}")
    return low, high


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    w = p.add_argument_group("workload")
    w.add_argument("--requests", type=int, default=200)
    w.add_argument("--rate", type=float, default=2.0, help="Poisson arrivals per second")
    w.add_argument("--prompt-len", type=length_range, default=(16, 256), metavar="LOW:HIGH")
    w.add_argument("--output-len", type=length_range, default=(8, 64), metavar="LOW:HIGH")
    w.add_argument("--fork-fraction", type=float, default=0.1,
                   help="share of requests that ask for --samples continuations")
    w.add_argument("--samples", type=int, default=3)
    w.add_argument("--trace", help="CSV: arrival,prompt_len,output_len[,samples]")
    w.add_argument("--seed", type=int, default=0)
    m = p.add_argument_group("model (default: Llama 3 8B's attention shape)")
    m.add_argument("--layers", type=int, default=2)
    m.add_argument("--hidden", type=int, default=4096)
    m.add_argument("--heads", type=int, default=32)
    m.add_argument("--kv-heads", type=int, default=8)
    m.add_argument("--vocab", type=int, default=1024)
    m.add_argument("--weight-dtype", choices=["float32", "bfloat16"], default="float32")
    s = p.add_argument_group("server")
    s.add_argument("--num-blocks", type=int, default=600)
    s.add_argument("--block-size", type=int, default=16)
    s.add_argument("--storage", choices=["float32", "bfloat16"], default="float32",
                   help="KV cache storage (kinds that round keep the bitwise check)")
    s.add_argument("--max-batched-tokens", type=int, default=256)
    s.add_argument("--max-running", type=int, default=32)
    s.add_argument("--watermark", type=float, default=0.05,
                   help="share of the blocks admission leaves free for running requests")
    s.add_argument("--threads", type=int, default=0)
    o = p.add_argument_group("output")
    o.add_argument("--verify", action="store_true",
                   help="rerun every request alone through contiguous caches and compare")
    o.add_argument("--plot", help="PNG of block usage and latency distributions")
    o.add_argument("--json", help="the summary as JSON")
    args = p.parse_args(argv)
    check_args(args)
    return args


def check_args(args):
    """Refuses, as "serve_sim: --flag: ...", every value the run could not use: one
    that would hang it (a watermark leaving no block to admit with, a zero token
    budget, a NaN rate) or end it in a traceback."""
    def need(ok, flag, what):
        if not ok:
            raise SystemExit(f"serve_sim: {flag}: expected {what}, got "
                             f"{getattr(args, flag[2:].replace('-', '_'))}")
    for flag in ("--requests", "--samples", "--layers", "--hidden", "--heads",
                 "--kv-heads", "--vocab", "--num-blocks", "--max-batched-tokens",
                 "--max-running"):
        need(getattr(args, flag[2:].replace("-", "_")) >= 1, flag, "an integer >= 1")
    need(args.threads >= 0, "--threads", "an integer >= 0 (0: all)")
    need(args.seed >= 0, "--seed", "an integer >= 0")
    need(0 < args.rate < math.inf, "--rate", "a finite number of arrivals per second > 0")
    need(0 <= args.fork_fraction <= 1, "--fork-fraction", "a share in [0, 1]")
    need(0 <= args.watermark < 1, "--watermark", "a share of the blocks in [0, 1)")
    need(args.block_size % 16 == 0 and 16 <= args.block_size <= 256, "--block-size",
         "a multiple of 16 in [16, 256]")
    need(args.hidden % args.heads == 0, "--hidden", f"a multiple of --heads {args.heads}")
    need(args.heads % args.kv_heads == 0, "--kv-heads",
         f"a divisor of --heads {args.heads}")


def progress(text, done, total):
    """A bar on a terminal; elsewhere (CI, a pipe, nohup) a line at each tenth done, so
    a long run still shows it is moving."""
    if sys.stderr.isatty():
        filled = 30 * done // max(total, 1)
        sys.stderr.write(f"\r{text} [{'#' * filled}{'-' * (30 - filled)}] {done}/{total} ")
        sys.stderr.flush()
    elif total and done and progress.printed.get(text) != 10 * done // total:
        progress.printed[text] = 10 * done // total
        print(f"{text}: {done}/{total} ({time.strftime('%H:%M:%S')})", file=sys.stderr,
              flush=True)


progress.printed = {}  # the tenth last printed, per phase


def fits_checker(args):
    """Raises for a request the pool or the running limit cannot hold, or that the
    watermark would never admit (its largest step's blocks above the blocks the
    watermark leaves: it would wait forever)."""
    reserved = int(args.watermark * args.num_blocks)

    def fits(where, prompt_len, output_len, samples):
        blocks = -(-prompt_len // args.block_size) + \
            samples * (-(-output_len // args.block_size) + 1)
        if blocks > args.num_blocks:
            raise SystemExit(f"{where}: needs {blocks} blocks (prompt {prompt_len}, "
                             f"{samples} x {output_len} output tokens), the pool has "
                             f"{args.num_blocks}: raise --num-blocks")
        chunk = min(prompt_len + output_len, args.max_batched_tokens)
        if -(-chunk // args.block_size) + reserved > args.num_blocks:
            raise SystemExit(f"{where}: a step of {chunk} tokens needs "
                             f"{-(-chunk // args.block_size)} blocks, and --watermark "
                             f"{args.watermark} keeps {reserved} of the "
                             f"{args.num_blocks} free: it would never be admitted; "
                             "lower --watermark")
        if samples > args.max_running:
            raise SystemExit(f"{where}: {samples} samples run at once, above "
                             f"--max-running {args.max_running}")
    return fits


def serve(model, requests, args):
    """Runs the stream; returns the finished requests, block usage samples and the
    scheduler."""
    cache = mha.PagedKvCache(model.layers[0], args.num_blocks, args.max_running,
                             block_size=args.block_size, num_layers=len(model.layers),
                             storage=getattr(mha.DType, args.storage))
    scheduler = Scheduler(model, cache, args.block_size, args.max_batched_tokens,
                          args.max_running, int(args.watermark * args.num_blocks))
    pending = list(requests)
    clock, usage, expected = 0.0, [], sum(r.samples for r in requests)
    while pending or scheduler.busy():
        while pending and pending[0].arrival <= clock:
            scheduler.add(pending.pop(0))
        if not scheduler.busy():
            clock = pending[0].arrival
            continue
        start = time.perf_counter()
        plan, rows, starts = scheduler.step()
        clock += time.perf_counter() - start
        if plan:
            scheduler.finish_step(plan, rows, starts, clock)
        stats = cache.stats()
        usage.append((clock, stats["used_blocks"] / stats["num_blocks"],
                      len(scheduler.running), len(scheduler.waiting)))
        progress("serving", len(scheduler.finished), expected)
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    return scheduler.finished, usage, scheduler, clock


def verify(model, finished, storage="float32"):
    """The requests whose rows or tokens differ from the request run alone."""
    mismatched = []
    for done, request in enumerate(finished):
        digest = hashlib.blake2b()
        tokens = model.alone(request, digest, getattr(mha.DType, storage))
        if tokens != request.generated or digest.digest() != request.digest.digest():
            mismatched.append(request.id)
        progress("verifying", done + 1, len(finished))
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    return mismatched


def main(argv=None):
    args = parse_args(argv)
    progress.printed.clear()
    fits = fits_checker(args)
    if args.trace:
        try:
            requests = csv_requests(args.trace, args.vocab, args.seed, fits)
        except OSError as error:
            raise SystemExit(f"serve_sim: --trace: {error.strerror}: {args.trace}")
    else:
        requests = poisson_requests(args.requests, args.rate, args.prompt_len,
                                    args.output_len, args.fork_fraction, args.samples,
                                    args.vocab, args.seed)
        for r in requests:
            fits(f"serve_sim: request {r.id}", len(r.prompt), r.max_tokens, r.samples)
    model = AttentionModel(args.layers, args.hidden, args.heads, args.kv_heads,
                           args.vocab, args.seed, getattr(mha.DType, args.weight_dtype),
                           args.threads)
    finished, usage, scheduler, seconds = serve(model, requests, args)
    summary = summarize(finished, usage, seconds, scheduler.preemptions, scheduler.forks)
    print(table(summary))
    if args.verify:
        mismatched = verify(model, finished, args.storage)
        summary["bitwise_equal"] = len(finished) - len(mismatched)
        print(f"verify: {summary['bitwise_equal']}/{len(finished)} requests bitwise equal "
              "to each run alone through contiguous caches"
              + (f"; differ: {mismatched[:10]}" if mismatched else ""))
    title = (f"serve_sim: {args.layers} x attention {args.hidden}/{args.heads}/"
             f"{args.kv_heads} heads, {len(finished)} requests")
    if args.plot:
        plot(args.plot, finished, usage, summary, title)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(summary, file, indent=1)
    return 1 if args.verify and summary["bitwise_equal"] != len(finished) else 0


if __name__ == "__main__":
    sys.exit(main())

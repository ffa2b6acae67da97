#!/usr/bin/env python3
"""A whole model converted by mha.torch: torchvision's ViT-B/16 (random weights, eval,
224 x 224 images) as torch runs it and after mha.torch.convert(num_threads=--threads),
batch 1 and 8, timed alternately --rounds times under torch.inference_mode(), at each
torch thread count up to --threads (torch.set_num_threads); prints each median and the
ratio of the best original to the best converted (above 1: the converted model is
faster). Only the 12 attention modules change: the
MLPs, norms and patch embedding stay torch's, on its BLAS (Debian's torch uses the
system's libblas: OpenBLAS from tools/install_deps.sh, with its own 2 threads, which
is why torch is fastest at 1 thread of its own there).

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/vit_torch.py
"""
import argparse
import copy
import json
import statistics
import time

import torch
from torchvision.models import vit_b_16

import mha
import mha.torch


def forward_seconds(model, images, repeats):
    with torch.inference_mode():
        start = time.perf_counter()
        for _ in range(repeats):
            model(images)
    return (time.perf_counter() - start) / repeats


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    arguments = parser.parse_args()
    torch.manual_seed(0)
    original = vit_b_16().eval()
    converted = copy.deepcopy(original)
    report = mha.torch.convert(converted, num_threads=arguments.threads)
    assert len(report.replaced) == 12, report
    models = {"original": original, "converted": converted}
    results = {}
    for batch in arguments.batches:
        images = torch.randn(batch, 3, 224, 224)
        repeats = max(1, 4 // batch)
        times = {}
        for model in models.values():
            forward_seconds(model, images, 1)  # warm: mha packs its weights here
        for _ in range(arguments.rounds):
            for threads in range(1, arguments.threads + 1):
                torch.set_num_threads(threads)
                for name, model in models.items():
                    times.setdefault((name, threads), []).append(
                        forward_seconds(model, images, repeats))
        medians = {key: statistics.median(values) for key, values in times.items()}
        best = {name: min(seconds for (model, _), seconds in medians.items()
                          if model == name) for name in models}
        results[f"batch_{batch}"] = {
            **{f"{name}_ms_at_{threads}_threads": round(seconds * 1e3, 1)
               for (name, threads), seconds in sorted(medians.items())},
            "ratio": round(best["original"] / best["converted"], 3)}
        print(f"vit_b_16 batch {batch}: " + ", ".join(
            f"{name} {threads} threads {seconds * 1e3:.1f} ms"
            for (name, threads), seconds in sorted(medians.items())) +
            f"; best original / best converted {best['original'] / best['converted']:.3f}",
            flush=True)
    print(json.dumps({"torch": torch.__version__,
                      "simd_target": mha.describe_isa().simd_target, **results}))


if __name__ == "__main__":
    main()

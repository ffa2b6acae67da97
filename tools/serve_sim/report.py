"""What a serving run measured: throughput, time to first token and inter-token
latency percentiles, block usage, as a table and as a PNG."""
import numpy as np


def percentiles(values):
    return [float(np.percentile(values, q)) for q in (50, 90, 99)] if values else [0.0] * 3


def summarize(requests, usage, wall, preemptions, forks):
    ttft = [r.token_times[0] - r.arrival for r in requests if r.parent < 0]
    itl = [b - a for r in requests for a, b in zip(r.token_times, r.token_times[1:])]
    e2e = [r.token_times[-1] - r.arrival for r in requests]
    output_tokens = sum(len(r.generated) for r in requests)
    prompt_tokens = sum(len(r.prompt) for r in requests if r.parent < 0)
    used = [u[1] for u in usage]
    return {
        "requests": len(requests), "forks": forks, "preemptions": preemptions,
        "seconds": wall, "output_tokens": output_tokens, "prompt_tokens": prompt_tokens,
        "output_tokens_per_s": output_tokens / wall,
        "total_tokens_per_s": (output_tokens + prompt_tokens) / wall,
        "ttft_ms": [1e3 * v for v in percentiles(ttft)],
        "itl_ms": [1e3 * v for v in percentiles(itl)],
        "e2e_s": percentiles(e2e),
        "peak_block_use": max(used) if used else 0.0,
        "mean_block_use": float(np.mean(used)) if used else 0.0,
    }


def table(summary):
    lines = [
        f"{summary['requests']} requests ({summary['forks']} forked continuations, "
        f"{summary['preemptions']} preemptions) in {summary['seconds']:.1f} s",
        f"throughput: {summary['output_tokens_per_s']:.1f} output tokens/s, "
        f"{summary['total_tokens_per_s']:.1f} prompt + output tokens/s",
        f"{'':22}{'p50':>10}{'p90':>10}{'p99':>10}"]
    for name, key in (("time to first token ms", "ttft_ms"),
                      ("inter-token latency ms", "itl_ms"),
                      ("request latency s", "e2e_s")):
        lines.append(f"{name:22}" + "".join(f"{v:10.1f}" for v in summary[key]))
    lines.append(f"KV blocks in use: peak {100 * summary['peak_block_use']:.0f}%, "
                 f"mean {100 * summary['mean_block_use']:.0f}%")
    return "\n".join(lines)


def cumulative(axis, values, name, unit):
    """The distribution of values as a curve, on a log axis where it spans decades."""
    values = np.sort(values)
    axis.plot(values, np.linspace(0, 1, len(values)))
    if len(values) and values[0] > 0 and values[-1] / values[0] > 100:
        axis.set_xscale("log")
    axis.set_xlabel(f"{name} ({unit})")
    axis.grid(alpha=0.3)


def plot(path, requests, usage, summary, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    times = [u[0] for u in usage]
    # Percent and counts on their own labelled axes.
    axes[0].plot(times, [100 * u[1] for u in usage], color="C0")
    axes[0].set_ylabel("KV blocks in use (%)", color="C0")
    axes[0].set_ylim(0, 100)
    axes[0].set_xlabel("time (s)")
    axes[0].set_title("cache and queues")
    queues = axes[0].twinx()
    queues.plot(times, [u[2] for u in usage], color="C1", label="running")
    queues.plot(times, [u[3] for u in usage], color="C2", label="waiting")
    queues.set_ylabel("requests")
    queues.legend(fontsize=8, loc="upper left")
    cumulative(axes[1], [r.token_times[0] - r.arrival for r in requests if r.parent < 0],
               "time to first token", "s")
    axes[1].set_ylabel("fraction of requests")
    axes[1].set_title(f"TTFT p50 {summary['ttft_ms'][0] / 1e3:.2f} s, "
                      f"p99 {summary['ttft_ms'][2] / 1e3:.2f} s")
    cumulative(axes[2], [1e3 * (b - a) for r in requests
                         for a, b in zip(r.token_times, r.token_times[1:])],
               "inter-token latency", "ms")
    axes[2].set_ylabel("fraction of tokens")
    axes[2].set_title(f"ITL p50 {summary['itl_ms'][0]:.1f} ms, "
                      f"p99 {summary['itl_ms'][2]:.1f} ms")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)

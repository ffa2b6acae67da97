#!/usr/bin/env python3
"""Attention weights as a grid of heatmaps, one panel per head (or the head average),
queries down the rows and keys across the columns, as The Implemented Transformer's
display_attention draws them: 'bone' colours on a fixed 0..1 scale, so masked cells (weight 0) are black
and a weight of 1 is white.

Reads what `mha-run --attn-weights` writes or what mha.MultiheadAttention returns with
need_weights=True, saved with numpy.save:
  [B, H, Sq, Sk]  per head (mha-run's default)        pick --batch; --average for the mean
  [B, Sq, Sk]     averaged over heads (--average-heads) pick --batch
  with --unbatched: [H, Sq, Sk] or [Sq, Sk]

  attention_heatmap.py weights.npy --output heads.png \
      --tokens "i wonder what will come next"
Needs matplotlib and numpy (Debian's python3-matplotlib; use /usr/bin/python3)."""
import argparse
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

PANEL_INCHES = 3.0


def select_panels(weights, batch=0, unbatched=False, average=False):
    """[panels, Sq, Sk] and a title per panel from an array of any accepted shape."""
    weights = np.asarray(weights, dtype=np.float32)
    if not unbatched:
        if weights.ndim not in (3, 4):
            raise ValueError(f"weights: expected [B, H, Sq, Sk] or [B, Sq, Sk], got shape "
                             f"{list(weights.shape)} (--unbatched for [H, Sq, Sk] or [Sq, Sk])")
        if not 0 <= batch < weights.shape[0]:
            raise ValueError(f"batch: {batch} is outside 0..{weights.shape[0] - 1}")
        weights = weights[batch]
    if weights.ndim == 2:
        return weights[None], ["mean of heads" if not unbatched else "attention"]
    if weights.ndim != 3:
        raise ValueError(f"weights: expected [H, Sq, Sk] or [Sq, Sk], got shape "
                         f"{list(weights.shape)}")
    if average:
        return weights.mean(axis=0, keepdims=True), ["mean of heads"]
    return weights, [f"head {h}" for h in range(weights.shape[0])]


def draw_heatmaps(panels, titles, query_tokens=None, key_tokens=None, columns=None,
                  dpi=100):
    """A figure with one heatmap per panel of `panels` [N, Sq, Sk]."""
    count, query_len, key_len = panels.shape
    for name, tokens, length in (("query_tokens", query_tokens, query_len),
                                 ("key_tokens", key_tokens, key_len)):
        if tokens is not None and len(tokens) != length:
            raise ValueError(f"{name}: {len(tokens)} labels for {length} positions")
    columns = columns or min(count, 4)
    rows = math.ceil(count / columns)
    figure, axes = plt.subplots(rows, columns, squeeze=False, dpi=dpi, layout="constrained",
                                figsize=(PANEL_INCHES * columns, PANEL_INCHES * rows))
    for index, axis in enumerate(axes.flat):
        if index >= count:
            axis.axis("off")
            continue
        image = axis.matshow(panels[index], cmap="bone", vmin=0.0, vmax=1.0)
        axis.set_title(titles[index], fontsize=9)
        axis.set_xticks(range(key_len))
        axis.set_yticks(range(query_len))
        if key_tokens is not None:
            axis.set_xticklabels(key_tokens, rotation=90)
        if query_tokens is not None:
            axis.set_yticklabels(query_tokens)
        axis.tick_params(labelsize=8)
    figure.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8)
    return figure


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("weights", help=".npy attention weights")
    parser.add_argument("--output", required=True, help="image file (.png, .svg, .pdf)")
    parser.add_argument("--batch", type=int, default=0, help="which sequence of the batch")
    parser.add_argument("--unbatched", action="store_true", help="no batch axis")
    parser.add_argument("--average", action="store_true", help="one panel: the head mean")
    parser.add_argument("--tokens", help="labels of both axes (self-attention), spaced")
    parser.add_argument("--query-tokens", help="row labels, spaced")
    parser.add_argument("--key-tokens", help="column labels, spaced")
    parser.add_argument("--columns", type=int, help="panels per row (default: up to 4)")
    parser.add_argument("--dpi", type=int, default=100)
    args = parser.parse_args(argv)
    split = lambda text: text.split() if text else None  # noqa: E731
    query_tokens = split(args.query_tokens or args.tokens)
    key_tokens = split(args.key_tokens or args.tokens)
    try:
        panels, titles = select_panels(np.load(args.weights), args.batch, args.unbatched,
                                       args.average)
        figure = draw_heatmaps(panels, titles, query_tokens, key_tokens, args.columns,
                               args.dpi)
    except ValueError as error:
        parser.error(str(error))
    figure.savefig(args.output, dpi=args.dpi)
    return 0


if __name__ == "__main__":
    sys.exit(main())

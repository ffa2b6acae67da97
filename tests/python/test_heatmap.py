"""tools/attention_heatmap.py: the image's size, and every cell drawn in the colour of
its weight, masked cells (weight 0) as zero."""
import pathlib
import subprocess
import sys

import matplotlib
import numpy as np
import pytest

from fixture_files import DATA

TOOLS = pathlib.Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))
import attention_heatmap  # noqa: E402

# Seed 004's causal mask: query i sees keys 0..i only.
WEIGHTS = DATA / "seed004_subsequent" / "expected_attn_weights.npy"
TOKENS = "i wonder what will come next"


def test_cli_writes_an_image_of_the_grid_size(tmp_path):
    output = tmp_path / "heads.png"
    subprocess.run([sys.executable, str(TOOLS / "attention_heatmap.py"), str(WEIGHTS),
                    "--output", str(output), "--tokens", TOKENS, "--columns", "2",
                    "--dpi", "50", "--batch", "1"], check=True)
    image = matplotlib.image.imread(output)
    inches = attention_heatmap.PANEL_INCHES
    assert image.shape[:2] == (2 * inches * 50, 2 * inches * 50)  # 2 x 2 panels


def test_each_cell_has_the_colour_of_its_weight_and_masked_cells_are_zero():
    weights = np.load(WEIGHTS)
    panels, titles = attention_heatmap.select_panels(weights, batch=0)
    assert titles == ["head 0", "head 1", "head 2", "head 3"]
    figure = attention_heatmap.draw_heatmaps(panels, titles, TOKENS.split(), TOKENS.split())
    figure.canvas.draw()
    pixels = np.asarray(figure.canvas.buffer_rgba())[..., :3].astype(int)
    colour = matplotlib.colormaps["bone"]
    masked = np.triu(np.ones(panels.shape[1:], bool), 1)
    assert np.all(panels[:, masked] == 0)
    for axis, panel in zip(figure.axes, panels):
        assert [t.get_text() for t in axis.get_xticklabels()] == TOKENS.split()
        for (row, column), weight in np.ndenumerate(panel):
            x, y = axis.transData.transform((column, row))
            drawn = pixels[pixels.shape[0] - int(round(y)), int(round(x))]
            expected = np.round(np.array(colour(float(weight))[:3]) * 255)
            assert np.abs(drawn - expected).max() <= 2, (row, column, weight, drawn)
            if masked[row, column]:
                assert np.all(drawn == np.round(np.array(colour(0.0)[:3]) * 255))


def test_head_average_and_bad_shapes():
    weights = np.load(WEIGHTS)
    panels, titles = attention_heatmap.select_panels(weights, batch=2, average=True)
    np.testing.assert_allclose(panels[0], weights[2].mean(axis=0), rtol=1e-6)
    assert titles == ["mean of heads"]
    with pytest.raises(ValueError, match="batch: 3 is outside 0..2"):
        attention_heatmap.select_panels(weights, batch=3)
    with pytest.raises(ValueError, match=r"got shape \[6\]"):
        attention_heatmap.select_panels(np.zeros(6))
    with pytest.raises(ValueError, match="query_tokens: 2 labels for 6 positions"):
        attention_heatmap.draw_heatmaps(weights[0], ["h"] * 4, ["a", "b"])

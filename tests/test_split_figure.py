"""Lesson 3's split-and-merge figure (course_utils.attention.split_figure)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from course_utils.attention.split_figure import plot_split_merge  # noqa: E402


def test_the_figure_labels_every_shape_and_colours_by_head():
    ax = plot_split_merge(seq_len=3, d_model=8, num_heads=2)
    texts = [t.get_text() for t in ax.texts]
    assert "x: (T, d_model) = (3, 8)\none row per token" in texts
    assert any(t.startswith("head 0: (T, d_k) = (3, 4)") for t in texts)
    assert any(t.startswith("head 1: (T, d_k) = (3, 4)") for t in texts)
    assert any("(h, T, d_k) = (2, 3, 4)" in t for t in texts)
    assert any(t.startswith("merged: (T, h·d_k) = (3, 8)") for t in texts)
    boxes = [p for p in ax.patches if type(p).__name__ == "Rectangle"]
    assert len(boxes) == 3 * 3 * 8  # input, the heads, the merge: every number once each
    colours = {tuple(p.get_facecolor()) for p in boxes}
    assert len(colours) == 2  # one colour per head
    plt.close(ax.figure)


@pytest.mark.parametrize("kwargs, message", [
    ({"d_model": 8, "num_heads": 3}, "d_model = 8 is not divisible by num_heads = 3"),
    ({"seq_len": 0}, "seq_len"),
    ({"d_model": 32, "num_heads": 2}, "the drawing fits"),
])
def test_bad_sizes_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        plot_split_merge(**kwargs)

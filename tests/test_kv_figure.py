"""Lesson 7's drawings of K/V sharing and cache growth (course_utils.attention.kv_figure)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from course_utils.attention.kv_figure import design_name, plot_kv_cache_growth, plot_kv_sharing  # noqa: E402


def _gids(artists):
    return [a.get_gid() for a in artists if a.get_gid()]


def test_each_query_head_is_drawn_to_its_blocked_kv_head():
    ax = plot_kv_sharing(num_heads=8, kv_heads=(8, 2, 1))
    links = {gid for gid in _gids(ax.lines)}
    assert len(links) == 3 * 8  # one line per query head in every design
    assert "row0:q5->kv5" in links  # MHA: its own head
    assert {f"row1:q{i}->kv{i // 4}" for i in range(8)} <= links  # GQA g = 2: heads 0-3 read kv0
    assert {f"row2:q{i}->kv0" for i in range(8)} <= links  # MQA: all read kv0
    boxes = _gids(ax.patches)
    assert sum(b.startswith("row1:kv") for b in boxes) == 2
    assert sum(b.startswith("row2:kv") for b in boxes) == 1
    labels = " ".join(t.get_text() for t in ax.texts)
    assert "MHA\ng = 8" in labels and "GQA\ng = 2" in labels and "MQA\ng = 1" in labels
    assert "4x smaller than MHA" in labels and "8x smaller than MHA" in labels
    plt.close(ax.figure)


def test_the_lines_end_under_the_kv_head_they_name():
    ax = plot_kv_sharing(num_heads=4, kv_heads=(2,))
    kv_centre = {p.get_gid().split(":")[1]: p.get_x() + p.get_width() / 2
                 for p in ax.patches if p.get_gid() and ":kv" in p.get_gid()}
    for line in ax.lines:
        target = line.get_gid().split("->")[1]
        assert line.get_xdata()[1] == pytest.approx(kv_centre[target])
    plt.close(ax.figure)


def test_the_cache_gains_one_token_per_kv_head_per_step():
    ax = plot_kv_cache_growth(num_kv_heads=2, steps=3, prompt_len=1)
    boxes = _gids(ax.patches)
    for step in (1, 2, 3):
        k_boxes = [b for b in boxes if b.startswith(f"step{step}:K:")]
        assert len(k_boxes) == 2 * (1 + step)  # g rows, prompt + step tokens
        new = [b for b in boxes if b.startswith(f"step{step}:") and b.endswith(":new")]
        expected = [f"step{step}:{kv}:head{h}:token{step}:new" for kv in "KV" for h in (0, 1)]
        assert sorted(new) == sorted(expected)
    assert any("T = 4" in t.get_text() for t in ax.texts)
    plt.close(ax.figure)


def test_design_names():
    assert [design_name(8, g) for g in (8, 4, 1)] == ["MHA", "GQA", "MQA"]


@pytest.mark.parametrize("call, error, message", [
    (lambda: plot_kv_sharing(8, (3,)), ValueError, r"kv_heads\[0\] must divide num_heads=8"),
    (lambda: plot_kv_sharing(8, ()), TypeError, "kv_heads must be a non-empty sequence"),
    (lambda: plot_kv_sharing(8, (2.0,)), TypeError, r"kv_heads\[0\] must be an int"),
    (lambda: plot_kv_sharing(0), ValueError, "num_heads"),
    (lambda: plot_kv_cache_growth(steps=0), ValueError, "steps"),
    (lambda: plot_kv_cache_growth(num_kv_heads=9), ValueError, "num_kv_heads"),
])
def test_bad_sizes_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()

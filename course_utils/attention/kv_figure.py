"""Lesson 7's two drawings: which key/value head each query head reads (MHA, GQA, MQA), and how
the KV cache grows by one token per decoding step.

Both are drawn from the sizes given, not from a picture: the sharing follows the blocked rule
that ``grouped_query_attention`` and PyTorch's ``enable_gqa`` use (query head ``i`` reads key/value
head ``i // (h // g)``), and every line and box carries a ``gid`` naming what it is, so a test can
read the drawing back.
"""

from __future__ import annotations

from collections.abc import Sequence

from .validation import check_axes, check_distinct, check_int, check_kv_heads, items_of, shown

__all__ = ["plot_kv_sharing", "plot_kv_cache_growth", "design_name"]


def design_name(num_heads: int, num_kv_heads: int) -> str:
    """'MHA' when every query head has its own K/V head, 'MQA' when all share one, else 'GQA'.
    ``num_kv_heads`` must divide ``num_heads`` (each K/V head serves the same number of query heads)."""
    num_heads = check_int(num_heads, "num_heads", minimum=1)
    check_kv_heads(num_kv_heads, num_heads)
    if num_kv_heads == num_heads:
        return "MHA"
    return "MQA" if num_kv_heads == 1 else "GQA"


def plot_kv_sharing(num_heads: int = 8, kv_heads: Sequence[int] = (8, 2, 1), ax=None):
    """One row per entry of ``kv_heads``: the ``num_heads`` query heads on top, the ``g`` key/value
    heads below, and a line from each query head to the K/V head it reads. Returns the Axes.
    ``kv_heads`` lists distinct counts that divide ``num_heads``."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    h = check_int(num_heads, "num_heads", minimum=1, maximum=16)
    check_axes(ax)
    if isinstance(kv_heads, Sequence) and not isinstance(kv_heads, (str, bytes)):  # its len() may raise
        kv_heads = items_of(kv_heads, "kv_heads", "a non-empty sequence of ints")  # (battery 30)
    if isinstance(kv_heads, (str, bytes)) or not isinstance(kv_heads, Sequence) or not kv_heads:
        raise TypeError(f"kv_heads must be a non-empty sequence of ints (key/value heads per design), "
                        f"got {shown(kv_heads)}")
    groups = [check_int(g, f"kv_heads[{i}]", minimum=1) for i, g in enumerate(kv_heads)]
    check_distinct(groups, "kv_heads", "K/V head counts (one row each: a repeat draws one design twice)")
    for i, g in enumerate(groups):
        if h % g:
            raise ValueError(f"kv_heads[{i}] must divide num_heads={h} (each group holds h // g query "
                             f"heads), got {g}")
    colours = plt.get_cmap("tab10").colors
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 1.9 * len(groups) + 0.4))
    ax.axis("off")
    row_height = 3.2
    for r, g in enumerate(groups):
        top = -r * row_height
        size = h // g
        ax.text(-0.6, top - 0.9, f"{design_name(h, g)}\ng = {g}", ha="right", va="center", fontsize=9,
                fontweight="bold")
        for i in range(h):  # query heads, coloured by the group they belong to
            ax.add_patch(Rectangle((i, top - 0.6), 0.8, 0.6, facecolor=colours[(i // size) % 10],
                                   alpha=0.55, edgecolor="black", linewidth=0.6, gid=f"row{r}:q{i}"))
            ax.text(i + 0.4, top - 0.3, f"q{i}", ha="center", va="center", fontsize=7)
        for j in range(g):  # key/value heads, centred under their group
            x = j * size + (size - 0.8) / 2
            ax.add_patch(Rectangle((x, top - 2.2), 0.8, 0.6, facecolor=colours[j % 10],
                                   edgecolor="black", linewidth=0.6, gid=f"row{r}:kv{j}"))
            ax.text(x + 0.4, top - 1.9, f"kv{j}", ha="center", va="center", fontsize=7)
        for i in range(h):
            j = i // size  # the blocked rule
            ax.plot([i + 0.4, j * size + size / 2], [top - 0.6, top - 1.6], color=colours[j % 10],
                    linewidth=1.0, gid=f"row{r}:q{i}->kv{j}")
        ax.text(h + 0.2, top - 1.1, f"cache per token and layer:\n{g} K + {g} V heads "
                f"({h // g}x smaller than MHA)" if g != h else
                f"cache per token and layer:\n{h} K + {h} V heads", ha="left", va="center", fontsize=8)
    ax.set(xlim=(-2.2, h + 4.8), ylim=(-(len(groups) - 1) * row_height - 2.5, 0.5))
    ax.set_title(f"{h} query heads (top) and the key/value heads they read (bottom): "
                 f"query head i reads K/V head i // (h/g)", fontsize=10)
    return ax


def plot_kv_cache_growth(num_kv_heads: int = 2, steps: int = 4, prompt_len: int = 0, ax=None):
    """The cache of one layer after each of ``steps`` decoding steps: K and V each hold one column
    per cached token and one row per key/value head, and every step appends one column (darker)
    that the new token's query then reads together with all the others. ``prompt_len`` tokens of a
    prefill are in the cache before step 1. Returns the Axes."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    g = check_int(num_kv_heads, "num_kv_heads", minimum=1, maximum=8)
    n = check_int(steps, "steps", minimum=1, maximum=6)
    p = check_int(prompt_len, "prompt_len", minimum=0, maximum=6)
    check_axes(ax)
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 1.6 + 0.5 * g))
    ax.axis("off")
    old, new = plt.get_cmap("Blues")(0.35), plt.get_cmap("Oranges")(0.7)
    x = 0.0
    for s in range(1, n + 1):
        length = p + s  # tokens cached after step s
        for name, y0 in (("K", 0.0), ("V", -(g + 0.8))):
            for head in range(g):
                for t in range(length):
                    fresh = t == length - 1
                    gid = f"step{s}:{name}:head{head}:token{t}" + (":new" if fresh else "")
                    ax.add_patch(Rectangle((x + t, y0 - head - 1), 1, 1, facecolor=new if fresh else old,
                                           edgecolor="white", linewidth=1.0, gid=gid))
            ax.text(x - 0.2, y0 - g / 2, name, ha="right", va="center", fontsize=8)
        ax.text(x + length / 2, 0.4, f"after step {s}: T = {length}\nK, V: (B, g, T, d_k)",
                ha="center", va="bottom", fontsize=8)
        ax.text(x + length / 2, -(2 * g + 0.8) - 0.3,
                f"2·g·T = {2 * g * length} vectors\nof d_k per sentence", ha="center", va="top", fontsize=7.5)
        x += length + 2.4
    ax.set(xlim=(-0.9, x), ylim=(-(2 * g + 2.6), 2.0))
    ax.set_aspect("equal")
    ax.set_title(f"One layer's KV cache, g = {g} key/value heads (one row each), one column per token.\n"
                 f"Each step appends the new token's key and value (orange); its query reads every box.",
                 fontsize=9)
    return ax

"""Lesson 3's figure: how ``view`` + ``transpose`` split each token's features into heads, and how
the merge puts them back side by side, with every shape labelled.

Each cell of the drawing is one number of the tensor, coloured by the head that owns it and
labelled with its token, so the reader can follow a number from the input ``(T, d_model)``
to its head's ``(T, d_k)`` block and back.
"""

from __future__ import annotations

from .validation import check_axes, check_head_dims, check_int

__all__ = ["plot_split_merge"]


def plot_split_merge(seq_len: int = 3, d_model: int = 8, num_heads: int = 2, ax=None):
    """Draw ``x (T, d_model)`` -> ``view (T, h, d_k)`` -> ``transpose (h, T, d_k)`` -> attention per
    head -> ``transpose`` + merge ``(T, d_model)`` for one sentence (B = 1 left out). Returns the Axes."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    seq_len = check_int(seq_len, "seq_len", minimum=1)
    d_model, num_heads = check_int(d_model, "d_model"), check_int(num_heads, "num_heads")  # plain ints
    check_head_dims(d_model, num_heads)
    check_axes(ax)
    if seq_len > 6 or d_model > 16:
        raise ValueError(f"the drawing fits seq_len <= 6 and d_model <= 16 (one box per number), "
                         f"got seq_len={seq_len}, d_model={d_model}")
    T, d, h = seq_len, d_model, num_heads
    dk = d // h
    colours = plt.get_cmap("Set2").colors
    if ax is None:
        _, ax = plt.subplots(figsize=(12, 3.6))
    ax.axis("off")

    def grid(x0, y0, rows, owner, title):
        """rows: list of (token, [feature, ...]); owner(token, feature) -> head. Top-left at (x0, y0)."""
        for r, (token, features) in enumerate(rows):
            for c, f in enumerate(features):
                ax.add_patch(Rectangle((x0 + c, y0 - r - 1), 1, 1, facecolor=colours[owner(token, f) % 8],
                                       edgecolor="white", linewidth=1.2))
                ax.text(x0 + c + 0.5, y0 - r - 0.5, f"t{token}", ha="center", va="center", fontsize=6.5)
        ax.text(x0 + len(rows[0][1]) / 2, y0 + 0.35, title, ha="center", va="bottom", fontsize=8.5)

    def head_of(token, feature):
        return feature // dk

    every = [(t, list(range(d))) for t in range(T)]
    x = 0.0
    grid(x, T, every, head_of, f"x: (T, d_model) = ({T}, {d})\none row per token")
    steps = []
    x += d + 5.0
    steps.append(x)
    for head in range(h):  # the heads after view + transpose: (h, T, dk), one block per head
        rows = [(t, list(range(head * dk, (head + 1) * dk))) for t in range(T)]
        top = T - head * (T + 1.6) + (h - 1) * (T + 1.6) / 2
        grid(x, top, rows, head_of, f"head {head}: (T, d_k) = ({T}, {dk})")
    x += dk + 5.0
    steps.append(x)
    grid(x, T, every, head_of, f"merged: (T, h·d_k) = ({T}, {d})\nhead 0's d_k features, then head 1's, ...")
    mid = T / 2
    split_label = f".view(T, {h}, {dk})\n.transpose(0, 1)\n→ (h, T, d_k) = ({h}, {T}, {dk})"
    for start, end, label in ((d + 0.3, steps[0] - 0.3, split_label),
                              (steps[0] + dk + 0.3, steps[1] - 0.3,
                               "attention in each head\n.transpose(0, 1)\n.reshape(T, d_model)")):
        ax.add_patch(FancyArrowPatch((start, mid), (end, mid), arrowstyle="-|>", mutation_scale=12,
                                     color="black"))
        ax.text((start + end) / 2, mid + 0.25, label, ha="center", va="bottom", fontsize=7.5)
    top = T + 0.35 + (h - 1) * (T + 1.6) / 2 + 1.2
    bottom = min(0.0, T - (h - 1) * (T + 1.6) / 2 - T) - 0.5
    ax.set(xlim=(-0.5, x + d + 0.5), ylim=(bottom, top))
    ax.set_aspect("equal")
    ax.set_title(f"Split into {h} heads and merge, one sentence of {T} tokens (colour = head, label = token)",
                 fontsize=10)
    return ax

"""Attention heatmaps: one head, every head in a layers x heads grid, and an interactive explorer.

Rows of a heatmap are queries (the token doing the looking), columns are keys (the token
looked at); each row sums to 1. Under a causal mask the upper triangle is impossible, so it
is drawn blank rather than as zeros.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..attention.validation import (
    check_axes,
    check_callable,
    check_distinct,
    check_fits_in_memory,
    check_flag,
    check_holds_values,
    check_int,
    check_positive_number,
    items_of,
    plain_int,
    plain_str,
)
from ..attention.validation import shown as shown_value

if TYPE_CHECKING:
    import ipywidgets as widgets

    from .widgets import Explorer

# seaborn, ipywidgets and IPython's display are imported where a drawing or an explorer needs
# them: a lesson that only reads attention weights (model_attention) does not pay for them.

__all__ = ["plot_head", "plot_all_heads", "AttentionExplorer", "model_attention", "sentence_attention_fn"]

AttentionFn = Callable[[str], tuple[list[str], list[torch.Tensor]]]


def _as_matrix(weights: object) -> np.ndarray:
    if isinstance(weights, torch.Tensor):
        check_holds_values(weights, "weights")  # before it is copied to the CPU
        if weights.dtype == torch.bool or weights.is_complex():
            raise TypeError(f"weights must hold real numbers (attention weights in [0, 1]), got dtype "
                            f"{weights.dtype}")
        weights = weights.detach().to("cpu", torch.float64).numpy()
    if not isinstance(weights, np.ndarray):
        raise TypeError(f"weights must be a torch.Tensor or numpy array, got {type(weights).__name__}")
    if weights.ndim != 2:
        raise ValueError(f"one head's weights must be 2-D (T_query, T_key), got shape {weights.shape}")
    if weights.dtype == bool or not np.issubdtype(weights.dtype, np.number) or np.iscomplexobj(weights):
        raise TypeError(f"weights must hold real numbers (attention weights in [0, 1]), got dtype "
                        f"{weights.dtype}")
    if weights.size and np.isnan(weights).all():
        raise ValueError(f"weights are all NaN (shape {weights.shape}): nothing to draw")
    infinite = np.argwhere(np.isinf(weights))
    if len(infinite):  # the colour scale would clip it to 0 or 1 without a word
        where = tuple(int(i) for i in infinite[0])
        raise ValueError(f"weights must be attention weights in [0, 1], got {weights[where]} at (query, key) "
                         f"{where} ({len(infinite)} infinite entries)")
    outside = np.argwhere((weights < -WEIGHT_SLACK) | (weights > 1 + WEIGHT_SLACK))  # NaN compares False
    if len(outside):  # the colour scale would clip it to 0 or 1 and draw it as attention
        where = tuple(int(i) for i in outside[0])
        raise ValueError(f"weights must be attention weights in [0, 1], got {weights[where]:.4g} at (query, "
                         f"key) {where} ({len(outside)} entries outside): scores before the softmax?")
    return weights


#: How far outside [0, 1] a weight may lie and still be drawn (float rounding of a softmax).
WEIGHT_SLACK = 1e-3


#: matplotlib refuses an image of 2**16 pixels or more on a side, when it draws.
MAX_PIXELS_PER_SIDE = 2**16


def _check_figure_size(width: float, height: float, name: str) -> None:
    """A figure of ``width`` x ``height`` inches can be drawn: under matplotlib's pixel limit and
    in memory (RGBA), refused under ``name`` before matplotlib fails when it renders."""
    dpi = float(plt.rcParams["figure.dpi"])
    pixels = (width * dpi, height * dpi)
    if max(pixels) >= MAX_PIXELS_PER_SIDE:
        raise ValueError(f"{name} makes a figure of {width:,.1f} x {height:,.1f} inches, "
                         f"{pixels[0]:,.0f} x {pixels[1]:,.0f} pixels at {dpi:g} dpi; matplotlib draws fewer "
                         f"than {MAX_PIXELS_PER_SIDE:,} pixels a side")
    check_fits_in_memory(int(4 * pixels[0] * pixels[1]), name,
                         f"a {pixels[0]:,.0f} x {pixels[1]:,.0f} RGBA image")


#: The most query or key positions a heatmap draws: the figure is at most 6 inches wide, about
#: 600 pixels, so past this a cell is smaller than a pixel; drawing 5,000 x 5,000 cells takes
#: minutes. The lessons draw at most a few dozen.
MAX_POSITIONS = 512

#: The most tick labels an axis gets: a longer axis labels every k-th position (k the smallest
#: step that keeps to this many), since each tick costs time to draw and 512 labels would overlap.
MAX_LABELLED_POSITIONS = 64


def _check_positions(shape: tuple[int, ...], name: str) -> None:
    """A heatmap of ``shape`` ``(..., T_query, T_key)`` has at most :data:`MAX_POSITIONS` positions a
    side: else a ValueError naming ``name`` and its shape."""
    if max(shape[-2:], default=0) > MAX_POSITIONS:
        raise ValueError(f"{name} has shape {tuple(shape)}: a heatmap draws at most {MAX_POSITIONS} query or "
                         f"key positions (past that a cell is smaller than a pixel, and drawing takes "
                         f"minutes); plot a window of at most {MAX_POSITIONS} positions, e.g. the last ones")


def _thin_labels(ax: Axes, axis: str, labels: list[str]) -> None:
    """Label every k-th of ``labels`` on ``axis`` (``"x"`` or ``"y"``) of a heatmap, k the smallest
    step that keeps to :data:`MAX_LABELLED_POSITIONS` labels (ticks at the cells' centres)."""
    step = -(-len(labels) // MAX_LABELLED_POSITIONS)  # ceil
    positions = np.arange(0, len(labels), step)
    getattr(ax, f"set_{axis}ticks")(positions + 0.5, [labels[i] for i in positions])


#: The largest ``fontsize`` (points) a plot takes: the lessons use 6.5 to 11 (titles 4 more); a
#: far larger size only fails later, deep in matplotlib's font code, when the figure is drawn.
MAX_FONTSIZE = 100


def _check_drawing(fontsize: object, title: object, **flags: object) -> None:
    """The drawing options every plot takes: ``fontsize`` in (0, :data:`MAX_FONTSIZE`], ``title`` a
    str or None, flags bools."""
    if check_positive_number(fontsize, "fontsize") > MAX_FONTSIZE:
        raise ValueError(f"fontsize must be a number of points in (0, {MAX_FONTSIZE}] (the lessons use "
                         f"about 8), got {shown_value(fontsize)}")
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title must be a str or None, got {type(title).__name__} {shown_value(title, 60)}")
    if title is not None and type(title) is not str:  # matplotlib draws str(title) (battery 31)
        try:
            str(title)
        except Exception as err:  # noqa: BLE001 - its str is the broken part; say so
            raise TypeError(f"title must be a str or None, got a {type(title).__name__} whose str() raised "
                            f"{type(err).__name__}") from None
    for name, value in flags.items():
        check_flag(value, name)


def _check_tokens(tokens: Sequence[str], n: int, axis: str, name: str = "tokens") -> list[str]:
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise TypeError(f"{name} must be a list of strings, one per position, got {type(tokens).__name__}")
    tokens = items_of(tokens, name, "a list of strings, one per position")  # its len() may raise
    if len(tokens) != n:
        raise ValueError(f"got {len(tokens)} token labels for {n} {axis} positions")
    for i, token in enumerate(tokens):  # str() would draw None or a number as if it were a token
        if not isinstance(token, str):
            raise TypeError(f"{name} must be a list of strings, one per position, got {type(token).__name__} "
                            f"{shown_value(token, 40)} at index {i}")
    return [str(t) for t in tokens]


def plot_head(weights: torch.Tensor | np.ndarray, tokens: Sequence[str], *,
              key_tokens: Sequence[str] | None = None, ax: Axes | None = None, title: str | None = None,
              colorbar: bool = True, label_axes: tuple[bool, bool] = (True, True),
              fontsize: float = 8) -> Axes:
    """Heatmap of one head's weights ``(T_query, T_key)`` with token labels on both axes.

    ``tokens`` label the queries (rows); ``key_tokens`` the keys (columns), by default the
    same. ``label_axes=(x, y)`` turns the tick labels of each axis on or off (for grids).

    At most :data:`MAX_POSITIONS` (512) positions a side are drawn (more is refused, naming
    ``weights`` and its shape: past that a cell is smaller than a pixel and drawing takes
    minutes; plot a window instead). An axis of more than :data:`MAX_LABELLED_POSITIONS` (64)
    positions labels every k-th one only, to stay quick and readable; the lessons' heatmaps are
    shorter and labelled in full. ``ax``: None (a new figure) or a 2-D Axes; anything else, a 3-D
    or polar Axes included, is refused with a TypeError naming ``ax`` (:func:`check_axes`).
    """
    matrix = _as_matrix(weights)
    _check_positions(matrix.shape, "weights")
    _check_drawing(fontsize, title, colorbar=colorbar)
    missing = int(np.isnan(matrix).sum())
    if missing:  # drawn as grey cells, like the blocked ones: say so instead of passing over them
        warnings.warn(f"weights: {missing} of {matrix.size} entries are NaN; they are drawn as grey cells, "
                      f"like keys a mask blocks", stacklevel=2)
    if isinstance(label_axes, (tuple, list)):  # read once: a list whose len() raises is named
        label_axes = tuple(items_of(label_axes, "label_axes", "a pair of bools (x labels, y labels)"))
    if not (isinstance(label_axes, tuple) and len(label_axes) == 2
            and all(isinstance(flag, bool) for flag in label_axes)):
        raise TypeError(f"label_axes must be a pair of bools (x labels, y labels), got "
                        f"{shown_value(label_axes, 60)}")
    check_axes(ax)
    rows = _check_tokens(tokens, matrix.shape[0], "query")
    cols = (_check_tokens(rows, matrix.shape[1], "key") if key_tokens is None
            else _check_tokens(key_tokens, matrix.shape[1], "key", "key_tokens"))
    if ax is None:
        size = min(6.0, 1.5 + 0.3 * matrix.shape[1])
        _, ax = plt.subplots(figsize=(size + 1, size))
    import seaborn as sns

    blank = None
    if matrix.shape[0] == matrix.shape[1] and np.all(np.triu(matrix, 1) == 0):
        blank = np.triu(np.ones_like(matrix, dtype=bool), 1)  # causal: nothing to draw up there
    many = [len(labels) > MAX_LABELLED_POSITIONS for labels in (cols, rows)]  # labelled below
    sns.heatmap(matrix, mask=blank, vmin=0.0, vmax=1.0, cmap="viridis", square=True, ax=ax,
                cbar=colorbar, cbar_kws={"label": "attention weight", "shrink": 0.7} if colorbar else None,
                xticklabels=cols if label_axes[0] and not many[0] else False,
                yticklabels=rows if label_axes[1] and not many[1] else False)
    for axis, labels, shown, thinned in zip("xy", (cols, rows), label_axes, many, strict=True):
        if shown and thinned:
            _thin_labels(ax, axis, labels)
    ax.set_facecolor("#eeeeee")
    ax.tick_params(labelsize=fontsize, length=0)
    if label_axes[0]:
        ax.set_xlabel("key (attended to)", fontsize=fontsize + 1)
        ax.set_xticklabels(ax.get_xticklabels(), rotation=90)
    if label_axes[1]:
        ax.set_ylabel("query (attending)", fontsize=fontsize + 1)
        ax.set_yticklabels(ax.get_yticklabels(), rotation=0)
    if title:
        ax.set_title(title, fontsize=fontsize + 2)
    return ax


def _layer_head_grid(attention: object, batch_index: int) -> np.ndarray:
    """Per-layer weights (list of (B, h, T, T) or (h, T, T)) -> (L, h, T, T) for one sequence."""
    batch_index = check_int(batch_index, "batch_index", minimum=0)
    single = isinstance(attention, torch.Tensor) and attention.ndim in (3, 4)
    if single:
        attention = [attention]
    if isinstance(attention, (list, tuple)):  # a list whose len() raises is named (battery 30)
        attention = items_of(attention, "attention", "a non-empty list of per-layer weights")
    if not isinstance(attention, (list, tuple)) or not attention:
        raise TypeError("attention must be a non-empty list of per-layer weights (B, h, T, T) or "
                        f"(h, T, T), got {type(attention).__name__}")
    layers = []
    for i, layer in enumerate(attention):
        if not isinstance(layer, torch.Tensor):
            raise TypeError(f"layer {i}'s weights must be a torch.Tensor, got {type(layer).__name__}")
        check_holds_values(layer, "attention" if single else f"attention[{i}] (layer {i}'s weights)")
        if layer.ndim == 4:
            if not 0 <= batch_index < layer.shape[0]:
                raise ValueError(f"batch_index {batch_index} is out of range: expected an int in "
                                 f"0..{layer.shape[0] - 1} (the batch holds {layer.shape[0]} sequences)")
            layer = layer[batch_index]
        if layer.ndim != 3:
            raise ValueError(f"layer {i}'s weights must be (B, h, T, T) or (h, T, T), "
                             f"got {tuple(layer.shape)}")
        layers.append(layer.detach().to("cpu", torch.float64))
    shapes = {tuple(w.shape) for w in layers}
    if len(shapes) != 1:
        raise ValueError(f"every layer must have the same shape, got {sorted(shapes)}")
    return torch.stack(layers).numpy()


def plot_all_heads(attention: Sequence[torch.Tensor] | torch.Tensor, tokens: Sequence[str], *,
                   batch_index: int = 0, title: str | None = None,
                   head_titles: Callable[[int, int], str] | None = None,
                   panel_size: float = 2.3, fontsize: float = 7) -> Figure:
    """Every head in a layers x heads grid of heatmaps, with token labels and one colour bar.

    ``attention`` is the model's list of per-layer weights ``(B, h, T, T)`` (sequence
    ``batch_index`` is drawn) or ``(h, T, T)``. ``head_titles(layer, head)`` may add text (a
    score, say) to each panel's title.
    """
    _check_drawing(fontsize, title)
    check_positive_number(panel_size, "panel_size")
    if head_titles is not None:
        check_callable(head_titles, "head_titles", "a function (layer, head) -> str, or None", nargs=2)
    grid = _layer_head_grid(attention, batch_index)  # (L, h, T, T)
    _check_positions(grid.shape, "attention")  # before the figure is made
    num_layers, num_heads, seq_len, _ = grid.shape
    labels = _check_tokens(tokens, seq_len, "query")
    figsize = (panel_size * num_heads + 1.2, panel_size * num_layers + 0.6)
    _check_figure_size(*figsize, "panel_size")
    fig, axes = plt.subplots(num_layers, num_heads, squeeze=False,
                             figsize=figsize,
                             constrained_layout=True)
    for layer in range(num_layers):
        for head in range(num_heads):
            name = f"layer {layer}, head {head}"
            if head_titles is not None:
                extra = head_titles(layer, head)
                if not isinstance(extra, str):
                    plt.close(fig)
                    raise TypeError(f"head_titles({layer}, {head}) must return a str, got "
                                    f"{type(extra).__name__} {shown_value(extra, 60)}")
                name += extra
            plot_head(grid[layer, head], labels, ax=axes[layer, head], title=name, colorbar=False,
                      label_axes=(layer == num_layers - 1, head == 0), fontsize=fontsize)
    mappable = axes[0, 0].collections[0]
    fig.colorbar(mappable, ax=axes, shrink=0.6, aspect=25, label="attention weight")
    if title:
        fig.suptitle(title, fontsize=fontsize + 4)
    return fig


CONTROLS_NOTE = ("[interactive controls (sentence, layer, head): they need Jupyter with ipywidgets; "
                 "the figure above is the starting choice]")


def _say(text: str) -> None:
    from .widgets import say  # (widgets imports this module)

    say(text)


class AttentionExplorer:
    """Pick a sentence (or type one), a layer and a head; see that head's heatmap.

    ``attention_for(text)`` returns ``(token labels, per-layer weights)`` for one text, and
    raises ``ValueError`` with a readable message for text it cannot encode (unknown words).
    Nothing here raises at the learner: a bad sentence, layer or head becomes a message
    (:meth:`render`, :meth:`static`), or a message and the nearest valid starting choice
    (:meth:`widget`, :meth:`show`). A str or int subclass is read by the plain value it holds
    (:func:`~course_utils.attention.validation.plain_str`, ``plain_int``): its own methods
    (``strip``, ``__int__``), which may raise, are never called.
    """

    def __init__(self, attention_for: AttentionFn, sentences: Sequence[str], num_layers: int,
                 num_heads: int) -> None:
        if not callable(attention_for):
            raise TypeError(f"attention_for must be a function text -> (tokens, per-layer weights), got "
                            f"{type(attention_for).__name__} {shown_value(attention_for, 60)}")
        if isinstance(sentences, Sequence) and not isinstance(sentences, str):  # its len() may raise
            sentences = items_of(sentences, "sentences", "a non-empty list of example texts")
        if isinstance(sentences, str) or not isinstance(sentences, Sequence) or not sentences:
            raise (ValueError if isinstance(sentences, str | Sequence) else TypeError)(
                f"sentences must be a non-empty list of example texts, got "
                f"{type(sentences).__name__} {shown_value(sentences, 60)}")
        wrong = next((i for i, text in enumerate(sentences) if not isinstance(text, str)), None)
        if wrong is not None:
            raise TypeError(f"sentences[{wrong}] must be an example text (a str), got "
                            f"{type(sentences[wrong]).__name__} {shown_value(sentences[wrong], 60)}")
        sentences = [plain_str(text, "sentences") for text in sentences]  # a subclass's methods never run
        check_distinct(sentences, "sentences", "example texts (the menu would offer one twice)")
        num_layers, num_heads = (check_int(value, name, minimum=1)
                                 for name, value in (("num_layers", num_layers), ("num_heads", num_heads)))
        self.attention_for = attention_for
        self.sentences = list(sentences)
        self.num_layers, self.num_heads = num_layers, num_heads
        self.last: Figure | str | None = None  # what the explorer drew last (for tests)
        self.controls: dict[str, Any] = {}
        try:  # the attention of the first example must have the promised (L, h)
            _, attention = self._labels_and_weights(self.sentences[0])
            grid_shape = _layer_head_grid(attention, 0).shape  # (L, h, T, T)
        except Exception as err:
            raise ValueError(f"attention_for cannot draw the first example "
                             f"{shown_value(self.sentences[0], 80)}: "
                             f"{type(err).__name__}: {err}") from err
        if tuple(grid_shape[:2]) != (num_layers, num_heads):
            raise ValueError(f"num_layers={num_layers}, num_heads={num_heads} do not match the "
                             f"attention, which has {grid_shape[0]} layer(s) of {grid_shape[1]} "
                             "head(s)")

    def _labels_and_weights(self, text: str) -> tuple[list[str], object]:
        """``attention_for(text)``, checked to be a pair ``(token labels, per-layer weights)``: a
        list of weights returned alone would be unpacked as labels and one layer, and miscounted."""
        result = self.attention_for(text)
        if not isinstance(result, tuple | list) or len(result) != 2 or isinstance(result[0], torch.Tensor) \
                or not all(isinstance(label, str) for label in result[0]):
            shown = (f"a {type(result).__name__} of {len(result)} item(s), the first a "
                     f"{type(result[0]).__name__}" if isinstance(result, tuple | list) and result
                     else f"{type(result).__name__} {shown_value(result, 40)}")
            raise ValueError(f"attention_for must return a pair (token labels: a list of str, per-layer "
                             f"weights), got {shown}")
        return list(result[0]), result[1]

    # -- checking a choice ------------------------------------------------------------
    def choice_problem(self, layer: object, head: object) -> str | None:
        """A message if ``layer``/``head`` is not a valid choice (wrong type or range), else None."""
        choice = self._read_choice(layer, head)
        return choice if isinstance(choice, str) else None

    def _read_choice(self, layer: object, head: object) -> tuple[int, int] | str:
        """``(layer, head)`` as plain ints, or a message if either is not a valid choice. Each is
        read by ``plain_int``: an int subclass by the value it holds (its own ``__int__`` or
        ``__index__``, which may raise, never runs); one whose ``int()`` raises is a message."""
        plain = []
        for name, value, count in (("layer", layer, self.num_layers), ("head", head, self.num_heads)):
            try:
                plain.append(plain_int(value, name))
            except TypeError:
                return (f"The {name} must be a whole number from 0 to {count - 1}, such as 1; "
                        f"got {shown_value(value, 60)} (a {type(value).__name__}).")
        layer, head = plain
        if not 0 <= layer < self.num_layers or not 0 <= head < self.num_heads:
            return (f"Choose a layer in 0..{self.num_layers - 1} and a head in 0..{self.num_heads - 1} "
                    f"(got layer {layer}, head {head}).")
        return layer, head

    def _valid_start(self, text: object, layer: object, head: object) -> tuple[str, int, int]:
        """The starting choice for the controls: bad values are reported, then replaced."""
        choice = self._read_choice(layer, head)
        if isinstance(choice, str):
            def nearest(value: object, name: str, count: int) -> int:
                try:
                    return min(max(plain_int(value, name), 0), count - 1)
                except TypeError:
                    return 0

            layer, head = nearest(layer, "layer", self.num_layers), nearest(head, "head", self.num_heads)
            _say(f"{choice} Starting from layer {layer}, head {head} instead.")
        else:
            layer, head = choice
        if text is None:
            text = self.sentences[0]
        elif not isinstance(text, str):
            _say(f"The sentence must be a str, got a {type(text).__name__}; starting from "
                  f"{shown_value(self.sentences[0], 80)} instead.")
            text = self.sentences[0]
        return plain_str(text, "text"), layer, head

    # -- drawing ----------------------------------------------------------------------
    def render(self, text: object, layer: object, head: object) -> Figure | str:
        """The heatmap of ``head`` in ``layer`` on ``text``, or a message saying what is wrong
        (never an error: a str or int subclass is read by the plain value it holds)."""
        choice = self._read_choice(layer, head)
        if isinstance(choice, str):
            return choice
        layer, head = choice
        if text is not None and not isinstance(text, str):
            return f"The sentence must be a str, got a {type(text).__name__}."
        text = "" if text is None else plain_str(text, "text").strip()
        if not text:
            return "Type a sentence first."
        try:
            tokens, attention = self._labels_and_weights(text)
            grid = _layer_head_grid(attention, 0)  # (L, h, T, T)
        except Exception as err:  # unknown words, too long, a broken attention function
            from .widgets import _describe_error  # an error whose str() raises is named by type

            return f"Cannot draw this sentence: {_describe_error(err, with_type=False)}"
        if layer >= grid.shape[0] or head >= grid.shape[1]:
            return (f"This sentence's attention has {grid.shape[0]} layer(s) of {grid.shape[1]} "
                    f"head(s); layer {layer}, head {head} is not among them.")
        fig, ax = plt.subplots(figsize=(4.6, 3.8), constrained_layout=True)
        try:
            plot_head(grid[layer, head], tokens, ax=ax, title=f"layer {layer}, head {head}")
        except Exception as err:  # e.g. token labels that do not fit: no half-drawn figure
            plt.close(fig)
            from .widgets import _describe_error

            return f"Cannot draw this sentence: {_describe_error(err)}"
        return fig

    def static(self, text: str | None = None, layer: int = 0, head: int = 0) -> Figure | str:
        """Draw one choice as a plain figure (what a page without widgets shows); a problem
        is printed and returned as a message."""
        result = self.render(self.sentences[0] if text is None else text, layer, head)
        if isinstance(result, str):
            _say(result)
        return result

    def explorer(self, text: str, layer: int, head: int,
                 draw: Callable[[Figure | str], None] | None = None) -> Explorer:
        """Sentence box, layer and head pickers wired to :meth:`render` by a
        :class:`course_utils.interp.widgets.Explorer`, which draws the starting choice at once
        (in its own output area, or through ``draw``) and redraws on every change. A starting
        choice that is not among the pickers' is reported and replaced (:meth:`_valid_start`),
        as in :meth:`widget` and :meth:`show`: nothing here raises at the learner. A ``draw``
        that is not a function of one result is reported too, and the explorer draws in its
        own output area instead."""
        import ipywidgets as widgets

        from .widgets import Explorer

        text, layer, head = self._valid_start(text, layer, head)
        if draw is not None:
            try:
                check_callable(draw, "draw", "None or a function result -> None that shows each result",
                               nargs=1)
            except TypeError as err:
                _say(f"{err}; drawing in the explorer's own output area instead.")
                draw = None

        sentence = widgets.Combobox(options=self.sentences, value=text,
                                    placeholder="pick or type a sentence, then Enter",
                                    description="sentence", ensure_option=False,
                                    continuous_update=False, layout=widgets.Layout(width="95%"))
        layer_pick = widgets.Dropdown(options=list(range(self.num_layers)), value=layer, description="layer")
        head_pick = widgets.Dropdown(options=list(range(self.num_heads)), value=head, description="head")

        def render(sentence: object, layer: object, head: object) -> Figure | str:
            self.last = self.render(sentence, layer, head)
            return self.last

        explorer = Explorer(render, {"sentence": sentence, "layer": layer_pick, "head": head_pick},
                            rows=[["sentence"], ["layer", "head"]], draw=draw, note=CONTROLS_NOTE)
        self.controls = {**explorer.controls, "output": explorer.output}
        return explorer

    def widget(self, text: str | None = None, layer: int = 0, head: int = 0) -> widgets.VBox:
        """A self-contained ipywidgets explorer: the controls above an output area that
        shows the starting choice at once and is redrawn on every change."""
        return self.explorer(*self._valid_start(text, layer, head)).widget

    def show(self, text: str | None = None, layer: int = 0, head: int = 0) -> None:
        """Display the heatmap of this choice, then the controls that redraw it in place.

        The figure is an ordinary output (so a page without widgets, on GitHub say, still
        shows it); in Jupyter the controls replace that same output on every change, so
        there is only ever one heatmap. Outside a Jupyter kernel (a script, a terminal) a
        message is printed as text and the controls as :data:`CONTROLS_NOTE`: ``display`` would
        print the objects' reprs there.
        """
        from IPython.display import Pretty, display

        from .widgets import close_figure, in_jupyter_kernel

        kernel = in_jupyter_kernel()
        handle = None

        def draw(result: Figure | str) -> None:
            nonlocal handle
            if isinstance(result, str) and not kernel:
                _say(result)
                return
            shown = Pretty(result) if isinstance(result, str) else result
            if handle is None:  # the starting choice: an ordinary output
                handle = display(shown, display_id=True)
            else:
                handle.update(shown)
            close_figure(result)

        explorer = self.explorer(*self._valid_start(text, layer, head), draw=draw)
        if kernel:
            display(explorer)
        else:
            _say(explorer.note)


# ----------------------------------------------------------------------------- model adapters

@torch.no_grad()
def model_attention(model: torch.nn.Module, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Run ``model`` on ``tokens`` ``(B, T)`` (or ``(T,)``) and return its per-layer weights.

    Works with any model whose ``forward(tokens, return_attention=True)`` returns
    ``(logits, [weights (B, h, T, T)] * L)``, such as :class:`course_utils.model.transformer.TinyTransformer`.
    """
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"tokens must be a torch.Tensor of token ids, got {type(tokens).__name__}")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (a TinyTransformer), got {type(model).__name__}")
    _check_returns_attention(model)
    check_holds_values(tokens, "tokens")  # before it is copied to the model's device
    first = next(model.named_parameters(), None)  # its weights come back to the CPU
    if first is not None:
        check_holds_values(first[1], f"model's {first[0]}")
    if tokens.ndim == 1:
        tokens = tokens.unsqueeze(0)  # (1, T)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    _, attention = model(tokens.to(device), return_attention=True)
    model.train(was_training)
    return [w.detach().cpu() for w in attention]


def _check_returns_attention(model: torch.nn.Module) -> None:
    """``model.forward`` takes ``return_attention`` (a whole model such as TinyTransformer, not one
    attention layer, whose forward takes query, key and value)."""
    import inspect

    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return  # a signature Python cannot read: let the call say
    if "return_attention" not in parameters and not any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        hint = (" (one attention layer: call it with need_weights=True for its weights)"
                if "query" in parameters else "")
        raise TypeError(f"model must be a model whose forward(tokens, return_attention=True) returns "
                        f"(logits, per-layer weights), such as a TinyTransformer, got "
                        f"{type(model).__name__}, whose forward takes ({', '.join(parameters)}){hint}")


def sentence_attention_fn(model: torch.nn.Module) -> AttentionFn:
    """``text -> (word labels, per-layer weights (1, h, T, T))`` for the agreement grammar.

    Unknown words raise ``ValueError`` naming them (from :func:`course_utils.tasks.synthetic.tokenize`),
    which :class:`AttentionExplorer` shows as a message.
    """
    from ..tasks.synthetic import detokenize, tokenize

    max_len = getattr(getattr(model, "config", None), "max_len", None)
    if not isinstance(model, torch.nn.Module) or max_len is None:
        raise TypeError(f"model must be a TinyTransformer (a module whose forward takes "
                        f"return_attention=True and whose config has max_len), got {type(model).__name__}")

    def attention_for(text: str) -> tuple[list[str], list[torch.Tensor]]:
        ids = tokenize(text)  # (T,) with <bos> first
        if max_len is not None and ids.numel() > max_len:
            raise ValueError(f"the sentence has {ids.numel()} tokens with <bos>; this model reads at most "
                             f"{max_len}")
        return detokenize(ids), model_attention(model, ids)

    return attention_for

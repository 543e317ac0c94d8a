"""Interactive explorers built on ipywidgets, with a static fallback.

A notebook run without a widget front end (nbval, nbclient, a page on GitHub) cannot
show sliders. The pattern used throughout the course:

* a *render function* turns plain values into something to show (text, a figure) and
  never raises for bad values: it returns a message instead;
* :class:`Explorer` wires controls to that function and shows its result live;
* :func:`show` prints a static fallback (the render function at the default values),
  then displays the widget when running inside a Jupyter kernel.

Every explorer of the course is an :class:`Explorer`: lesson 3's :func:`dimension_explorer`
and lesson 5's :class:`course_utils.interp.heatmaps.AttentionExplorer` (whose figure stays an
ordinary output that the controls redraw in place).

The kernel cannot know whether a front end will draw the widget, so the static
fallback is always printed. No widget state is saved in the notebooks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import matplotlib.pyplot as plt
from IPython.display import display
from matplotlib.figure import Figure

from ..attention.shapes import dimension_report
from ..attention.validation import plain_int, plain_str, say, shown

__all__ = ["in_jupyter_kernel", "Explorer", "close_figure", "show", "dimension_explorer",
           "show_dimension_explorer"]

NO_FRONT_END_NOTE = (
    "[interactive explorer: it needs Jupyter with ipywidgets; the static output above "
    "shows the default values]"
)


def in_jupyter_kernel() -> bool:
    """True inside a Jupyter (IPython) kernel, where widgets can be displayed."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython ships with ipywidgets
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _describe_error(err: BaseException, *, with_type: bool = True) -> str:
    """``"ValueError: its message"`` (only ``"its message"`` when ``with_type`` is false, for a
    message that names its cause already); an error whose ``str()`` itself raises is named by its
    type alone (an explorer shows a message and never raises)."""
    try:
        return f"{type(err).__name__}: {err}" if with_type else str(err)
    except Exception:  # noqa: BLE001 - its message is the broken part; say so instead
        return f"{type(err).__name__} (its message could not be shown)"


class Explorer:
    """Controls wired to a render function; the result updates whenever a value changes.

    Args:
        render: called as ``render(**values)`` with each control's value by name. A
            ``str`` result is shown as text; any other result (e.g. a matplotlib
            figure) is displayed. An exception becomes a one-line message.
        controls: name -> ipywidgets value widget (slider, dropdown, ...); each name is a
            non-empty str (``render`` gets the values as keywords).
        title: optional heading shown above the controls.
        rows: the controls' layout, as rows of names (default: one row that wraps).
        draw: called with each result instead of showing it in the explorer's own
            output area (e.g. to update a figure displayed above the controls). An
            exception it raises becomes a one-line message in that output area, which is
            then shown under the controls.
        note: what a page without a widget front end shows in the explorer's place.
    """

    def __init__(self, render: Callable[..., Any], controls: Mapping[str, widgets.ValueWidget],
                 *, title: str = "", rows: Sequence[Sequence[str]] | None = None,
                 draw: Callable[[Any], None] | None = None, note: str = NO_FRONT_END_NOTE) -> None:
        if not callable(render):
            raise TypeError(f"render must be callable, got {type(render).__name__}")
        if not isinstance(controls, Mapping) or not controls:
            raise ValueError(f"controls must be a non-empty dict {{name: widget}}: an explorer needs at "
                             f"least one control, got {type(controls).__name__} {shown(controls, 60)}")
        if not isinstance(title, str):
            raise TypeError(f"title must be a str, got {type(title).__name__}")
        if draw is not None and not callable(draw):
            raise TypeError(f"draw must be None or a function result -> None that shows each result, "
                            f"got {type(draw).__name__} {shown(draw, 60)}")
        for name, control in controls.items():
            if not isinstance(name, str) or not name:  # render is called as render(**values)
                raise (TypeError if not isinstance(name, str) else ValueError)(
                    f"controls' names must be non-empty str (render is called with them as keywords), "
                    f"got {type(name).__name__} {shown(name, 60)}")
            if not isinstance(control, widgets.ValueWidget):
                raise TypeError(f"control {shown(name)} must be an ipywidgets value widget, "
                                f"got {type(control).__name__}")
        if not isinstance(note, str):
            raise TypeError(f"note must be a str (what a page without a widget front end shows), got "
                            f"{type(note).__name__} {shown(note, 60)}")
        if rows is not None and (isinstance(rows, str) or not isinstance(rows, Sequence) or not all(
                isinstance(row, Sequence) and not isinstance(row, str)
                and all(isinstance(name, str) for name in row) for row in rows)):
            raise TypeError(f"rows must be None or a list of rows, each a list of control names (str), "
                            f"such as [['layer', 'head']], got {type(rows).__name__} {shown(rows, 60)}")
        rows = [list(controls)] if rows is None else [list(row) for row in rows]
        placed = [name for row in rows for name in row]
        if sorted(placed) != sorted(controls) or not all(rows):
            raise ValueError(f"rows must place each control once in non-empty rows, got {rows} "
                             f"for the controls {list(controls)}")
        self.render = render
        self.controls = dict(controls)
        self.output = widgets.Output()
        self.draw = self._draw_in_output if draw is None else draw
        self.note = note
        self.last_result: Any = None
        self.last_text = ""
        parts: list[widgets.Widget] = [widgets.HTML(f"<b>{title}</b>")] if title else []
        wrap = widgets.Layout(flex_flow="row wrap")
        parts += [widgets.HBox([self.controls[name] for name in row], layout=wrap)
                  if len(row) > 1 else self.controls[row[0]] for row in rows]
        if draw is None:
            parts.append(self.output)
        self.widget = widgets.VBox(parts)
        for control in self.controls.values():
            control.observe(self.refresh, names="value")
        self.refresh()

    def values(self) -> dict[str, Any]:
        return {name: control.value for name, control in self.controls.items()}

    def __copy__(self) -> Explorer:  # shallow: the same widgets, as before (pickling is refused below)
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        return twin

    def __deepcopy__(self, memo: dict) -> Explorer:
        self._refuse_copy("copied with copy.deepcopy")

    def __reduce_ex__(self, protocol: object) -> tuple:
        self._refuse_copy("pickled")

    def _refuse_copy(self, how: str) -> None:
        """ipywidgets' own NotImplementedError ('custom implementation required') or a lambda's
        PicklingError named neither the explorer nor what to do (battery 30)."""
        raise TypeError(f"an Explorer cannot be {how}: its controls are live ipywidgets wired to its render "
                        f"function; build a new one instead (call the function that made it again)")

    def refresh(self, change: object = None) -> None:
        """Re-render with the current values (called on every change)."""
        try:
            result = self.render(**self.values())
        except Exception as err:  # shown as a message, never as a traceback
            result = f"Could not render these values: {_describe_error(err)}"
        self.last_result = result
        self.last_text = result if isinstance(result, str) else ""
        if self.draw is not self._draw_in_output:
            self.output.outputs = ()  # a problem shown by an earlier failed draw is over
        try:
            self.draw(result)
        except Exception as err:  # a broken draw callback: a message under the controls, not a traceback
            self._show_draw_problem(result, err)

    def _show_draw_problem(self, result: Any, err: Exception) -> None:
        """Show why ``draw`` failed on ``result`` in the explorer's own output area (added under
        the controls when ``draw`` replaced it), and keep it as ``last_text`` for :func:`show`."""
        close_figure(result)
        message = f"Could not draw this result: draw raised {_describe_error(err)}"
        self.last_result = self.last_text = message
        if self.output not in self.widget.children:
            self.widget.children = (*self.widget.children, self.output)
        self._draw_in_output(message)

    def _draw_in_output(self, result: Any) -> None:
        if isinstance(result, str):
            self.output.outputs = ({"output_type": "stream", "name": "stdout", "text": result + "\n"},)
            return
        self.output.outputs = ()
        if result is not None and in_jupyter_kernel():
            with self.output:
                display(result)
        close_figure(result)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        bundle["text/plain"] = self.note  # a saved page shows this, not the widget's repr
        return bundle


def close_figure(result: object) -> None:
    """Close ``result`` if it is a matplotlib figure (once displayed, pyplot need not keep it)."""
    if isinstance(result, Figure):
        plt.close(result)


def show(explorer: Explorer, fallback: str | None = None) -> None:
    """Print ``fallback`` (default: the explorer's current text), then display the
    widget if a Jupyter kernel is running. Works the same under nbval and in scripts.

    Like the explorers, it never raises at the learner: an ``explorer`` that is not an
    :class:`Explorer` is answered with a printed message (and nothing is displayed), a
    ``fallback`` that is not a str with a printed message (and the explorer's own text). A str
    subclass is printed as the plain str it holds (its own methods, which may raise, never run)."""
    if not isinstance(explorer, Explorer):
        say(f"explorer must be an Explorer (e.g. dimension_explorer()), got {type(explorer).__name__} "
              f"{shown(explorer, 60)}; nothing to show.")
        return
    if fallback is not None and not isinstance(fallback, str):
        say(f"fallback must be a str (the text to print) or None, got {type(fallback).__name__} "
              f"{shown(fallback, 60)}; printing the explorer's own text instead.")
        fallback = None
    if fallback is not None:
        fallback = plain_str(fallback, "fallback")
    text = explorer.last_text if fallback is None else fallback
    if text:
        say(text)
    if in_jupyter_kernel():
        display(explorer)


def _slider(description: str, value: int, low: int, high: int, step: int = 1) -> widgets.IntSlider:
    return widgets.IntSlider(value=value, min=low, max=high, step=step, description=description,
                             continuous_update=False, style={"description_width": "initial"},
                             layout=widgets.Layout(width="260px"))


_DIMENSION_DEFAULTS = {"batch": 2, "seq_len": 10, "d_model": 512, "num_heads": 8}


def dimension_explorer(batch: int = 2, seq_len: int = 10, d_model: int = 512, num_heads: int = 8,
                       **unknown: object) -> Explorer:
    """Sliders for B, T, d_model and h; shows :func:`course_utils.attention.shapes.dimension_report`.

    ``d_model`` moves in steps of 8 and h from 1 to 16, so some combinations do not
    divide: the explorer then says so instead of drawing a table. A starting value that
    is not on its slider is refused with a message, not an error: the message is printed and
    shown in the explorer's place of the table (``last_text``), and the slider starts from
    the default; moving any slider draws the table for the values shown. A keyword that is
    not a slider (a typo) gets the same kind of message, naming the four sliders. A value that
    subclasses int is read by the plain int it holds (its own ``__int__``, which may raise, never
    runs), one whose ``int()`` raises is refused like any other value that is not on the slider.
    """
    requested = {"batch": batch, "seq_len": seq_len, "d_model": d_model, "num_heads": num_heads}
    ranges = {"batch": ("batch B", 1, 8, 1), "seq_len": ("sequence T", 1, 64, 1),
              "d_model": ("d_model", 8, 1024, 8), "num_heads": ("heads h", 1, 16, 1)}
    controls = {}
    refused = [f"{plain_str(name, 'a keyword')}={shown(value, 40)} is not a slider of this explorer (its "
               f"sliders: {', '.join(ranges)}); ignored." for name, value in unknown.items()]
    for line in refused:
        say(line)
    for name, (label, low, high, step) in ranges.items():
        value = requested[name]
        try:  # a NumPy integer is an int too (check_int's rule)
            number: int | None = plain_int(value, name)
        except TypeError:
            number = None
        usable = number is not None and low <= number <= high and (number - low) % step == 0
        start = number if usable else _DIMENSION_DEFAULTS[name]
        if not usable:  # a message, not an error: the explorer starts from the default
            refused.append(f"{name}={shown(value, 60)} is not on the slider (whole numbers {low}..{high}"
                           f"{f' in steps of {step}' if step > 1 else ''}); starting from {start}.")
            say(refused[-1])
        controls[name] = _slider(label, start, low, high, step=step)
    explorer = Explorer(dimension_report, controls,
                        title="Multi-head attention: shapes, parameters and multiply-adds")
    if refused:  # no table for values nobody asked for: the message stands until a slider moves
        message = "\n".join([*refused, "Move a slider to draw the table for the values shown."])
        explorer.last_result = explorer.last_text = message
        explorer.draw(message)
    return explorer


def show_dimension_explorer(**defaults: int) -> Explorer:
    """Print the report for the defaults, then display the live explorer (in Jupyter)."""
    explorer = dimension_explorer(**defaults)
    show(explorer)
    return explorer

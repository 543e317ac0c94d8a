"""The explorers build and update without a widget front end, and never raise at the user."""

from __future__ import annotations

import ipywidgets as widgets
import pytest

from course_utils.attention.shapes import dimension_report
from course_utils.interp.widgets import (
    NO_FRONT_END_NOTE,
    Explorer,
    dimension_explorer,
    in_jupyter_kernel,
    show,
    show_dimension_explorer,
)


@pytest.mark.parametrize("shell,expected", [
    (None, False),  # plain Python: no IPython shell at all
    (type("TerminalShell", (), {})(), False),  # IPython in a terminal: a shell without a kernel
    (type("KernelShell", (), {"kernel": object()})(), True),  # a Jupyter kernel
], ids=["python", "terminal-ipython", "jupyter-kernel"])
def test_a_kernel_is_told_from_other_shells(monkeypatch, shell, expected):
    import IPython

    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    assert in_jupyter_kernel() is expected


def test_dimension_explorer_builds_and_shows_the_default_report():
    explorer = dimension_explorer()
    assert isinstance(explorer.widget, widgets.VBox)
    assert explorer.values() == {"batch": 2, "seq_len": 10, "d_model": 512, "num_heads": 8}
    assert explorer.last_text == dimension_report(2, 10, 512, 8)
    assert explorer.output.outputs[0]["text"].startswith("B = 2, T = 10")


def test_dimension_explorer_updates_live():
    explorer = dimension_explorer()
    explorer.controls["num_heads"].value = 4
    explorer.controls["seq_len"].value = 6
    assert "d_k = d_v = 128" in explorer.last_text
    assert "[2, 4, 6, 6]" in explorer.last_text  # the scores
    assert explorer.output.outputs[0]["text"] == explorer.last_text + "\n"


def test_invalid_combination_shows_a_message():
    explorer = dimension_explorer()
    explorer.controls["num_heads"].value = 3  # 512 / 3 is not whole
    assert explorer.last_text.startswith("Invalid combination")
    assert "not divisible by num_heads = 3" in explorer.output.outputs[0]["text"]
    explorer.controls["num_heads"].value = 16  # back to valid
    assert "d_k = d_v = 32" in explorer.last_text


def test_show_prints_the_static_fallback_without_a_front_end(capsys):
    explorer = show_dimension_explorer(batch=1, seq_len=3)
    printed = capsys.readouterr().out
    assert printed.strip() == dimension_report(1, 3, 512, 8).strip()
    assert explorer.values()["seq_len"] == 3
    show(explorer, fallback="static text")
    assert capsys.readouterr().out == "static text\n"


def test_explorer_turns_render_errors_into_messages():
    def render(n):
        if n > 2:
            raise RuntimeError("boom")
        return f"n = {n}"

    explorer = Explorer(render, {"n": widgets.IntSlider(value=1, min=0, max=5)}, title="t")
    assert explorer.last_text == "n = 1"
    explorer.controls["n"].value = 4
    assert explorer.last_text == "Could not render these values: RuntimeError: boom"


def test_explorer_non_text_result_is_kept():
    sentinel = object()
    explorer = Explorer(lambda n: sentinel, {"n": widgets.IntSlider(value=1)})
    assert explorer.last_result is sentinel and explorer.last_text == ""
    assert explorer.output.outputs == ()


def test_explorer_mimebundle_has_a_text_fallback():
    bundle = dimension_explorer()._repr_mimebundle_()
    assert bundle["text/plain"] == NO_FRONT_END_NOTE
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_explorer_rejects_bad_arguments():
    with pytest.raises(TypeError, match="callable"):
        Explorer("not callable", {"n": widgets.IntSlider()})
    with pytest.raises(ValueError, match="at least one control"):
        Explorer(lambda: "", {})
    with pytest.raises(TypeError, match="value widget"):
        Explorer(lambda n: "", {"n": 3})
    with pytest.raises(ValueError, match="each control once"):
        Explorer(lambda n: "", {"n": widgets.IntSlider()}, rows=[["n"], ["m"]])
    show(widgets.IntSlider())  # show answers a learner with a message instead (battery 17, C1)


def test_explorer_rows_draw_and_note():
    drawn = []
    a, b, c = (widgets.IntSlider(value=v) for v in (1, 2, 3))
    explorer = Explorer(lambda a, b, c: f"{a + b + c}", {"a": a, "b": b, "c": c},
                        rows=[["a"], ["b", "c"]], draw=drawn.append, note="static note")
    assert drawn == ["6"]  # the starting values, drawn at once through ``draw``
    b.value = 5
    assert drawn == ["6", "9"] and explorer.output.outputs == ()  # its own output area is unused
    first, second = explorer.widget.children
    assert first is a and list(second.children) == [b, c]
    assert explorer._repr_mimebundle_()["text/plain"] == "static note"


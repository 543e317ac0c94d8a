"""Battery 21 (issue 38), helper R (course_utils/interp/*): a HeadTrace records the config of
the model traced (direct_logit_attribution refuses a trace of another model with the same sizes),
plot_head on very long sequences, AttentionExplorer.show's messages outside a kernel."""

from __future__ import annotations

import dataclasses

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from bad_input_cases import raises_naming, tiny_model  # noqa: E402

from course_utils.interp import circuits, heatmaps  # noqa: E402
from course_utils.model.transformer import ModelConfig  # noqa: E402

V, MAX_LEN = 16, 12
MAX = getattr(heatmaps, "MAX_POSITIONS", 512)  # the limits plot_head states
LABELLED = getattr(heatmaps, "MAX_LABELLED_POSITIONS", 64)


_model = tiny_model  # vocabulary V, max_len MAX_LEN


MODEL = _model()
TOKENS = torch.randint(0, V, (3, 6), generator=torch.Generator().manual_seed(1))


# -- group 7: a trace of another model with the same sizes --------------------------------
@pytest.mark.parametrize("other,wrong", [
    ({"mlp": True}, "mlp=True (model: False)"),
    ({"mlp": True, "d_mlp": 8}, "d_mlp=8 (model: None)"),
    ({"num_kv_heads": 1}, "num_kv_heads=1 (model: 2)"),
    ({"max_len": MAX_LEN + 4}, f"max_len={MAX_LEN + 4} (model: {MAX_LEN})"),
])
def test_dla_refuses_a_trace_of_another_model_of_the_same_sizes(other: dict, wrong: str) -> None:
    trace = circuits.trace_heads(_model(**other), TOKENS)
    message = raises_naming(ValueError, ["trace must be a trace of model", wrong],
                            lambda: circuits.direct_logit_attribution(MODEL, trace, TOKENS))
    assert message.startswith("trace")


def test_trace_records_the_model_config_and_still_reads_its_own_model() -> None:
    trace = circuits.trace_heads(MODEL, TOKENS)
    assert trace.config == MODEL.config
    assert circuits.direct_logit_attribution(MODEL, trace, TOKENS).shape == (2, 2, 3, 6)
    assert circuits.direct_logit_attribution(_model(), trace, TOKENS).shape == (2, 2, 3, 6)  # same config


@pytest.mark.parametrize("config,wrong", [
    (ModelConfig(V, MAX_LEN, d_model=16, num_heads=2, num_layers=3), "num_layers=2 (config: 3)"),
    (ModelConfig(V + 1, MAX_LEN, d_model=16, num_heads=2, num_layers=2), f"vocab_size={V} (config: {V + 1})"),
    (ModelConfig(V, MAX_LEN, d_model=16, num_heads=4, num_layers=2), "num_heads=2 (config: 4)"),
])
def test_headtrace_refuses_a_config_its_shapes_contradict(config: ModelConfig, wrong: str) -> None:
    trace = circuits.trace_heads(MODEL, TOKENS)
    raises_naming(ValueError, ["HeadTrace.config", wrong], lambda: dataclasses.replace(trace, config=config))


def test_headtrace_refuses_a_config_that_is_not_one() -> None:
    trace = circuits.trace_heads(MODEL, TOKENS)
    raises_naming(TypeError, ["HeadTrace.config", "dict"],
                  lambda: dataclasses.replace(trace, config=MODEL.config.to_dict()))


# -- group 8: plot_head on thousands of positions -----------------------------------------
@pytest.mark.parametrize("shape", [(MAX + 1, MAX + 1), (1, MAX + 1), (MAX + 1, 2)])
def test_plot_head_refuses_more_positions_than_it_draws(shape: tuple[int, int]) -> None:
    weights = torch.zeros(shape)
    rows, cols = [str(i) for i in range(shape[0])], [str(i) for i in range(shape[1])]
    raises_naming(ValueError, ["weights", str(shape), str(MAX)],
                  lambda: heatmaps.plot_head(weights, rows, key_tokens=cols))


def test_plot_all_heads_refuses_them_before_making_a_figure() -> None:
    figures = plt.get_fignums()
    raises_naming(ValueError, ["attention", f"(1, 2, {MAX + 1}, {MAX + 1})", str(MAX)],
                  lambda: heatmaps.plot_all_heads(torch.zeros(1, 2, MAX + 1, MAX + 1), ["a"] * (MAX + 1)))
    assert plt.get_fignums() == figures  # no figure left behind


@pytest.mark.parametrize("length", [LABELLED + 1, MAX])
def test_plot_head_labels_every_kth_position_of_a_long_axis(length: int) -> None:
    labels = [f"t{i}" for i in range(length)]
    ax = heatmaps.plot_head(torch.eye(length), labels)
    try:
        for ticks in (ax.get_xticklabels(), ax.get_yticklabels()):
            texts = [t.get_text() for t in ticks]
            assert 1 < len(texts) <= LABELLED and texts[0] == "t0"
            step = int(texts[1][1:])
            assert texts == labels[::step]  # each tick names its own position
            assert list(ax.get_xticks()[:2]) == [0.5, step + 0.5]
    finally:
        plt.close(ax.figure)


def test_plot_head_labels_every_position_of_a_lesson_sized_axis() -> None:
    labels = [f"t{i}" for i in range(LABELLED)]
    ax = heatmaps.plot_head(torch.eye(len(labels)), labels)
    try:
        assert [t.get_text() for t in ax.get_xticklabels()] == labels
        assert [t.get_text() for t in ax.get_yticklabels()] == labels
    finally:
        plt.close(ax.figure)


# -- group 9: AttentionExplorer.show's messages outside a kernel --------------------------
def _explorer() -> heatmaps.AttentionExplorer:
    def attention_for(text: str) -> tuple[list[str], list[torch.Tensor]]:
        words = ["<bos>", *text.split()]
        return words, [torch.eye(len(words))[None, None].expand(1, 2, -1, -1)] * 2

    return heatmaps.AttentionExplorer(attention_for, ["the cat sat"], num_layers=2, num_heads=2)


@pytest.mark.parametrize("text,layer,message", [
    ("", 0, "Type a sentence first."),
    ("   ", 1, "Type a sentence first."),
    (3, 0, "The sentence must be a str"),
])
def test_show_prints_its_message_as_text_outside_a_kernel(capsys: pytest.CaptureFixture, text: object,
                                                          layer: int, message: str) -> None:
    _explorer().show(text=text, layer=layer)
    out = capsys.readouterr().out
    assert message in out and "object>" not in out and "object at 0x" not in out, out
    assert heatmaps.CONTROLS_NOTE in out


def test_show_displays_its_message_in_a_kernel_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    import IPython.display

    from course_utils.interp import widgets

    shown = []
    monkeypatch.setattr(widgets, "in_jupyter_kernel", lambda: True)
    monkeypatch.setattr(IPython.display, "display", lambda obj, **kwargs: shown.append(obj))
    _explorer().show(text="")
    assert isinstance(shown[0], IPython.display.Pretty) and shown[0].data == "Type a sentence first."
    assert isinstance(shown[-1], widgets.Explorer) and len(shown) == 2

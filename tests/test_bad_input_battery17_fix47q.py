"""Battery 17 (issue 38), helper Q: explorer calls answer with a message instead of raising,
unused role arguments, the fontsize bound, direction dtypes, messages that say what arrived."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import ipywidgets  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course_utils.interp.heatmaps import AttentionExplorer  # noqa: E402
from course_utils.interp.widgets import Explorer, dimension_explorer, show  # noqa: E402


def _uniform_attention(text: str) -> tuple[list[str], list[torch.Tensor]]:
    words = text.split()
    n = len(words)
    weights = torch.ones(n, n).tril()
    weights = weights / weights.sum(-1, keepdim=True)
    return words, [weights.expand(1, 2, n, n).clone() for _ in range(2)]


# -- C1: explorer calls never raise at a bad draw / explorer / fallback --------------------
@pytest.mark.parametrize("draw", ["abc", 7, True, lambda: None])
def test_attention_explorer_answers_a_bad_draw_with_a_message(draw, capsys):
    explorer = AttentionExplorer(_uniform_attention, ["the cat sat"], 2, 2)
    result = explorer.explorer("the cat sat", 0, 0, draw=draw)
    out = capsys.readouterr().out
    assert isinstance(result, Explorer)
    assert "draw must be None or a function" in out and type(draw).__name__ in out
    assert result.output in result.widget.children  # drawn in its own output area instead


@pytest.mark.parametrize("bad", [None, "abc", True, 7, []])
def test_show_answers_a_non_explorer_with_a_message(bad, capsys):
    assert show(bad) is None
    out = capsys.readouterr().out
    assert "explorer must be an Explorer" in out and f"got {type(bad).__name__} {bad!r}" in out


@pytest.mark.parametrize("bad", [True, 7])
def test_show_answers_a_bad_fallback_with_a_message(bad, capsys):
    explorer = dimension_explorer()
    capsys.readouterr()
    show(explorer, fallback=bad)
    out = capsys.readouterr().out
    assert f"fallback must be a str (the text to print) or None, got {type(bad).__name__} {bad!r}" in out
    assert explorer.last_text in out  # the explorer's own text instead


# -- C2: an exception in a draw callback becomes a message -------------------------------
def test_explorer_answers_a_failing_draw_with_a_message():
    explorer = Explorer(lambda **kw: "x", {"a": ipywidgets.IntSlider(1)}, draw=lambda r: 1 / 0)
    explorer.refresh()
    assert "draw raised ZeroDivisionError" in explorer.last_text
    assert explorer.output in explorer.widget.children  # shown under the controls
    assert "ZeroDivisionError" in explorer.output.outputs[0]["text"]


# -- S4 / O10: fontsize has an upper bound, checked before anything is drawn ---------------
@pytest.mark.parametrize("plot", ["plot_head", "plot_all_heads"])
@pytest.mark.parametrize("fontsize", [10**12, 1e6, 101])
def test_plots_refuse_a_huge_fontsize_by_name(plot, fontsize):
    import matplotlib.pyplot as plt

    from course_utils.interp import heatmaps

    weights = torch.full((4, 4), 0.25)
    args = (weights, list("abcd")) if plot == "plot_head" else ([weights.expand(1, 2, 4, 4)], list("abcd"))
    with pytest.raises(ValueError, match=f"fontsize must be .*got {fontsize!r}"):
        getattr(heatmaps, plot)(*args, fontsize=fontsize)
    plt.close("all")


# -- S5: direct_logit_attribution's directions must hold floats --------------------------
def _model_and_tokens():
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    torch.manual_seed(0)
    config = ModelConfig(vocab_size=20, max_len=16, d_model=16, num_heads=2, num_layers=2)
    model = TinyTransformer(config).eval()
    tokens = torch.randint(0, 20, (2, 8), generator=torch.Generator().manual_seed(1))
    return model, tokens


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex64])
def test_direct_logit_attribution_refuses_non_float_directions(dtype):
    from course_utils.interp.patching import direct_logit_attribution

    model, tokens = _model_and_tokens()
    directions = torch.ones(2, 20, dtype=dtype)
    wanted = rf"directions must be a float tensor.*got a {dtype} tensor of shape \(2, 20\)"
    with pytest.raises(TypeError, match=wanted):
        direct_logit_attribution(model, tokens, torch.tensor([7, 7]), directions)


# -- O9: a bad list of heads names the argument or entry it came from --------------------
def _evaluation():
    from course_utils.interp.ablation import Evaluation

    _, tokens = _model_and_tokens()
    return Evaluation(tokens, lambda logits: {"mean": float(logits.mean())})


def _heads_call(where: str, bad: object):
    from course_utils.interp import ablation, patching

    model, tokens = _model_and_tokens()
    calls = {
        "cases['zz_bogus']": lambda: ablation.ablation_table(model, _evaluation(),
                                                             {"none": [], "zz_bogus": bad}),
        "order": lambda: ablation.pruning_curve(model, _evaluation(), bad),
        "head_sets[1]": lambda: patching.measure_zeroed_sets(model, _evaluation(), [[], bad]),
        "orders[0]": lambda: patching.losses_along_orders(model, tokens, tokens, [bad], 0),
        "receivers": lambda: patching.path_patched_logits(model, tokens, None, [(0, 0)], bad),
    }
    return calls[where]


@pytest.mark.parametrize("where", ["cases['zz_bogus']", "order", "head_sets[1]", "orders[0]", "receivers"])
@pytest.mark.parametrize("bad, error, arrived", [(1, TypeError, "got int 1"),
                                                 ([(0, 1.5)], TypeError, "got (0, 1.5)"),
                                                 ([(5, 0)], ValueError, "head (5, 0)")])
def test_a_bad_list_of_heads_names_where_it_came_from(where, bad, error, arrived):
    with pytest.raises(error) as raised:
        _heads_call(where, bad)()
    assert where in str(raised.value) and arrived in str(raised.value)


# -- O1: patching/scores messages also say what arrived -----------------------------------
def _arrived_call(target: str, bad: object):
    from course_utils.interp import patching, scores

    model, tokens = _model_and_tokens()
    lengths = torch.tensor([8, 6])

    def gen() -> torch.Generator:
        return torch.Generator().manual_seed(0)

    calls = {
        "resampled_outputs reference_lengths": lambda: patching.resampled_outputs(
            model, lengths, tokens, bad, 8, generator=gen()),
        "resampled_outputs reference_outputs": lambda: patching.resampled_outputs(
            model, lengths, tokens, lengths, 8, generator=gen(), reference_outputs=bad),
        "resampled_logits reference_lengths": lambda: patching.resampled_logits(
            model, tokens, lengths, tokens, bad, [(0, 0)], generator=gen()),
        "resampled_logits reference_outputs": lambda: patching.resampled_logits(
            model, tokens, lengths, tokens, lengths, [(0, 0)], generator=gen(), reference_outputs=bad),
        "losses_along_orders targets": lambda: patching.losses_along_orders(
            model, tokens, bad, [[(0, 0)]], 1),
        "sequence_gate_gradients targets": lambda: patching.sequence_gate_gradients(model, tokens, bad),
        "final_scale positions": lambda: patching.final_scale(model, tokens, bad),
        "head_score_table scores": lambda: scores.head_score_table(bad),
        "role_verdicts scores": lambda: scores.role_verdicts(bad),
    }
    return calls[target]


_TENSOR_ARGS = ["resampled_outputs reference_lengths", "resampled_logits reference_lengths",
                "resampled_outputs reference_outputs", "resampled_logits reference_outputs",
                "losses_along_orders targets", "sequence_gate_gradients targets", "final_scale positions"]


_BAD_TENSORS = [
    (None, "got NoneType"), ([8, 6], "got list"), ("abc", "got str"),
    (torch.zeros(1, 2, dtype=torch.long), "got a torch.int64 tensor of shape (1, 2)"),
    (torch.zeros(0, dtype=torch.float32), "got a torch.float32 tensor of shape (0)"),
]


# reference_outputs=None is the default (the outputs are computed), so it is left out there
@pytest.mark.parametrize("target, bad, arrived", [
    (target, bad, arrived) for target in _TENSOR_ARGS for bad, arrived in _BAD_TENSORS
    if not (bad is None and target.endswith("reference_outputs"))])
def test_patching_messages_say_what_arrived(target, bad, arrived):
    with pytest.raises((TypeError, ValueError)) as raised:
        _arrived_call(target, bad)()
    message = str(raised.value)
    assert f"{target.split()[1]} must be" in message and arrived in message


@pytest.mark.parametrize("target", ["head_score_table scores", "role_verdicts scores"])
@pytest.mark.parametrize("bad", [None, [], {}, True])
def test_score_tables_say_what_arrived(target, bad):
    with pytest.raises(ValueError) as raised:
        _arrived_call(target, bad)()
    assert "scores must be a non-empty dict" in str(raised.value)
    assert f"got {type(bad).__name__} {bad!r}" in str(raised.value)


# battery 18: an error whose str() itself raises escaped refresh (explorers never raise)
class _Unprintable(Exception):
    def __str__(self) -> str:
        raise ValueError("no str")


@pytest.mark.parametrize("broken", ["render", "draw"])
def test_an_error_whose_message_cannot_be_shown_is_still_a_message(broken):
    from course_utils.interp import widgets

    def fail(*args, **kwargs):
        raise _Unprintable()

    explorer = widgets.Explorer(fail if broken == "render" else (lambda x: x),
                                controls={"x": __import__("ipywidgets").IntSlider(value=1)},
                                **({"draw": fail} if broken == "draw" else {}))
    explorer.refresh()
    assert "_Unprintable (its message could not be shown)" in explorer.last_text

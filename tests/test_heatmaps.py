"""Heatmaps draw what they are given, with token labels; the explorer never throws at a learner."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course_utils.interp.heatmaps import (  # noqa: E402
    CONTROLS_NOTE,
    AttentionExplorer,
    plot_all_heads,
    plot_head,
)
from course_utils.interp.scores import ideal_pattern  # noqa: E402
from course_utils.interp.widgets import Explorer  # noqa: E402

TOKENS = ["<bos>", "a", "b", "c", "a", "b", "c"]


def layers(num_layers: int = 2, num_heads: int = 3, batch: int = 2) -> list[torch.Tensor]:
    roles = ["previous token", "first token", "induction", "uniform", "self"]
    out = []
    for layer in range(num_layers):
        heads = [ideal_pattern(roles[(layer + h) % len(roles)], 7, period=3, start=1)
                 for h in range(num_heads)]
        out.append(torch.stack(heads).unsqueeze(0).expand(batch, -1, -1, -1))  # (B, h, T, T)
    return out


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_plot_head_labels_and_values():
    weights = ideal_pattern("previous token", 7)
    ax = plot_head(weights, TOKENS, title="prev")
    assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS
    assert [t.get_text() for t in ax.get_yticklabels()] == TOKENS
    assert ax.get_title() == "prev"
    assert ax.get_xlabel().startswith("key") and ax.get_ylabel().startswith("query")
    drawn = np.ma.filled(ax.collections[0].get_array(), np.nan).reshape(7, 7)
    lower = np.tril(np.ones((7, 7), dtype=bool))
    assert np.allclose(drawn[lower], weights.numpy()[lower])  # the values drawn are the weights
    assert np.isnan(drawn[~lower]).all()  # the causal upper triangle is blank, not zero


def test_plot_head_non_causal_draws_every_cell():
    weights = torch.full((3, 4), 0.25)
    ax = plot_head(weights, ["x", "y", "z"], key_tokens=["k1", "k2", "k3", "k4"])
    drawn = np.ma.filled(ax.collections[0].get_array(), np.nan)
    assert drawn.size == 12 and not np.isnan(drawn).any()


def test_plot_all_heads_grid():
    fig = plot_all_heads(layers(2, 3), TOKENS, title="all heads", head_titles=lambda lay, h: f" [{lay}{h}]")
    heat_axes = [ax for ax in fig.axes if ax.get_title()]
    assert len(heat_axes) == 6
    assert heat_axes[5].get_title() == "layer 1, head 2 [12]"
    assert fig._suptitle.get_text() == "all heads"
    bottom_left = heat_axes[3]  # labels only on the outer panels
    assert [t.get_text() for t in bottom_left.get_xticklabels()] == TOKENS
    assert [t.get_text() for t in heat_axes[1].get_yticklabels()] == []


def test_plot_all_heads_accepts_single_sequence_layers():
    fig = plot_all_heads([w[0] for w in layers(1, 2)], TOKENS)  # (h, T, T) per layer
    assert len([ax for ax in fig.axes if ax.get_title()]) == 2


@pytest.mark.parametrize("call,error,words", [
    (lambda: plot_head(torch.ones(7), TOKENS), ValueError, "2-D"),
    (lambda: plot_head([[1.0]], ["a"]), TypeError, "torch.Tensor or numpy"),
    (lambda: plot_head(torch.eye(7), TOKENS[:5]), ValueError, "5 token labels for 7"),
    (lambda: plot_head(torch.eye(7), "abcdefg"), TypeError, "list of strings"),
    (lambda: plot_all_heads(layers(), TOKENS, batch_index=5), ValueError, "batch_index 5"),
    (lambda: plot_all_heads("nope", TOKENS), TypeError, "non-empty list"),
    (lambda: plot_all_heads([torch.ones(2, 7)], TOKENS), ValueError, "(B, h, T, T) or (h, T, T)"),
    (lambda: plot_all_heads([torch.ones(1, 2, 7, 7), torch.ones(1, 3, 7, 7)], TOKENS),
     ValueError, "same shape"),
    (lambda: plot_all_heads(layers(), TOKENS[:3]), ValueError, "3 token labels"),
])
def test_bad_input(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)


VOCAB = {"the", "cat", "cats", "is", "are", "sat"}


def fake_attention_for(text: str):
    words = text.split()
    unknown = [w for w in words if w not in VOCAB]
    if unknown:
        raise ValueError(f"unknown word(s) {unknown}")
    tokens = ["<bos>", *words]
    seq_len = len(tokens)
    return tokens, [torch.stack([ideal_pattern(r, seq_len) for r in ("previous token", "first token")])
                    .unsqueeze(0) for _ in range(2)]


def make_explorer() -> AttentionExplorer:
    return AttentionExplorer(fake_attention_for, ["the cat sat", "the cats are"], num_layers=2, num_heads=2)


def test_explorer_renders_a_head():
    fig = make_explorer().render("the cat sat", 1, 0)
    ax = fig.axes[0]
    assert ax.get_title() == "layer 1, head 0"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["<bos>", "the", "cat", "sat"]


@pytest.mark.parametrize("text,layer,head,words", [
    ("the dog sat", 0, 0, "unknown word(s) ['dog']"),
    ("   ", 0, 0, "Type a sentence"),
    ("the cat", 2, 0, "layer in 0..1"),
    ("the cat", 0, -1, "head in 0..1"),
])
def test_explorer_bad_choices_become_messages(text, layer, head, words):
    result = make_explorer().render(text, layer, head)
    assert isinstance(result, str) and words in result


@pytest.mark.parametrize("layer,head", [("1", 0), (1.0, 0), (True, 0), (0, "1"), (None, 0), (0, [1])])
def test_explorer_odd_layer_and_head_types_become_messages(layer, head):
    result = make_explorer().render("the cat sat", layer, head)
    assert isinstance(result, str) and "must be a whole number from 0 to 1" in result


def test_explorer_accepts_numpy_ints():
    fig = make_explorer().render("the cat sat", np.int64(1), np.int32(0))
    assert fig.axes[0].get_title() == "layer 1, head 0"


def test_explorer_odd_sentence_becomes_a_message():
    assert "must be a str" in make_explorer().render(42, 0, 0)


@pytest.mark.parametrize("method", ["widget", "show", "explorer"])
@pytest.mark.parametrize("layer,head,start",
                         [(5, 0, (1, 0)), (-1, 3, (0, 1)), ("1", 1, (0, 1)), (True, 1.0, (0, 0))])
def test_explorer_controls_start_from_a_valid_choice(method, layer, head, start, capsys):
    pytest.importorskip("ipywidgets")
    explorer = make_explorer()
    getattr(explorer, method)("the cat sat", layer=layer, head=head)  # must not raise
    printed = capsys.readouterr().out
    assert f"Starting from layer {start[0]}, head {start[1]} instead." in printed
    assert (explorer.controls["layer"].value, explorer.controls["head"].value) == start
    assert explorer.last.axes[0].get_title() == f"layer {start[0]}, head {start[1]}"  # drawn at once


@pytest.mark.parametrize("method", ["widget", "show"])
def test_explorer_draws_the_starting_choice_then_redraws(method):
    pytest.importorskip("ipywidgets")
    explorer = make_explorer()
    getattr(explorer, method)("the cats are", layer=1, head=1)
    assert explorer.last.axes[0].get_title() == "layer 1, head 1"  # the output shows the start at once
    explorer.controls["layer"].value = 0
    assert explorer.last.axes[0].get_title() == "layer 0, head 1"
    explorer.controls["sentence"].value = "the dog"
    assert isinstance(explorer.last, str) and "dog" in explorer.last


def test_explorer_widget_redraws_on_change():
    pytest.importorskip("ipywidgets")
    explorer = make_explorer()
    box = explorer.widget()
    assert box.children  # a VBox with the controls
    explorer.controls["head"].value = 1
    assert explorer.last.axes[0].get_title() == "layer 0, head 1"
    explorer.controls["sentence"].value = "the cat barked"
    assert isinstance(explorer.last, str) and "barked" in explorer.last
    explorer.controls["sentence"].value = "the cats are"
    assert explorer.last.axes[0].get_title() == "layer 0, head 1"


def test_attention_explorer_runs_on_the_shared_explorer():
    explorer = make_explorer()
    live = explorer.explorer("the cat sat", 1, 0)
    assert isinstance(live, Explorer)
    assert live.values() == {"sentence": "the cat sat", "layer": 1, "head": 0}
    live.controls["head"].value = 1
    assert explorer.last.axes[0].get_title() == "layer 1, head 1"
    assert live._repr_mimebundle_()["text/plain"] == CONTROLS_NOTE

def test_explorer_static_prints_message(capsys):
    result = make_explorer().static("the dog", 0, 0)
    assert isinstance(result, str)
    assert "dog" in capsys.readouterr().out


def test_explorer_rejects_bad_construction():
    with pytest.raises(TypeError, match="attention_for"):
        AttentionExplorer("not a function", ["a"], 1, 1)
    with pytest.raises(ValueError, match="non-empty list"):
        AttentionExplorer(fake_attention_for, [], 1, 1)
    with pytest.raises(ValueError, match="num_heads"):
        AttentionExplorer(fake_attention_for, ["a"], 1, 0)


def test_model_adapters_on_a_tiny_untrained_model():
    from course_utils.interp.heatmaps import model_attention, sentence_attention_fn
    from course_utils.model.transformer import ModelConfig, TinyTransformer
    from course_utils.tasks.synthetic import AGREEMENT_VOCAB

    torch.manual_seed(0)
    model = TinyTransformer(ModelConfig(vocab_size=len(AGREEMENT_VOCAB), max_len=8, d_model=16,
                                        num_heads=2, num_layers=3))
    attention = model_attention(model, torch.tensor([1, 2, 3]))
    assert len(attention) == 3 and attention[0].shape == (1, 2, 3, 3)
    labels, weights = sentence_attention_fn(model)("The keys on the table are.")
    assert labels == ["<bos>", "the", "keys", "on", "the", "table", "are"]
    assert weights[2].shape == (1, 2, 7, 7)
    explorer = AttentionExplorer(sentence_attention_fn(model), ["the keys are"], 3, 2)
    assert "unknown word" in explorer.render("the cat sat on the mat", 0, 0)
    typo = explorer.render("the keys on the tabel are", 0, 0)
    assert "Did you mean 'table'?" in typo and "the grammar knows only" not in typo
    assert "at most 8" in explorer.render("the old keys on the old table near the door are", 0, 0)
    with pytest.raises(TypeError, match="token ids"):
        model_attention(model, [1, 2, 3])

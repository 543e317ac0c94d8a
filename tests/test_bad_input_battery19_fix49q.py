"""Battery 19 (issue 38), helper Q (course_utils/interp/*): explorers that never raise even at a
value whose str()/repr() raises, prunable_counts' ``known`` checked against the model and the
metrics, resampled_outputs' reference_lengths within the reference, mean_by_group's hashable labels."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from course_utils.interp.ablation import Evaluation, average_loss  # noqa: E402
from course_utils.interp.heatmaps import AttentionExplorer  # noqa: E402
from course_utils.interp.patching import prunable_counts, resampled_logits, resampled_outputs  # noqa: E402
from course_utils.interp.scores import mean_by_group  # noqa: E402
from course_utils.interp.widgets import dimension_explorer, show  # noqa: E402
from course_utils.model.transformer import ModelConfig, TinyTransformer  # noqa: E402

# ----------------------------------------------------------------------------- g14: never raise

class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")


class _NoRepr:
    def __repr__(self) -> str:
        raise ZeroDivisionError("no repr")


def _attention_for(text: str) -> tuple[list[str], list[torch.Tensor]]:
    if text.startswith("b"):
        raise _Unprintable()
    if text.startswith("c"):
        return _NoRepr()  # type: ignore[return-value]
    T = len(text.split())
    w = torch.full((2, T, T), 1.0 / T)
    return text.split(), [w, w]


EXPLORER = AttentionExplorer(_attention_for, ["a b c", "a b"], 2, 2)


@pytest.mark.parametrize("text, layer, head, named", [
    ("b c a b", 0, 0, "_Unprintable"),  # an attention_for error whose str() raises
    ("c a", 0, 0, "_NoRepr"),  # an attention_for result whose repr raises
    ("a b", _NoRepr(), 0, "layer"),  # a layer whose repr raises
    ("a b", 0, _NoRepr(), "head"),
])
def test_attention_explorer_static_answers_unprintable_values(text, layer, head, named, capsys):
    result = EXPLORER.static(text, layer, head)
    assert isinstance(result, str) and named in result
    assert named in capsys.readouterr().out


@pytest.mark.parametrize("name", ["batch", "seq_len", "d_model", "num_heads"])
def test_dimension_explorer_answers_a_value_whose_repr_raises(name, capsys):
    explorer = dimension_explorer(**{name: _NoRepr()})
    assert name in explorer.last_text and "_NoRepr" in explorer.last_text
    assert name in capsys.readouterr().out


def test_dimension_explorer_answers_an_unknown_keyword_whose_repr_raises(capsys):
    explorer = dimension_explorer(typo=_NoRepr())
    assert "typo" in explorer.last_text and "_NoRepr" in explorer.last_text


@pytest.mark.parametrize("kwargs, named", [
    ({"explorer": _NoRepr()}, "explorer must be an Explorer"),
    ({"fallback": _NoRepr()}, "fallback must be a str"),
])
def test_show_answers_a_value_whose_repr_raises(kwargs, named, capsys):
    explorer = kwargs.pop("explorer", None) or dimension_explorer()
    show(explorer, **kwargs)
    out = capsys.readouterr().out
    assert named in out and "_NoRepr" in out


# ----------------------------------------------------------------------------- g17: prunable_counts' known

V = 16


def _model() -> TinyTransformer:
    torch.manual_seed(0)
    return TinyTransformer(ModelConfig(vocab_size=V, max_len=8, d_model=16, num_heads=2, num_layers=2)).eval()


MODEL = _model()
TOKENS = torch.randint(0, V, (3, 6), generator=torch.Generator().manual_seed(1))
LOSS = Evaluation(TOKENS, lambda logits: {"loss": average_loss(logits, TOKENS)})
ORDERS = [[(0, 0), (0, 1), (1, 0), (1, 1)]]


@pytest.mark.parametrize("known, error, named", [
    ({frozenset({(9, 9)}): {"loss": 1.0}}, ValueError, "(9, 9)"),  # a head the model lacks
    ({frozenset({(0, 2)}): {"loss": 1.0}}, ValueError, "(0, 2)"),
    ({frozenset({7}): {"loss": 1.0}}, TypeError, "7"),  # not a (layer, head) pair
    ({frozenset(): {}}, ValueError, "loss"),  # a measurement without the evaluations' number
    ({frozenset({(0, 0)}): {"acc": 1.0}}, ValueError, "acc"),  # another evaluation's number
    ({frozenset({(0, 0)}): {"loss": 1.0, "acc": 1.0}}, ValueError, "acc"),
    ({frozenset({(0, 0)}): {"loss": 1.0}, frozenset({(0, 1)}): {"acc": 1.0}}, ValueError, "acc"),
])
@pytest.mark.parametrize("incremental", [False, True])
def test_prunable_counts_refuses_known_it_cannot_use(known, error, named, incremental):
    with pytest.raises(error, match="known") as caught:
        prunable_counts(MODEL, LOSS, ORDERS, lambda n: n["loss"] < 10, known=known, incremental=incremental)
    assert named in str(caught.value)


def test_prunable_counts_refuses_known_whose_names_disagree_when_nothing_is_measured():
    known = {frozenset(ORDERS[0][:k]): {"loss": 1.0} for k in range(1, 5)}
    known[frozenset(ORDERS[0][:2])] = {"acc": 1.0}
    with pytest.raises(ValueError, match=r"known\[.*acc"):
        prunable_counts(MODEL, LOSS, ORDERS, lambda n: n["loss"] < 10, known=known)


def test_prunable_counts_still_reuses_its_own_measurements():
    counts, measured = prunable_counts(MODEL, LOSS, ORDERS, lambda n: n["loss"] < 10)
    again = prunable_counts(MODEL, LOSS, ORDERS, lambda n: n["loss"] < 10, known=measured)
    assert again == (counts, measured)
    part = {frozenset(ORDERS[0][:1]): measured[frozenset(ORDERS[0][:1])]}
    assert prunable_counts(MODEL, LOSS, ORDERS, lambda n: n["loss"] < 10, known=part)[0] == counts


# ------------------------------------------------------------------------ g15: lengths within their batch

REFERENCE = torch.randint(0, V, (4, 6), generator=torch.Generator().manual_seed(2))


@pytest.mark.parametrize("target", ["resampled_outputs", "resampled_logits"])
@pytest.mark.parametrize("name, lengths, reference_lengths, shown", [
    ("reference_lengths", [6, 6, 6], [9, 6, 6, 6], "max 9"),  # longer than the reference's 6 positions
    ("reference_lengths", [6, 6, 6], [6, 6, 6, 7], "max 7"),
    ("reference_lengths", [6, 6, 6], [6, -1, 6, 6], "min -1"),
    ("lengths", [6, 8, 6], [6, 6, 8, 6], "max 8"),  # longer than the sequences' 6 positions
])
def test_resampling_refuses_lengths_beyond_their_batch(target, name, lengths, reference_lengths, shown):
    lengths, reference_lengths = torch.tensor(lengths), torch.tensor(reference_lengths)
    generator = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match=name) as caught:
        if target == "resampled_outputs":
            resampled_outputs(MODEL, lengths, REFERENCE, reference_lengths, 6, generator=generator)
        else:
            resampled_logits(MODEL, TOKENS, lengths, REFERENCE, reference_lengths, [(0, 0)],
                             generator=generator)
    assert str(caught.value).startswith(name) and shown in str(caught.value)


# ------------------------------------------------------------------------ g11: mean_by_group's labels

@pytest.mark.parametrize("labels, shown", [
    ([["a"], "b"], "groups['g'][0]"),  # a list
    (["a", {"b"}], "groups['g'][1]"),  # a set
    (["a", ("b", ["c"])], "groups['g'][1]"),  # a tuple holding a list
    ([{"a": 1}, "b"], "groups['g'][0]"),  # a dict
])
def test_mean_by_group_refuses_unhashable_labels_by_position(labels, shown):
    with pytest.raises(TypeError, match="hashable") as caught:
        mean_by_group({"v": [1.0, 2.0]}, {"g": labels})
    assert str(caught.value).startswith(shown)


def test_mean_by_group_refuses_labels_it_cannot_sort():
    with pytest.raises(TypeError, match=r"groups \['g'\] must be sortable"):
        mean_by_group({"v": [1.0, 2.0]}, {"g": [int, str]})


def test_mean_by_group_still_groups_tuples_and_mixed_labels():
    table = mean_by_group({"v": [1.0, 2.0, 3.0]}, {"g": [(1, "a"), (1, "a"), (2, "b")]})
    assert table["sentences"].tolist() == [2, 1]
    assert mean_by_group({"v": [1.0, 2.0]}, {"g": [1, "a"]})["sentences"].tolist() == [1, 1]

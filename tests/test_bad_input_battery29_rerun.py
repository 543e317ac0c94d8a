"""Battery 29's rerun, its obscure cases: a list whose ``len()`` raises, a label whose ``str()``
raises and a value whose ``repr()`` raises each get a message naming the argument, what was
expected and what arrived (not their own error, nor a wrong reason)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from course_utils.attention import validation as v


class LyingLen(list):
    def __len__(self) -> int:
        raise RuntimeError("len lies")


class LyingStr(str):
    def __str__(self) -> str:
        raise RuntimeError("str raises")

    def __repr__(self) -> str:
        raise RuntimeError("repr raises")


class BadIndex:
    def __index__(self) -> int:
        raise RuntimeError("index raises")

    def __int__(self) -> int:
        raise RuntimeError("int raises")

    def __repr__(self) -> str:
        raise RuntimeError("repr raises")


@dataclasses.dataclass
class _Record:
    a: float


W = torch.zeros(4, 2)


# -- 1. a list whose len() raises ----------------------------------------------------------------
@pytest.mark.parametrize("call, name", [
    (lambda: v.check_int_list(LyingLen([1, 2]), "sizes"), "sizes"),
    (lambda: v.check_distinct(LyingLen([1, 2]), "seeds"), "seeds"),
    (lambda: v.check_tensor_list(LyingLen([W]), "parts"), "parts"),
    (lambda: v.check_kv_pair(LyingLen([W, W]), "past", batch=1, num_kv_heads=1, d_k=2, weight=W), "past"),
    (lambda: v.check_record(_Record(1.0), nan_ok=LyingLen(["a"])), "nan_ok"),
    (lambda: v.check_record(_Record(1.0), fractions=LyingLen(["a"])), "fractions"),
])
def test_lying_len_is_named(call, name):
    with pytest.raises(TypeError, match=f"(?s){name}.*must be.*LyingLen.*len\\(\\) or iteration raised"):
        call()


def test_stack_head_weights_lying_len_names_the_parts():
    from course_utils.attention.naive_mha import stack_head_weights

    with pytest.raises(TypeError, match="k_parts must be a list of tensors, got LyingLen"):
        stack_head_weights([W], LyingLen([W]), [W])


def test_items_of_keeps_a_plain_list():
    assert v.items_of((1, 2), "xs", "a list") == [1, 2]


@dataclasses.dataclass(frozen=True)
class _Config:
    title: str = "t"
    width: int = 2


def test_check_config_fields_lying_len_names_texts():
    with pytest.raises(TypeError, match="texts must be a tuple of field names, got LyingLen"):
        v.check_config_fields(_Config(), LyingLen(["title"]), {"width": 1})


def test_check_dims_not_empty_lying_len_names_dims():
    with pytest.raises(TypeError, match="check_dims_not_empty's dims must be .*LyingLen"):
        v.check_dims_not_empty(torch.zeros(1, 1, 2), "x", LyingLen(["B", "T"]))


# -- 2. a label whose str() raises, a value whose repr() raises ----------------------------------
LABEL = LyingStr("x")
X = torch.zeros(1, 2, 4)


@pytest.mark.parametrize("call, label", [
    (lambda: v.check_ids(torch.tensor([5]), "ids", 3, LABEL), "check_ids's what"),
    (lambda: v.check_index(7, "i", 3, LABEL), "check_index's what"),
    (lambda: v.check_rows([7], "rows", 3, LABEL), "check_rows's what"),
    (lambda: v.check_kv_pair(None, "past", batch=1, num_kv_heads=1, d_k=2, weight=W, length=LABEL),
     "check_kv_pair's length"),
    (lambda: v.check_linear_layer(None, "proj", 2, 4, why=LABEL), "check_linear_layer's why"),
])
def test_label_not_a_real_str_is_refused(call, label):
    with pytest.raises(TypeError, match=f"{label} must be a str .*got LyingStr"):
        call()


@pytest.mark.parametrize("call", [
    lambda: v.check_mha_tensors(X, X, X, d_model=BadIndex(), weight=W),
    lambda: v.check_stream(X, "query", d_model=BadIndex(), weight=W),
])
def test_d_model_whose_repr_raises_is_named(call):
    with pytest.raises(TypeError, match="d_model .*must be an int, got BadIndex"):
        call()


def test_labels_still_pass_as_str():
    assert v.check_index(1, "i", 3, "layers") == 1
    assert v.check_distinct([1, 2], "seeds", what="seeds") == [1, 2]


# -- 3. one-offs -----------------------------------------------------------------------------------
def test_check_config_fields_nested_texts_named():
    with pytest.raises(TypeError, match="texts and the keys of counts must be field names"):
        v.check_config_fields(_Config(), [["title"]], {"width": 1})


@pytest.mark.parametrize("device", ["", "no such device"])
def test_check_mask_fits_bad_device_named(device):
    mask = torch.ones(4, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match="check_mask_fits's device .*must be a torch.device"):
        v.check_mask_fits(mask, (2, 2, 4, 4), "(B, h, Tq, Tk)", device=device)


@pytest.mark.parametrize("args, name", [
    (("README.md", LyingStr(".")), "root"),
    ((LyingStr("README.md"), "."), "path"),
])
def test_place_in_path_whose_str_raises_named_not_a_loop(args, name):
    from course_utils.cli import place_in

    with pytest.raises(TypeError, match=f"{name} must be a str or Path .*whose str\\(\\) raised"):
        place_in(*args)


def test_path_kind_path_whose_str_raises_named():
    from course_utils.cli import path_kind

    with pytest.raises(TypeError, match="path must be a str or Path .*whose str\\(\\) raised"):
        path_kind(LyingStr("README.md"))


def test_plot_block_label_whose_str_raises_named():
    from course_utils.exercises.your_attention import plot_block

    with pytest.raises(TypeError, match="attention_label must be a str, got LyingStr"):
        plot_block(attention_label=LyingStr("attention"))


# -- 4. autograde and raising show values through shown ---------------------------------------------
class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr raises")


def test_exercise_of_lesson_whose_repr_raises_named():
    from course_utils.exercises.autograde import exercise_of

    with pytest.raises(ValueError, match="lesson must be 'lessonNN'.*whose repr raised"):
        exercise_of(LyingStr("nope"), "check_x")


def test_requested_shape_args_whose_repr_raises_named():
    from course_utils.exercises.raising import requested_shape

    with pytest.raises(TypeError, match="whose repr raised"):
        requested_shape(BadRepr())

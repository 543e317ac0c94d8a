"""Battery 18 (issue 38), fix pass P: frozen shape traces (g06, g07's ShapeTrace cases), read-only
mappings in check_record, nn.MultiheadAttention's mask ranks (g28) and MultiHeadAttention.to_torch
after its projections were replaced (g29)."""

from __future__ import annotations

import copy as copy_module
import dataclasses
import pickle

import pytest
import torch
from torch import nn

from course_utils.attention import masks as M
from course_utils.attention.gqa import GroupedQueryAttention
from course_utils.attention.mha import MultiHeadAttention
from course_utils.attention.naive_mha import naive_from_batched
from course_utils.attention.shapes import ShapeTrace, TraceStep, trace_shapes
from course_utils.attention.validation import ReadOnlyDict, check_record, freeze_fields


def _trace() -> ShapeTrace:
    return trace_shapes(MultiHeadAttention(16, 2), torch.randn(2, 5, 16))


# -- g06 / g07: a ShapeTrace checked once stays valid --------------------------------------
MUTATIONS = [
    pytest.param(lambda t: t.steps.append("junk"), id="steps.append"),
    pytest.param(lambda t: setattr(t, "steps", None), id="steps=None"),
    pytest.param(lambda t: t.sizes.__setitem__("B", -1), id="sizes[B]=-1"),
    pytest.param(lambda t: t.tensors.__setitem__("input", torch.zeros(1)), id="tensors[input]"),
    pytest.param(lambda t: setattr(t, "max_abs_diff", -5.0), id="max_abs_diff=-5"),
]


@pytest.mark.parametrize("mutate", MUTATIONS)
def test_shape_trace_cannot_be_changed_after_its_check(mutate):
    trace = _trace()
    before = trace.format()
    with pytest.raises((TypeError, AttributeError)):
        mutate(trace)
    assert trace.format() == before and list(trace.to_frame()["step"]) == trace.names


def test_shape_trace_keeps_copies_of_what_it_was_given():
    trace = _trace()
    steps, sizes, tensors = list(trace.steps), dict(trace.sizes), dict(trace.tensors)
    copy = ShapeTrace(sizes, steps, tensors, trace.max_abs_diff)
    steps.append("junk")
    sizes["B"] = -1
    tensors.clear()
    assert isinstance(copy.steps, tuple) and isinstance(copy.sizes, ReadOnlyDict)
    assert copy.format() == trace.format() and set(copy.tensors) == set(trace.tensors)


def _step(name: str = "input", shape: tuple[int, ...] = (2, 5, 16)) -> TraceStep:
    return TraceStep(name, "x", ("B", "T", "d"), shape, 0, True)


SIZES = {"B": 2, "T": 5, "d": 16}
INCONSISTENT = [
    pytest.param(lambda: ShapeTrace(SIZES, [_step(shape=(3, 5, 16))]), ["ShapeTrace.steps[0]", "(3, 5, 16)",
                                                                        "(2, 5, 16)"], id="step shape"),
    pytest.param(lambda: ShapeTrace({"B": 2, "T": 5}, [_step()]), ["ShapeTrace.steps[0]", "'d'"],
                 id="unknown symbol"),
    pytest.param(lambda: ShapeTrace(SIZES, [_step(), _step()]), ["ShapeTrace.steps[1]", "'input'"],
                 id="repeated name"),
    pytest.param(lambda: ShapeTrace(SIZES, [_step()], {"input": torch.zeros(2, 5)}),
                 ["ShapeTrace.tensors['input']", "(2, 5)"], id="tensor shape"),
    pytest.param(lambda: ShapeTrace(SIZES, [_step()], {"other": torch.zeros(2, 5, 16)}),
                 ["ShapeTrace.tensors['other']", "no step"], id="tensor of no step"),
]


@pytest.mark.parametrize(("build", "words"), INCONSISTENT)
def test_shape_trace_fields_must_agree(build, words):
    with pytest.raises(ValueError) as err:
        build()
    for word in words:
        assert word in str(err.value)


# -- freeze_fields: read-only copies that check_record checks as dicts -----------------------
@dataclasses.dataclass(frozen=True)
class _Counts:
    counts: dict[str, int]
    order: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        freeze_fields(self)
        check_record(self)


@pytest.mark.parametrize(("counts", "error", "words"), [
    pytest.param(3, TypeError, ["_Counts.counts", "int 3"], id="int"),
    pytest.param({"a": -1}, ValueError, ["_Counts.counts['a']", "-1"], id="negative value"),
    pytest.param({1: 1}, TypeError, ["_Counts.counts key 1", "str"], id="int key"),
])
def test_check_record_checks_frozen_dict_fields(counts, error, words):
    with pytest.raises(error) as err:
        _Counts(counts)
    for word in words:
        assert word in str(err.value)


def test_freeze_fields_stores_read_only_copies():
    given = {"a": 1}
    record = _Counts(given, ["x"])
    given["a"] = -5
    assert record.counts == {"a": 1} and record.order == ("x",)
    assert isinstance(record.counts, ReadOnlyDict)
    with pytest.raises(TypeError, match=r"_Counts.counts is read-only"):
        record.counts["a"] = 2
    assert _Counts(record.counts).counts == {"a": 1}  # a read-only dict is copied, read-only again


def test_freeze_fields_refuses_what_is_no_record():
    with pytest.raises(TypeError, match=r"freeze_fields freezes a record.*got dict"):
        freeze_fields({"a": 1})


# -- g28: the mask converters take the ranks nn.MultiheadAttention takes ---------------------
def _bool(*shape: int) -> torch.Tensor:
    return torch.ones(shape, dtype=torch.bool)


@pytest.mark.parametrize(("convert", "name", "shape"), [
    pytest.param(M.to_torch_attn_mask, "mask", (), id="attn 0-D"),
    pytest.param(M.to_torch_attn_mask, "mask", (4,), id="attn 1-D"),
    pytest.param(M.to_torch_attn_mask, "mask", (2, 2, 4, 4), id="attn 4-D"),
    pytest.param(M.to_torch_attn_mask, "mask", (2, 2, 2, 2, 2), id="attn 5-D"),
    pytest.param(M.to_torch_key_padding_mask, "key_padding_mask", (4,), id="padding 1-D"),
    pytest.param(M.to_torch_key_padding_mask, "key_padding_mask", (2, 1, 4), id="padding 3-D"),
    pytest.param(M.to_torch_key_padding_mask, "key_padding_mask", (2, 1, 1, 4), id="padding 4-D"),
])
def test_torch_mask_converters_refuse_other_ranks(convert, name, shape):
    with pytest.raises(ValueError) as err:
        convert(_bool(*shape))
    message = str(err.value)
    assert message.startswith(f"{name} must be 2-D") and f"{len(shape)}-D shape {shape}" in message


def test_torch_attn_mask_takes_a_per_head_mask():
    theirs = nn.MultiheadAttention(8, 2, batch_first=True)
    allowed = M.causal_mask(5).expand(2 * 2, 5, 5)  # (B*h, Tq, Tk)
    x = torch.randn(2, 5, 8)
    out = theirs(x, x, x, attn_mask=M.to_torch_attn_mask(allowed))[0]
    ref = theirs(x, x, x, attn_mask=M.to_torch_attn_mask(M.causal_mask(5)))[0]
    torch.testing.assert_close(out, ref)


# -- g29: copying a MultiHeadAttention whose layers were changed after construction ----------
def _set(name: str, value: object):
    def change(module: MultiHeadAttention) -> None:
        owner, _, attr = name.rpartition(".")
        setattr(module.get_submodule(owner) if owner else module, attr, value)
    return change


CHANGES = [
    pytest.param(_set("in_proj", nn.Linear(16, 40)), ValueError,
                 ["MultiHeadAttention.in_proj.weight", "(40, 16)"], id="in_proj 40 wide"),
    pytest.param(_set("out_proj", nn.Linear(16, 8)), ValueError,
                 ["MultiHeadAttention.out_proj.weight", "(8, 16)"], id="out_proj 8 wide"),
    pytest.param(_set("in_proj", nn.Identity()), TypeError, ["MultiHeadAttention.in_proj", "Identity"],
                 id="in_proj not Linear"),
    pytest.param(_set("out_proj.bias", None), ValueError, ["MultiHeadAttention.out_proj", "bias=None"],
                 id="out_proj bias dropped"),
    pytest.param(_set("out_proj", nn.Linear(16, 16).double()), TypeError,
                 ["MultiHeadAttention.out_proj.weight", "torch.float64"], id="out_proj float64"),
    pytest.param(_set("num_heads", 3), ValueError, ["MultiHeadAttention.num_heads", "3"], id="num_heads 3"),
    pytest.param(_set("d_model", 8), ValueError, ["MultiHeadAttention.d_model", "d_model=8"], id="d_model 8"),
    pytest.param(_set("dropout", 2.0), ValueError, ["MultiHeadAttention.dropout", "2.0"], id="dropout 2"),
]
COPIES = [
    pytest.param(lambda m: m.to_torch(), id="to_torch"),
    pytest.param(lambda m: GroupedQueryAttention.from_multi_head(m, 2), id="from_multi_head"),
    pytest.param(lambda m: naive_from_batched(m), id="naive_from_batched"),
]


@pytest.mark.parametrize("copy", COPIES)
@pytest.mark.parametrize(("change", "error", "words"), CHANGES)
def test_copies_name_the_layer_changed_after_construction(change, error, words, copy):
    module = MultiHeadAttention(16, 2)
    change(module)
    with pytest.raises(error) as err:
        copy(module)
    for word in words:
        assert word in str(err.value)


@pytest.mark.parametrize("copy", COPIES)
def test_copies_of_an_unchanged_module_still_work(copy):
    assert copy(MultiHeadAttention(16, 2, bias=False).double()) is not None


@pytest.mark.parametrize("copy", [
    pytest.param(lambda t: pickle.loads(pickle.dumps(t)), id="pickle"),
    pytest.param(copy_module.deepcopy, id="deepcopy"),
])
def test_a_frozen_trace_pickles_and_deep_copies(copy):
    trace = _trace()
    again = copy(trace)
    assert all(isinstance(m, ReadOnlyDict) for m in (again.sizes, again.tensors))
    assert again.format() == trace.format() and again.sizes == trace.sizes
    assert all(torch.equal(again.tensors[name], trace.tensors[name]) for name in trace.tensors)

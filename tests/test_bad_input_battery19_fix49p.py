"""Battery 19 (issue 38), fix pass P: row selections mixing bools and ints (g26), check_record's
options checked on every call and against the kind of field they name (g27), hook points
that pass tensors only (g02), TraceStep keeping tuples (g28),
MultiHeadAttentionBase subclasses without their setup (g29)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from course_utils.attention.hooks import HookPoint
from course_utils.attention.mha import MultiHeadAttention, MultiHeadAttentionBase
from course_utils.attention.shapes import TraceStep
from course_utils.attention.validation import check_record, check_rows
from course_utils.tasks.synthetic import AgreementTask
from course_utils.tasks.two_relations import TwoKeyTask


# -- g26: a list mixing bools and ints is neither a mask nor indices -----------------------------
@pytest.mark.parametrize("rows", [[True, 0], (0, False), [1, 2, True, 3]], ids=["list", "tuple", "late bool"])
def test_check_rows_refuses_bools_mixed_with_ints(rows):
    with pytest.raises(TypeError) as info:
        check_rows(rows, "rows", 4)
    message = str(info.value)
    assert "rows[" in message and "mix" in message and "bool" in message


def _agreement_batch():
    return AgreementTask().sample(4, torch.Generator().manual_seed(0))


def _lookup_batch():
    return TwoKeyTask(num_items=4, num_keys=8, num_symbols=4, max_repeats=2).sample(6, seed=0)


@pytest.mark.parametrize("make, name, size", [(_agreement_batch, "rows", 4), (_lookup_batch, "index", 6)],
                         ids=["AgreementBatch", "LookupBatch"])
def test_batch_take_refuses_a_mixed_selection(make, name, size):
    batch = make()
    with pytest.raises(TypeError, match=rf"{name}\[1\] is int 0"):
        batch.take([True, 0])
    batch.take([1, 0])  # indices alone, and a full mask, still select
    batch.take([True, False] * (size // 2))


# -- g27: check_record's options, on every call ---------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Rec:
    name: str
    count: int
    share: float
    values: tuple[float, ...] = ()


BAD_OPTIONS = [
    pytest.param({"nan_ok": ("colour",)}, ValueError, "colour", id="nan_ok unknown field"),
    pytest.param({"signed": 3}, TypeError, "signed", id="signed not a tuple"),
    pytest.param({"positive": ("name",)}, ValueError, "'name'", id="positive a str field"),
    pytest.param({"fractions": ("name",)}, ValueError, "'name'", id="fractions a str field"),
    pytest.param({"fractions": ("count",)}, ValueError, "'count'", id="fractions an int field"),
    pytest.param({"signed": ("count",)}, ValueError, "'count'", id="signed an int field"),
    pytest.param({"nonempty": ("share",)}, ValueError, "'share'", id="nonempty a float field"),
]


@pytest.mark.parametrize("first_call", [False, True], ids=["first call", "after a first call"])
@pytest.mark.parametrize("options, error, named", BAD_OPTIONS)
def test_check_record_checks_its_options_every_call(options, error, named, first_call):
    record = _Rec("a", 1, 0.5)
    if first_call:
        check_record(record)  # a first call without options must not hide later ones
    with pytest.raises(error) as info:
        check_record(record, **options)
    assert named in str(info.value) and next(iter(options)) in str(info.value)


def test_check_record_applies_the_options_of_each_call():
    record = _Rec("a", 0, 2.0)
    check_record(record)  # count 0 and share 2.0 pass without options
    with pytest.raises(ValueError, match="_Rec.count"):
        check_record(record, positive=["count"])  # a list is a fine list of names
    with pytest.raises(ValueError, match="_Rec.share"):
        check_record(record, fractions=("share",))
    check_record(_Rec("a", 1, 0.5, (0.1,)), positive=("count", "share"), fractions=("share", "values"),
                 nonempty=("name", "values"), signed=("values",))


# -- g02: a hook point passes tensors only --------------------------------------------------------
@pytest.mark.parametrize("x", [[1.0], "text", 3.0, None], ids=["list", "str", "float", "None"])
def test_hook_point_refuses_a_non_tensor(x):
    point = HookPoint()
    point.name = "blocks.0.attn.hook_q"
    with pytest.raises(TypeError) as info:
        point(x)
    message = str(info.value)
    assert "x " in message and "blocks.0.attn.hook_q" in message and type(x).__name__ in message
    ids = torch.arange(3)  # any tensor still passes, unchanged
    assert point(ids) is ids


# -- g28: a TraceStep keeps its shape (and symbols) as tuples -------------------------------------
@pytest.mark.parametrize("symbolic, shape", [(["B", "T", "d"], [2, 5, 8]), (("B", "T", "d"), [2, 5, 8]),
                                             (["B", "T", "d"], (2, 5, 8))], ids=["both lists", "shape list",
                                                                                "symbolic list"])
def test_trace_step_keeps_tuples(symbolic, shape):
    step = TraceStep("q", "x @ W", symbolic, shape, 10, True)
    assert isinstance(step.shape, tuple) and isinstance(step.symbolic, tuple)
    assert step.shape == tuple(shape) and step.symbolic == tuple(symbolic)
    with pytest.raises(AttributeError):
        step.shape.append(3)  # checked once, it stays as checked
    with pytest.raises(TypeError, match="TraceStep.shape"):
        TraceStep("q", "x @ W", ("B",), "2", 10, True)  # a str is still refused, not split


# -- g29: a MultiHeadAttentionBase subclass without its setup --------------------------------------
class _NoSetup(MultiHeadAttentionBase):
    pass


class _NoHooks(MultiHeadAttentionBase):
    def __init__(self) -> None:
        super().__init__()
        self.d_model, self.num_heads, self.num_kv_heads, self.d_k, self.dropout = 8, 2, 2, 4, 0.0
        self.out_proj = torch.nn.Linear(8, 8)

    def project_qkv(self, query, key, value):
        return MultiHeadAttention(8, 2).project_qkv(query, key, value)


class _NoProjection(MultiHeadAttentionBase):
    def __init__(self) -> None:
        super().__init__()
        self.d_model, self.num_heads, self.num_kv_heads, self.d_k, self.dropout = 8, 2, 2, 4, 0.0
        self.out_proj = torch.nn.Linear(8, 8)
        self._add_hook_points()


ALL_SETUP = ["d_model", "num_heads", "num_kv_heads", "d_k", "dropout", "out_proj", "project_qkv",
             "hook_q", "hook_k", "hook_v", "hook_pattern", "hook_z"]
HOOKS = ALL_SETUP[-5:]


@pytest.mark.parametrize("cls, missing", [(_NoSetup, ALL_SETUP),
                                          (_NoHooks, HOOKS),
                                          (_NoProjection, ["project_qkv"])],
                         ids=["nothing", "no hook points", "no project_qkv"])
def test_mha_base_subclass_names_what_its_setup_misses(cls, missing):
    with pytest.raises(TypeError) as info:
        cls()(torch.randn(2, 5, 8))
    message = str(info.value)
    assert cls.__name__ in message
    assert message.split("missing ")[1].split(".")[0].split(", ") == missing  # exactly those


def test_mha_base_subclass_with_its_setup_runs():
    layer = _NoHooks()
    layer._add_hook_points()
    out, _ = layer(torch.randn(2, 5, 8))
    assert out.shape == (2, 5, 8)

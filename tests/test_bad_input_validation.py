"""Bad input to course_utils.attention.validation, the checks every module calls (check_dense,
check_device, check_head_dims, check_seed, finite, MAX_THREADS, ...). Values of the wrong type,
lying len/str/index, huge ints, meta devices and inference tensors: each must be refused naming
the argument, what was expected and what arrived.

Moved here from the QA batteries' files (issue 38 and later batteries), grouped by the code under test;
a `# -- battery N` line marks where each battery's cases begin. Helpers shared with other bad-input
files live in tests/bad_input_cases.py."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import pickle
import pkgutil
import re
import typing

import numpy as np
import pandas as pd
import pytest
import torch
from bad_input_cases import (
    BadIndex,
    BadRepr,
    Case,
    EqRaises,
    LyingLen,
    LyingStr,
    assert_named,
    raises_naming,
    refused,
)

import course_utils
from course_utils.attention import validation as V
from course_utils.attention import validation as v
from course_utils.attention import validation as va
from course_utils.attention.validation import (
    ReadOnlyDict,
    check_callable,
    check_distinct,
    check_edited_heads,
    check_increasing,
    check_int_list,
    check_record,
    check_rows,
    check_table,
    combine_masks,
    freeze_fields,
)

# -- battery 10 --------------------------------------------------------------------------------------

HUGE = 10**12


def test_the_fit_check_counts_the_extra_layers():
    """A layer given in ``also`` counts: alone it fits, with a huge extra one it does not."""
    va.check_linear_weights_fit(4, (4,), also=((4, 4),))
    refused(lambda: va.check_linear_weights_fit(4, (4,), also=((HUGE, HUGE),), sizes={"a": 1}), ValueError,
            ["a asks for", "(a=1: weights of 2 linear layers"])


def test_a_huge_head_count_lists_a_few_divisors_at_once():
    """The divisor list in the message scans at most a million candidates (10**12 + 1 looped for hours)."""
    refused(lambda: va.check_kv_heads(3, 10**12 + 1), ValueError, ["num_heads=1000000000001", "[1, 73, 137"])
    refused(lambda: va.check_head_dims(10**12 + 1, 2), ValueError, ["Heads that divide", "[1, 73, 137"])


# -- 4. the shared validators check their own int arguments -----------------------------------
OWN_INTS = [
    ("check_keys_not_empty num_queries str", lambda: va.check_keys_not_empty("3", 0), TypeError,
     ["num_queries", "int", "str '3'"]),
    ("check_keys_not_empty num_queries bool", lambda: va.check_keys_not_empty(True, 0), TypeError,
     ["num_queries", "int", "bool True"]),
    ("check_keys_not_empty num_queries -1", lambda: va.check_keys_not_empty(-1, 0), ValueError,
     ["num_queries", ">= 0", "-1"]),
    ("check_keys_not_empty num_queries nan", lambda: va.check_keys_not_empty(math.nan, 0), TypeError,
     ["num_queries", "int", "nan"]),
    ("check_keys_not_empty num_keys -1", lambda: va.check_keys_not_empty(2, -1), ValueError,
     ["num_keys", ">= 0", "-1"]),
    ("check_kv_heads num_heads bool", lambda: va.check_kv_heads(1, True), TypeError,
     ["num_heads", "int", "bool True"]),
    ("check_kv_heads num_heads -1", lambda: va.check_kv_heads(1, -1), ValueError,
     ["num_heads", "positive int", "-1"]),
]


@pytest.mark.parametrize("call, error, words", [c[1:] for c in OWN_INTS], ids=[c[0] for c in OWN_INTS])
def test_validators_check_their_own_int_arguments(call, error, words):
    refused(call, error, words)


def test_keys_not_empty_still_refuses_queries_without_keys():
    va.check_keys_not_empty(0, 0)
    va.check_keys_not_empty(torch.ones(2, 3).shape[1], 5)
    refused(lambda: va.check_keys_not_empty(3, 0), ValueError, ["Tk = 0", "3 queries"])


# -- battery 12 --------------------------------------------------------------------------------------

# -- 3. validators' own flags ---------------------------------------------------------------------
@pytest.mark.parametrize("flag", [1, "yes", None, torch.tensor(True)], ids=repr)
def test_validator_flags_must_be_bools(flag):
    with pytest.raises(TypeError, match="check_real's finite .for x. must be True or False"):
        V.check_real(3.0, "x", finite=flag)
    with pytest.raises(TypeError, match="check_positive_number's allow_inf .for x. must be True or False"):
        V.check_positive_number(3.0, "x", allow_inf=flag)
    assert V.check_real(float("inf"), "x", finite=False) == float("inf")
    assert V.check_positive_number(float("inf"), "x", allow_inf=True) == float("inf")


# -- battery 13 --------------------------------------------------------------------------------------

# -- fix38e left 5: check_record says "or None" for optional fields and spells out unions -------
def _optional_record():
    from course_utils.attention.validation import check_record

    @dataclasses.dataclass
    class Optional13:
        count: int | None
        items: list[torch.Tensor | np.ndarray | None]
        mode: typing.Literal["a", "b"] | None = None

        def __post_init__(self) -> None:
            check_record(self)
    return Optional13


@pytest.mark.parametrize("fields, error, words", [
    ({"count": -3}, ValueError, ["Optional13.count must be an int >= 0 or None, got -3"]),
    ({"count": "3"}, TypeError, ["Optional13.count must be an int or None, got str '3'"]),
    ({"mode": "c"}, ValueError, ["Optional13.mode must be one of 'a', 'b' or None, got str 'c'"]),
    ({"items": 3}, TypeError, ["Optional13.items must be a list of (Tensor or ndarray or None), got int"]),
    ({"items": [3]}, TypeError, ["Optional13.items[0] must be a Tensor or a ndarray or None, got int 3"]),
], ids=["int range", "int type", "literal", "list of union", "item"])
def test_check_record_names_optional_fields_and_unions_in_words(fields, error, words):
    record = _optional_record()
    assert_named(Case("record", lambda: record(**{"count": 1, "items": [], **fields}), error, words))
    assert record(None, [None]).count is None  # None is what the words say it is: allowed


# -- b13 obscure: a meta tensor of rows raised torch's "Tensor.item() cannot be called on meta" ------
def test_check_rows_names_a_meta_tensor():
    from course_utils.attention import validation as V

    meta = torch.tensor([0, 1], device="meta")
    assert_named(Case("rows meta", lambda: V.check_rows(meta, "rows", 4), ValueError,
                      ["rows is on the meta device", "(2)"]))
    assert V.check_rows(torch.tensor([0, 3]), "rows", 4).tolist() == [0, 3]  # the control


# -- b13: combine_masks(device='cpu') said "mask is on device cpu but the attention inputs are on cpu" --
def test_combine_masks_takes_a_device_name():
    from course_utils.attention import validation as V

    mask, padding = torch.ones(3, 3, dtype=torch.bool), torch.ones(2, 3, dtype=torch.bool)
    for device in ("cpu", torch.device("cpu")):
        out = V.combine_masks(mask, padding, batch=2, num_heads=1, num_queries=3, num_keys=3, device=device)
        assert out.shape == (2, 1, 3, 3) and bool(out.all())
    assert_named(Case("meta", lambda: V.combine_masks(mask, None, batch=2, num_heads=1, num_queries=3,
                                                      num_keys=3, device="meta"), ValueError,
                      ["mask is on device cpu", "inputs are on meta"]))


# -- battery 14 (fix44a) -----------------------------------------------------------------------------

def _public_dataclasses() -> list[type]:
    found: list[type] = []
    for info in pkgutil.walk_packages(course_utils.__path__, "course_utils."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__
                    and not name.startswith("_") and obj not in found):
                found.append(obj)
    return found


@pytest.mark.parametrize("cls", _public_dataclasses(), ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_every_public_dataclass_refuses_a_wrong_typed_field_naming_it(cls: type) -> None:
    """Every field set to a bare object(): the constructor refuses, naming the class and a field
    (``Class.field``, or ``Class(name).field`` for the timing records that carry a name)."""
    fields = [f.name for f in dataclasses.fields(cls) if f.init]
    with pytest.raises((TypeError, ValueError)) as caught:
        cls(**{name: object() for name in fields})
    named = "|".join(map(re.escape, fields))
    assert re.search(rf"\b{cls.__name__}(\([^)]*\))?\.({named})\b", str(caught.value)), str(caught.value)


# -- battery 15 (fix45a) -----------------------------------------------------------------------------

_raises = raises_naming


# -- 3. check_record refuses a name that is not a field ----------------------------------------------
@pytest.mark.parametrize("option", ["nan_ok", "signed", "positive", "nonempty", "fractions"])
def test_check_record_refuses_an_option_naming_no_field(option: str) -> None:
    @dataclasses.dataclass
    class Rec:
        value: float

        def __post_init__(self) -> None:
            V.check_record(self, **{option: ("valeu",)})

    _raises(ValueError, [option, "'valeu'", "Rec", "value"], lambda: Rec(1.0))


def test_check_record_refuses_a_bare_str_as_a_list_of_names() -> None:
    @dataclasses.dataclass
    class Rec2:
        loss: float

        def __post_init__(self) -> None:
            V.check_record(self, nan_ok="loss")

    _raises(TypeError, ["nan_ok", "Rec2", "tuple of field names", "'loss'"], lambda: Rec2(1.0))


def test_check_record_fractions_lie_in_zero_one() -> None:
    @dataclasses.dataclass
    class Share:
        accuracy: list[float]

        def __post_init__(self) -> None:
            V.check_record(self, fractions=("accuracy",))

    assert Share([0.0, 1.0]).accuracy == [0.0, 1.0]
    _raises(ValueError, ["Share.accuracy[1]", "[0, 1]", "1.5"], lambda: Share([0.5, 1.5]))


# -- 4. check_tensor_list([]) -----------------------------------------------------------------------
def test_check_tensor_list_refuses_an_empty_list_as_its_docstring_says() -> None:
    _raises(ValueError, ["parts", "at least one tensor", "empty list"],
            lambda: V.check_tensor_list([], "parts"))
    _raises(ValueError, ["parts", "at least one tensor"],
            lambda: V.check_tensor_list(torch.ones(0, 2, 2), "parts", stacked_ndim=3))
    assert V.check_tensor_list((), "parts", allow_empty=True) == []


# -- battery 15 (fix45d) -----------------------------------------------------------------------------

# -- 3. meta tensors: refused naming the argument and the device ----------------------------------
def test_check_finite_refuses_a_meta_tensor_naming_it():
    from course_utils.attention.validation import check_finite
    with pytest.raises(ValueError, match=r"scores is on the meta device"):
        check_finite(torch.ones(3, device="meta"), "scores")


# -- battery 16 (fix46p) -----------------------------------------------------------------------------

# -- check_callable's nargs ------------------------------------------------------------------
@pytest.mark.parametrize("nargs, error", [(-1, ValueError), (2.5, TypeError), ("2", TypeError),
                                          (math.nan, TypeError), (10**13, ValueError),
                                          (True, TypeError)])
def test_check_callable_checks_nargs_itself(nargs, error):
    with pytest.raises(error, match=rf"^nargs must be an int.*got .*{str(nargs)[:3]}"):
        check_callable(lambda a: a, "fn", nargs=nargs)


def test_check_callable_still_checks_the_arity_with_a_good_nargs():
    check_callable(lambda: 0, "fn", nargs=0)
    with pytest.raises(TypeError, match="fn must be"):
        check_callable(lambda a: a, "fn", nargs=0)


# -- combine_masks names its own size arguments ------------------------------------------------
SIZES = {"batch": 2, "num_heads": 4, "num_queries": 5, "num_keys": 5}


@pytest.mark.parametrize("name", list(SIZES))
@pytest.mark.parametrize("value, error", [(-1, ValueError), (True, TypeError), (2.5, TypeError),
                                          ("2", TypeError), (math.nan, TypeError), (None, TypeError)])
def test_combine_masks_names_the_size_argument(name, value, error):
    sizes = {**SIZES, name: value}
    with pytest.raises(error, match=rf"^{name} must be an int.*got .*{str(value)[:3]}"):
        combine_masks(torch.ones(5, 5, dtype=torch.bool), torch.ones(2, 5, dtype=torch.bool),
                      device=torch.device("cpu"), **sizes)


# -- check_edited_heads' heads -----------------------------------------------------------------
@pytest.mark.parametrize("heads", [[[1.0]], None, "tensor"])
def test_check_edited_heads_names_heads(heads):
    wanted = rf"heads must be the tensor the hook got, got {type(heads).__name__}"
    with pytest.raises(TypeError, match=wanted):
        check_edited_heads(torch.ones(2, 4, 5, 4), heads)


# -- check_table's columns ---------------------------------------------------------------------
def test_check_table_names_an_unhashable_column():
    with pytest.raises(TypeError, match=r"columns\[1\] must be a column name.*got list \['b'\]"):
        check_table(pd.DataFrame({"a": [1], "b": [2]}), "table", ("a", ["b"]))
    check_table(pd.DataFrame({"a": [1], 3: [2]}), "table", ("a", 3))  # an int name is still fine


# -- allow_empty is a real bool ----------------------------------------------------------------
@pytest.mark.parametrize("flag", [1, "yes", None, 1.0])
def test_check_int_list_allow_empty_must_be_a_bool(flag):
    with pytest.raises(TypeError, match=rf"^allow_empty must be True or False, got {type(flag).__name__}"):
        check_int_list([1, 2], "sizes", allow_empty=flag)


# -- battery 17 (fix47p) -----------------------------------------------------------------------------

def test_check_device_keeps_its_meta_message():
    refused(lambda: V.check_device("meta", "where"), ValueError, ["where must be a device that holds values",
                                                                  "'meta'"])


# -- O5: check_dims_not_empty's own arguments ------------------------------------------------------
@pytest.mark.parametrize("x, dims, error, words", [
    (None, ("B", "T"), TypeError, ["x must be a torch.Tensor", "NoneType"]),
    ([[[0.5]]], ("B", "T"), TypeError, ["x must be a torch.Tensor", "list"]),
    (torch.ones(160), ("B", "T"), ValueError, ["x must be at least 2-D", "(160)"]),
    (torch.ones(2, 3), None, TypeError, ["dims", "NoneType None"]),
    (torch.ones(2, 3), True, TypeError, ["dims", "bool True"]),
    (torch.ones(2, 3), ("B", 1), TypeError, ["dims", "('B', 1)"]),
], ids=["x None", "x list", "x 1-D", "dims None", "dims True", "dims bad entry"])
def test_check_dims_not_empty_checks_its_arguments(x, dims, error, words):
    refused(lambda: V.check_dims_not_empty(x, "x", dims), error, words)


def test_check_dims_not_empty_still_refuses_an_empty_batch():
    V.check_dims_not_empty(torch.ones(2, 3), "x")
    refused(lambda: V.check_dims_not_empty(torch.ones(0, 3), "x"), ValueError, ["x must hold at least one",
                                                                               "B >= 1"])


# -- O8: check_model_holds_values refuses a non-Module ---------------------------------------------
@pytest.mark.parametrize("model", [None, "abc", True, []], ids=["None", "str", "bool", "list"])
def test_check_model_holds_values_refuses_a_non_module(model):
    refused(lambda: V.check_model_holds_values(model, "my_model"), TypeError,
            ["my_model must be a torch.nn.Module", type(model).__name__])


# -- battery 18 (fix48p) -----------------------------------------------------------------------------

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


# -- battery 19 (fix49p) -----------------------------------------------------------------------------

# -- g26: a list mixing bools and ints is neither a mask nor indices -----------------------------
@pytest.mark.parametrize("rows", [[True, 0], (0, False), [1, 2, True, 3]], ids=["list", "tuple", "late bool"])
def test_check_rows_refuses_bools_mixed_with_ints(rows):
    with pytest.raises(TypeError) as info:
        check_rows(rows, "rows", 4)
    message = str(info.value)
    assert "rows[" in message and "mix" in message and "bool" in message


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


# -- battery 20 (fix50p) -----------------------------------------------------------------------------

# -- O1: ReadOnlyDict's items must be a mapping or (key, value) pairs -----------------------------
@pytest.mark.parametrize("items", [None, 3, [1], [(1, 2, 3)]], ids=["None", "int", "list of int", "triple"])
def test_read_only_dict_refuses_a_non_mapping_by_name(items):
    raises_naming(TypeError, ["items", "mapping", type(items).__name__, repr(items)],
                  lambda: ReadOnlyDict(items, "Rec.field"))


def test_read_only_dict_still_takes_a_mapping_and_pairs():
    assert ReadOnlyDict({"a": 1}) == ReadOnlyDict([("a", 1)]) == {"a": 1}
    assert ReadOnlyDict() == {}


# -- S3: check_increasing reads ints only (NaN or a str would compare "in order") -----------------
@pytest.mark.parametrize("steps, words", [
    ([1, float("nan")], ["steps[1]", "int", "nan"]),
    ("ab", ["steps", "list of ints", "'ab'"]),
    ([1, "2"], ["steps[1]", "int", "'2'"]),
    ([1.0, 2.5], ["steps[0]", "int", "1.0"]),
], ids=["nan", "str", "str entry", "floats"])
def test_check_increasing_refuses_non_int_steps(steps, words):
    raises_naming(TypeError, words, lambda: check_increasing(steps, "steps"))


def test_check_increasing_still_takes_increasing_ints():
    check_increasing([], "steps")
    check_increasing((1, 2, 5), "steps")
    raises_naming(ValueError, ["steps[0] = 2", "steps[1] = 1"], lambda: check_increasing([2, 1], "steps"))


# -- battery 22 (fix52p) -----------------------------------------------------------------------------

# -- 10: ReadOnlyDict's label (what its refusals print) is a non-empty str --------------------------
@pytest.mark.parametrize(("label", "error"), [(3, TypeError), (None, TypeError), (b"x", TypeError),
                                              ("", ValueError), ("  ", ValueError)],
                         ids=["int", "None", "bytes", "empty", "blank"])
def test_read_only_dict_refuses_a_bad_label(label, error):
    raises_naming(error, ["label", repr(label)], lambda: ReadOnlyDict({"a": 1}, label))


def test_read_only_dict_with_a_label_still_works():
    d = ReadOnlyDict({"a": 1}, "Rec.field")
    assert d == {"a": 1} and pickle.loads(pickle.dumps(d)).label == "Rec.field"
    raises_naming(TypeError, ["Rec.field", "read-only"], lambda: d.update(b=2))


# -- 11: check_distinct on a tensor: a meta one is refused, others compared by value ---------------
def test_check_distinct_refuses_a_meta_tensor():
    raises_naming(ValueError, ["xs", "meta"], lambda: check_distinct(torch.ones(2).to("meta"), "xs"))


@pytest.mark.parametrize("values", [torch.tensor([1, 1]), torch.tensor([[1, 2], [1, 2]]),
                                    torch.tensor([float("nan")] * 2)], ids=["ints", "rows", "nan"])
def test_check_distinct_compares_a_tensor_by_value(values):
    raises_naming(ValueError, ["xs", "distinct", "repeats"], lambda: check_distinct(values, "xs"))


def test_check_distinct_refuses_a_0d_tensor_and_keeps_distinct_ones():
    raises_naming(TypeError, ["xs", "Tensor"], lambda: check_distinct(torch.tensor(1), "xs"))
    assert [int(v) for v in check_distinct(torch.tensor([1, 2]), "xs")] == [1, 2]


# -- battery 23 (fix53w) -----------------------------------------------------------------------------

# -- O1: check_fast_attention_inputs checked num_heads / num_kv_heads / d_k only through q's layout --
def _heads(num_heads: int = 2, num_kv_heads: int = 2, d_k: int = 4) -> tuple[torch.Tensor, ...]:
    q = torch.zeros(2, num_heads, 4, d_k)
    k = v = torch.zeros(2, num_kv_heads, 4, d_k)
    return q, k, v


@pytest.mark.parametrize("arg", ["num_heads", "num_kv_heads", "d_k"])
@pytest.mark.parametrize("bad, error", [(True, TypeError), (-1, ValueError), (0, ValueError),
                                        (2.5, TypeError), ("2", TypeError), (np.float64(math.nan), TypeError),
                                        (None, TypeError)])
def test_fast_attention_sizes_named(arg: str, bad: object, error: type) -> None:
    from course_utils.attention.validation import check_fast_attention_inputs

    q, k, v = _heads()
    sizes = {"num_heads": 2, "num_kv_heads": 2, "d_k": 4}
    check_fast_attention_inputs(q, k, v, None, False, **sizes)  # the control passes
    sizes[arg] = bad
    raises_naming(error, [arg, str(bad)], lambda: check_fast_attention_inputs(q, k, v, None, False, **sizes))


# -- O4: combine_masks(device=-1) gave torch's bare "Device index must not be negative" ------------
@pytest.mark.parametrize("device, error", [(-1, TypeError), (2.5, TypeError), ("nonsense", ValueError)])
def test_combine_masks_device_named(device: object, error: type) -> None:
    from course_utils.attention.validation import combine_masks

    mask = torch.ones(3, 3, dtype=torch.bool)
    call = lambda: combine_masks(mask, None, batch=2, num_heads=1, num_queries=3,  # noqa: E731
                                 num_keys=3, device=device)
    raises_naming(error, ["device", str(device)], call)
    for good in ("cpu", torch.device("cpu")):  # the control
        assert combine_masks(mask, None, batch=2, num_heads=1, num_queries=3, num_keys=3,
                             device=good).shape == (1, 1, 3, 3)


# -- battery 23 (fix54) ------------------------------------------------------------------------------

# -- check_distinct compares a list of tensors by their values ------------------------------------
def test_check_distinct_sees_a_repeated_tensor_in_a_list():
    """Battery 23: two equal tensors in a list were taken as distinct (== is elementwise)."""
    from course_utils.attention.validation import check_distinct
    raises_naming(ValueError, ["xs", "repeats", "[1, 2]"],
                  lambda: check_distinct([torch.tensor([1, 2]), torch.tensor([1, 2])], "xs"))
    assert len(check_distinct([torch.tensor([1, 2]), torch.tensor([1, 3]), torch.tensor(1)], "xs")) == 3


# -- battery 27 (fix57) ------------------------------------------------------------------------------

def test_a_value_whose_repr_raises_is_named_by_its_type() -> None:
    from course_utils import causal_mask
    from course_utils.attention.validation import check_device

    class BadRepr:
        def __repr__(self) -> str:
            raise RuntimeError("boom")

    for call in (lambda: check_device(BadRepr()), lambda: causal_mask(3, device=BadRepr())):
        raises_naming(TypeError, ["device", "BadRepr whose repr raised RuntimeError"], call)


@pytest.mark.parametrize(("call", "name"), [
    (lambda: __import__("course_utils.attention.validation", fromlist=["x"]).check_real(10**400, "value"),
     "value"),
    (lambda: __import__("course_utils").MultiHeadAttention(8, 2, dropout=10**400), "dropout"),
    (lambda: __import__("course_utils.model.train", fromlist=["x"]).TrainConfig(lr=10**400),
     "TrainConfig.lr"),
])
def test_an_int_no_float_holds_is_named(call, name) -> None:
    raises_naming(ValueError, [name, "fits a float", "int too large"], call)


# -- battery 28 (fix58) ------------------------------------------------------------------------------

class OddIndex:
    def __index__(self) -> int:
        return 3

    def __repr__(self) -> str:
        return "OddIndex()"


def test_check_kv_pair_names_its_own_sizes() -> None:
    from course_utils.attention.validation import check_kv_pair

    pair, weight = (torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)), torch.nn.Linear(8, 8).weight
    raises_naming(TypeError, ["check_kv_pair's num_kv_heads", "OddIndex()"],
                  lambda: check_kv_pair(pair, "past", batch=1, num_kv_heads=OddIndex(), d_k=4, weight=weight))
    raises_naming(TypeError, ["check_kv_pair's d_k", "bool True"],
                  lambda: check_kv_pair(pair, "past", batch=1, num_kv_heads=2, d_k=True, weight=weight))


def test_check_linear_layer_names_a_size_that_is_no_int() -> None:
    from course_utils.attention.validation import check_linear_layer

    raises_naming(TypeError, ["check_linear_layer's d_in", "str '3'"],
                  lambda: check_linear_layer(torch.nn.Linear(8, 4), "l", "3", 4))


@pytest.mark.parametrize("flag", [torch.tensor([True, False]), 1])
def test_check_not_inference_checks_its_flag(flag) -> None:
    from course_utils.attention.validation import check_not_inference

    raises_naming(TypeError, ["check_not_inference's tracked", "True or False"],
                  lambda: check_not_inference(torch.randn(2), "x", tracked=flag))


@pytest.mark.parametrize("device", ["cpu", None, 3])
def test_check_not_meta_device_wants_a_parsed_device(device) -> None:
    from course_utils.attention.validation import check_not_meta_device

    raises_naming(TypeError, ["device", "torch.device", type(device).__name__],
                  lambda: check_not_meta_device(device))


def test_the_message_helpers_answer_odd_arguments() -> None:
    from course_utils.attention.validation import finite, shown

    raises_naming(TypeError, ["shown's width", "float 2.5"], lambda: shown([1, 2], 2.5))
    assert finite("0.1") is False and finite(None) is False and finite(10**400) is False
    assert finite(0.1) is True


# -- battery 28 (library) ----------------------------------------------------------------------------

@pytest.mark.parametrize("function, call", [
    ("check_int", lambda v, bad: v.check_int(3, bad)),
    ("check_flag", lambda v, bad: v.check_flag(True, bad)),
    ("check_tensor", lambda v, bad: v.check_tensor(torch.ones(2), bad, ndim=3)),
    ("check_finite", lambda v, bad: v.check_finite(torch.ones(2), bad)),
    ("check_real", lambda v, bad: v.check_real(float("nan"), bad)),
    ("check_device", lambda v, bad: v.check_device("cpu", bad)),
])
@pytest.mark.parametrize("bad", [BadRepr(), 3], ids=["str raises", "not a str"])
def test_a_validation_name_that_is_no_str_is_refused_naming_the_check(function: str, call, bad) -> None:
    from course_utils.attention import validation

    words = [f"{function}'s name must be a str", type(bad).__name__]
    if isinstance(bad, BadRepr):
        words.append("BadRepr whose repr raised RuntimeError")
    raises_naming(TypeError, words, lambda: call(validation, bad))


def test_check_device_names_a_meta_device_whose_repr_raises() -> None:
    from course_utils.attention.validation import check_device

    class BadStr(str):
        def __repr__(self) -> str:
            raise RuntimeError("repr raises")

    raises_naming(ValueError, ["device must be a device that holds values",
                               "'meta' (a BadStr whose repr raised RuntimeError)"],
                  lambda: check_device(BadStr("meta")))


def test_shown_keeps_the_value_of_a_builtin_subclass_whose_repr_raises() -> None:
    from course_utils.attention.validation import shown

    def broken(base: type) -> type:
        def __repr__(self) -> str:
            raise RuntimeError("repr raises")
        return type(f"Bad{base.__name__.title()}", (base,), {"__repr__": __repr__})

    assert shown(broken(str)("final")) == "'final' (a BadStr whose repr raised RuntimeError)"
    assert shown(broken(int)(3)) == "3 (a BadInt whose repr raised RuntimeError)"
    assert shown(broken(float)(0.5)) == "0.5 (a BadFloat whose repr raised RuntimeError)"
    assert shown(broken(object)()) == "<a BadObject whose repr raised RuntimeError>"


# -- battery 29 (library) ----------------------------------------------------------------------------

class BadFloat:
    def __float__(self) -> float:
        raise RuntimeError("float raises")


def test_finite_never_raises():
    from course_utils.attention.validation import finite

    assert finite(torch.ones(2, device="meta").sum()) is False
    assert finite(BadFloat()) is False
    assert finite(1.0) is True


def test_check_dense_non_tensor_names_argument():
    from course_utils.attention.validation import check_dense

    with pytest.raises(TypeError, match=r"x must be a torch.Tensor, got list"):
        check_dense([1.0, 2.0], "x")


# -- battery 29 (rerun) ------------------------------------------------------------------------------

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


# -- battery 30 (dev) --------------------------------------------------------------------------------

def test_check_head_dims_names_its_own_heads_name():
    from course_utils.attention.validation import check_head_dims

    assert check_head_dims(16, 4, heads_name="num_kv_heads") == 4
    with pytest.raises(TypeError, match="check_head_dims's heads_name must be a str"):
        check_head_dims(16, 4, heads_name=5)




class _EqAll(str):
    """A str subclass equal to anything (its own __eq__ must not decide the choice)."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


@pytest.mark.parametrize(("value", "error", "words"), [
    (EqRaises(), TypeError, ["mode must be one of 'fast' or 'slow' (a str)", "got EqRaises EqRaises()"]),
    (BadRepr(), TypeError, ["mode", "'fast' or 'slow'", "BadRepr", "whose repr raised"]),
    (None, TypeError, ["mode", "'fast' or 'slow'", "got NoneType None"]),
    (3, TypeError, ["mode", "'fast' or 'slow'", "got int 3"]),
    ("fats", ValueError, ["mode must be one of 'fast' or 'slow', got 'fats'", "did you mean 'fast'?"]),
    (_EqAll("zzz"), ValueError, ["mode must be one of 'fast' or 'slow'", "got 'zzz'"]),
])
def test_check_choice_refuses_what_is_no_choice_by_name(value, error, words):
    message = raises_naming(error, words, lambda: V.check_choice(value, "mode", ("fast", "slow")))
    assert "eq boom" not in message


def test_check_choice_returns_the_plain_str_and_prints_meanings():
    for value in ("fast", LyingStr("fast"), _EqAll("fast")):
        out = V.check_choice(value, "mode", ("fast", "slow"))
        assert type(out) is str and out == "fast"
    raises_naming(ValueError, ["per must be one of 'token' (one per token) or 'channel' "
                               "(one per channel)", "got 'row'"],
                  lambda: V.check_choice("row", "per", {"token": "one per token",
                                                        "channel": "one per channel"}))
    raises_naming(TypeError, ["check_choice's choices (for mode)", "non-empty tuple of strs"],
                  lambda: V.check_choice("a", "mode", ()))
    raises_naming(TypeError, ["check_choice's name", "str"], lambda: V.check_choice("a", 5, ("a",)))


def test_check_names_free_refuses_a_taken_key_by_its_plain_value():
    V.check_names_free({"loss": 1, 0: 2}, "numbers", ("pruned", "fraction"), "the table's own columns")
    for key in ("pruned", LyingStr("pruned"), _EqAll("pruned")):
        raises_naming(ValueError, ["numbers has the key 'pruned'", "the table's own columns",
                                   "'pruned' or 'fraction'"],
                      lambda key=key: V.check_names_free({key: 1}, "numbers", ("pruned", "fraction"),
                                                         "the table's own columns"))
    raises_naming(TypeError, ["numbers", "LyingLen", "len() or iteration raised"],
                  lambda: V.check_names_free(LyingLen(["a"]), "numbers", ("a",), "x"))
    raises_naming(TypeError, ["check_names_free's why", "str"],
                  lambda: V.check_names_free({}, "numbers", ("a",), 5))


# -- battery 34 (g5) ---------------------------------------------------------------------------------

class _IntRaises(int):
    """An int subclass whose own int conversions raise (its value is still an int)."""

    def __int__(self) -> int:
        raise RuntimeError("int boom")

    def __index__(self) -> int:
        raise RuntimeError("index boom")


def test_check_int_reads_an_int_subclass_by_its_plain_value():
    for value in (_IntRaises(3), np.int64(3), 3):
        out = V.check_int(value, "steps", minimum=1)
        assert type(out) is int and out == 3
    raises_naming(ValueError, ["steps must be a positive int", "got 0"],
                  lambda: V.check_int(_IntRaises(0), "steps", minimum=1))
    assert type(V.plain_int(_IntRaises(7), "layer")) is int
    raises_naming(TypeError, ["layer must be an int", "bool True"], lambda: V.plain_int(True, "layer"))

"""Stored answers: what the checks compare with, so no reference solution ships as code.

Each lesson's checks read ``answers/lessonNN.pt``: for every exercise, its test cases
themselves, the right output on each case and the output of each known mistake (or the
exception it raises). The check feeds the learner's function the stored inputs, byte for
byte, so every machine grades on the same inputs: a case builder that does float maths
(``x @ w_q``, ``torch.randn``) gives other last bits under another CPU's code path (MKL's
AVX2 or AVX-512 kernels, ATen's vectorised ones), and only the outputs are compared, with a
tolerance. An exercise whose inputs cannot be stored (a loss function the case builder
makes) builds them at check time, and its outputs are compared with the same tolerance.
The file is made by ``python scripts/exercise_answers.py build`` from the reference
solutions kept outside the package (``solutions/``), and a test fails when it is stale.

Values are stored in a form ``torch.load(weights_only=True)`` accepts (tensors, numbers,
strings, lists, dicts), so loading the file runs no code.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..attention.validation import check_flag, check_int, check_record, plain_str, shown
from ..paths import check_path, path_kind
from .cases import Case, listed

ANSWERS_DIR = Path(__file__).resolve().parent / "answers"
FORMAT = 2


@dataclass(frozen=True)
class Raised:
    """A stored outcome: the mistake's implementation raised ``kind`` with ``message``. ``kind``
    is ``type(exc).__name__``: any identifier, not one from a list (an answer may raise a class
    of its own), so only a name that could never match a raise ('' or 'Value Error') is refused."""

    kind: str
    message: str

    def __post_init__(self) -> None:
        check_record(self)
        if not self.kind.isidentifier():  # '' or 'Value Error' would never match a raise
            raise ValueError(f"Raised.kind must be the name of an exception class such as 'ValueError', "
                             f"got {shown(self.kind, 60)}")


# NotImplementedError is a RuntimeError: torch 2.15 raises it where 2.13 raised RuntimeError
# (``bool_tensor.mean()``), so a stored RuntimeError also stands for it.
_SAME_KIND = {"NotImplementedError": "RuntimeError"}


def _message_core(message: str) -> str:
    """An error message without the operator prefix newer torch adds ("mm: mat1 and ...")."""
    head, sep, rest = message.partition(": ")
    return rest if sep and head.isidentifier() and len(head) <= 40 else message


def same_raise(stored: Raised, kind: str, message: str, *, loose: bool = False) -> bool:
    """True when an exception of ``kind`` with ``message`` is the one ``stored`` records, across
    torch versions: the same kind (or a subclass torch now raises instead) and, unless
    ``loose``, the same message up to an operator-name prefix."""
    if not isinstance(stored, Raised):
        raise TypeError(f"stored: expected a Raised (a stored exception), got {type(stored).__name__} "
                        f"{shown(stored, 60)}")
    if not isinstance(kind, str) or not isinstance(message, str):
        raise TypeError(f"kind and message: expected the exception's class name and text (str), got "
                        f"{type(kind).__name__} and {type(message).__name__}")
    check_flag(loose, "loose")
    if stored.kind != kind and _SAME_KIND.get(kind) != stored.kind and _SAME_KIND.get(stored.kind) != kind:
        return False
    return loose or stored.message == message or _message_core(stored.message) == _message_core(message)


class UnstorableValue(TypeError):
    """An output the store cannot hold; the message names its type."""


# how deep encode goes into lists, tuples and dicts: a list that holds itself would recurse forever
MAX_DEPTH = 32


def encode(value: Any, _depth: int = 0) -> Any:
    """``value`` as plain data that ``torch.load(weights_only=True)`` reads back. Raises
    :class:`UnstorableValue` for a type the store cannot hold, or for lists, tuples and dicts
    nested more than :data:`MAX_DEPTH` deep (one that holds itself)."""
    if _depth > MAX_DEPTH:
        raise UnstorableValue(f"cannot store a value nested more than {MAX_DEPTH} lists, tuples or dicts "
                              "deep (a list that holds itself?)")
    if isinstance(value, Raised):
        return {"__raised__": [value.kind, value.message]}
    if isinstance(value, torch.Tensor):
        if value.device.type == "meta":
            raise UnstorableValue(f"cannot store a tensor on device 'meta' (shape {tuple(value.shape)}, "
                                  f"{value.dtype}): it holds no values")
        # a plain tensor (a subclass's own methods would come back with it, and may not load)
        return {"__tensor__": value.detach().cpu().clone().as_subclass(torch.Tensor)}
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biufc":
            raise UnstorableValue(f"cannot store an array of dtype {value.dtype}")
        array = torch.from_numpy(np.ascontiguousarray(value).copy())
        return {"__ndarray__": array, "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return {"__npscalar__": value.item(), "dtype": str(value.dtype)}
    if isinstance(value, bool) or value is None or isinstance(value, (int, float, str)):
        return value
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v, _depth + 1) for v in value]}
    if type(value) is torch.nn.Linear:
        return {"__linear__": [value.in_features, value.out_features, value.bias is not None,
                               str(value.weight.dtype).removeprefix("torch."),
                               encode({k: v.detach() for k, v in value.state_dict().items()}, _depth + 1)]}
    if type(value).__name__ == "DataFrame" and type(value).__module__.startswith("pandas"):
        parts = (list(value.index), list(value.columns), value.to_numpy(copy=True))
        return {"__dataframe__": [encode(part, _depth + 1) for part in parts]}
    if isinstance(value, list):
        return [encode(v, _depth + 1) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: encode(v, _depth + 1) for k, v in value.items()}}
    raise UnstorableValue(f"cannot store a value of type {type(value).__module__}.{type(value).__qualname__}")


def decode(data: Any, _depth: int = 0) -> Any:
    """The inverse of :func:`encode` (a fresh copy each time, so a caller may edit it). Raises
    ValueError for a damaged store: nested deeper than :data:`MAX_DEPTH`, an array or NumPy
    scalar of a dtype :func:`encode` refuses (``object``: any Python value), an unknown record."""
    if _depth > MAX_DEPTH:
        raise ValueError(f"data: a stored value nested more than {MAX_DEPTH} lists, tuples or dicts deep, "
                         "which encode never writes: the stored answers are damaged; reinstall the course "
                         "package")
    depth = _depth + 1
    if isinstance(data, list):
        return [decode(v, depth) for v in data]
    if not isinstance(data, dict):
        if data is None or isinstance(data, (bool, int, float, str)):  # what encode keeps as it is
            return data
        raise ValueError(f"data: expected a stored value (what encode writes: None, a bool, int, float, "
                         f"str, list or dict), got {type(data).__name__} {shown(data, 60)}: the stored "
                         f"answers are damaged; reinstall the course package")
    if "__raised__" in data:
        return Raised(*data["__raised__"])
    if "__tensor__" in data:
        return _stored_part(data, "__tensor__", "tensor", torch.Tensor, "a torch.Tensor").clone()
    if "__ndarray__" in data:
        array = _stored_part(data, "__ndarray__", "array", torch.Tensor, "a torch.Tensor")
        return array.numpy().astype(_stored_dtype(data, "array"), copy=True)
    if "__npscalar__" in data:
        return _stored_dtype(data, "NumPy scalar").type(data["__npscalar__"])
    if "__tuple__" in data:
        return tuple(decode(v, depth) for v in _stored_part(data, "__tuple__", "tuple", list, "a list"))
    if "__linear__" in data:
        in_features, out_features, bias, dtype, state = data["__linear__"]
        layer = torch.nn.Linear(in_features, out_features, bias=bias, dtype=getattr(torch, dtype),
                                device="meta")  # no random init: the learner's RNG stays as it was
        layer = layer.to_empty(device="cpu")
        layer.load_state_dict(decode(state, depth))
        return layer
    if "__dataframe__" in data:
        import pandas as pd

        index, columns, values = (decode(v, depth) for v in data["__dataframe__"])
        return pd.DataFrame(values, index=index, columns=columns)
    if "__dict__" in data:
        return {k: decode(v, depth) for k, v in data["__dict__"].items()}
    raise ValueError(f"unknown stored value with keys {sorted(data)}")


def _stored_part(data: dict, key: str, what: str, kind: type, expected: str) -> Any:
    """``data[key]`` of a stored ``what`` record, checked to be a ``kind`` (``expected`` in words):
    anything else is a damaged store, named (ValueError), never a bare error from decoding it."""
    value = data.get(key)
    if not isinstance(value, kind):
        raise ValueError(f"data: a stored {what} ('{key}') must hold {expected}, got "
                         f"{type(value).__name__} {shown(value, 60)}: the stored answers are damaged; "
                         "reinstall the course package")
    return value


def _stored_dtype(data: dict, what: str) -> np.dtype:
    """The NumPy dtype a stored ``what`` names: one of the numeric kinds :func:`encode` writes
    (``object`` would hand back any Python value), else a damaged store (ValueError)."""
    name = _stored_part(data, "dtype", what, str, "its dtype's name (str)")
    try:
        dtype = np.dtype(name)
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in "biufc":
        raise ValueError(f"data: a stored {what} must name a numeric dtype (bool, int, float, complex), got "
                         f"{shown(name[:60])}: the stored answers are damaged; reinstall the course package")
    return dtype


def _check_case(case: object, name: str) -> None:
    """``case`` is a :class:`~.cases.Case` (what an exercise's ``cases()`` lists)."""
    if not isinstance(case, Case):
        raise TypeError(f"{name} must be a Case (from an exercise's cases()), got {type(case).__name__} "
                        f"{shown(case, 60)}")


def encode_case(case: Any) -> Any:
    """A test case (:class:`~.cases.Case`) as plain data, or None when an input cannot be stored
    (a function made by the case builder): such an exercise builds its cases at check time."""
    _check_case(case, "case")
    try:
        return {"args": encode(tuple(case.args)), "kwargs": encode(dict(case.kwargs)), "label": case.label}
    except UnstorableValue:
        return None


def decode_case(data: Any) -> Any:
    """The inverse of :func:`encode_case`: a fresh :class:`~.cases.Case`."""
    if not isinstance(data, dict) or not {"args", "kwargs", "label"} <= set(data):
        raise TypeError(f"data: expected a stored case (a dict with 'args', 'kwargs' and 'label', made by "
                        f"encode_case), got {type(data).__name__} {shown(data, 60)}")
    return Case(decode(data["args"]), decode(data["kwargs"]), data["label"])


def describe_inputs(value: Any, depth: int = 0) -> Any:
    """What a test input is, without its values: kinds, shapes and dtypes, nested like the input.

    Two builds of the same cases on different machines describe the same, even where float
    maths moved a last bit; a changed case builder (another shape, one case more) does not."""
    depth = check_int(depth, "depth", minimum=0)
    if depth > 20:
        return "<deep>"
    if isinstance(value, torch.nn.Module):
        return (type(value).__qualname__,
                tuple((name, describe_inputs(t, depth + 1)) for name, t in value.state_dict().items()))
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype))
    if isinstance(value, np.ndarray):
        return ("array", tuple(value.shape), str(value.dtype))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(describe_inputs(v, depth + 1) for v in value))
    if isinstance(value, dict):
        keys = sorted(value, key=shown)
        return ("dict", tuple((shown(k), describe_inputs(value[k], depth + 1)) for k in keys))
    if hasattr(value, "to_json") and hasattr(value, "shape"):  # a pandas table
        return ("table", tuple(value.shape), tuple(map(str, getattr(value, "columns", ()))))
    if callable(value):
        return ("function", getattr(value, "__qualname__", type(value).__qualname__))
    if isinstance(value, float):
        return ("float",)  # a computed float's last bit may differ between machines
    return (type(value).__name__, shown(value))


def cases_signature(cases: Any) -> list:
    """:func:`describe_inputs` of each case with its label: what a store's cases must match."""
    cases = listed(cases, "cases", "a list of Case (an exercise's cases())")
    if isinstance(cases, (str, bytes, dict)) or not isinstance(cases, (list, tuple)):
        raise TypeError(f"cases must be a list of Case (an exercise's cases()), got {type(cases).__name__} "
                        f"{shown(cases, 60)}")
    for i, case in enumerate(cases):
        _check_case(case, f"cases[{i}]")
    return [(case.label, describe_inputs((tuple(case.args), dict(case.kwargs)))) for case in cases]



def read_store(path: Path) -> dict:
    """The stored answers in ``path`` (``{"format", "exercises"}``); an OSError or ValueError
    that names the file when it is missing, not a store, or of another format. Something else at
    the path (a folder, a FIFO, a symlink loop or a broken link) is a ValueError naming what it
    is, as checkpoint.py names it, not "no stored answers"; a FIFO is never opened."""
    check_path(path, "path", "the stored answers' file (answers/lessonNN.pt)")
    found = path_kind(path)
    if found == "missing":
        raise FileNotFoundError(f"{Path(path).name}: no stored answers at {path} (reinstall the course "
                                "package, or run scripts/exercise_answers.py build in its clone)")
    if found is not None:
        raise ValueError(f"{Path(path).name}: expected a file of stored answers at {path}, but it is "
                         f"{found}; remove or rename it, then reinstall the course package or run "
                         "scripts/exercise_answers.py build in its clone")
    try:
        data = torch.load(path, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure: the file is not a store
        raise ValueError(f"{Path(path).name} cannot be read as stored answers "
                         f"({type(exc).__name__})") from None
    if not isinstance(data, dict) or not isinstance(data.get("exercises"), dict):
        raise ValueError(f"{Path(path).name} is not a store of answers (no 'exercises' table)")
    if data.get("format") != FORMAT:
        raise ValueError(f"{Path(path).name}: stored answers of format {data.get('format')}, "
                         f"expected {FORMAT}")
    return data


class StoreChanged(ValueError):
    """The stored answers held in memory were changed in place after they were read."""


class _FrozenList(tuple):
    """A stored list, kept as a tuple: nothing can append to it or replace an item."""

    __slots__ = ()


class _FrozenDict(tuple):
    """A stored dict, kept as a tuple of (key, value) pairs: nothing can add or replace a key."""

    __slots__ = ()


class _FrozenTensor(tuple):
    """A stored tensor kept as ``bytes``: (dtype, storage bytes, offset, size, stride, digest).
    The layout is kept too, so a non-contiguous stored input comes back non-contiguous. The
    digest (SHA-256 of the stored bytes, never of computed floats) catches code that writes
    into the bytes anyway (``torch.frombuffer`` gives a writable view of a ``bytes``)."""

    __slots__ = ()


def _freeze(value: Any) -> Any:
    """``value`` (what :func:`read_store` loads) with every tensor as bytes and every list and dict
    as a tuple: an answer that finds it (``gc.get_objects()``) cannot change it in place."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu()
        raw = torch.empty(0, dtype=torch.uint8).set_(tensor.untyped_storage()).numpy().tobytes()
        return _FrozenTensor((tensor.dtype, raw, tensor.storage_offset(), tuple(tensor.size()),
                              tuple(tensor.stride()), hashlib.sha256(raw).hexdigest()))
    if isinstance(value, dict):
        return _FrozenDict((k, _freeze(v)) for k, v in value.items())
    if isinstance(value, list):
        return _FrozenList(_freeze(v) for v in value)
    if isinstance(value, tuple):
        return tuple(_freeze(v) for v in value)
    return value  # a number, a string, None: immutable already


def _thaw(value: Any) -> Any:
    """The inverse of :func:`_freeze`: fresh tensors, lists and dicts that no earlier caller saw."""
    if isinstance(value, _FrozenTensor):
        dtype, raw, offset, size, stride, digest = value
        if hashlib.sha256(raw).hexdigest() != digest:
            _load.cache_clear()  # the next check reads the file again
            raise StoreChanged("the check's stored answers changed while they were loaded (code that "
                               "ran in this kernel, such as the function being checked, wrote into "
                               "them), so this check cannot say whether your function is right; "
                               "they are read again from the file at the next check")
        storage = (torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw
                   else torch.empty(0, dtype=torch.uint8)).untyped_storage()
        return torch.empty(0, dtype=dtype).set_(storage, offset, size, stride)
    if isinstance(value, _FrozenDict):
        return {k: _thaw(v) for k, v in value}
    if isinstance(value, _FrozenList):
        return [_thaw(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_thaw(v) for v in value)
    return value


def lesson_name(lesson: Any) -> str:
    """``lesson`` ("lesson02") as the plain str of one of the course's lesson modules, the one way
    a lesson argument is taken: a str subclass is read through :func:`plain_str` (its own
    ``__str__``, ``__repr__`` or ``__eq__`` is never called, so an f-string or a path of it is the
    text it holds); else a ValueError naming ``lesson``, what was expected and what arrived."""
    if isinstance(lesson, str):
        lesson = plain_str(lesson, "lesson")
    if not isinstance(lesson, str) or re.fullmatch(r"lesson\d\d", lesson) is None:
        raise ValueError(f"lesson must be 'lessonNN', e.g. 'lesson02', got {shown(lesson, 60)}")
    known = sorted(p.stem for p in Path(__file__).parent.glob("lesson[0-9][0-9].py"))
    if lesson not in known:
        raise ValueError(f"lesson must be one of the course's lessons {known}, got {shown(lesson)}")
    return lesson


@functools.cache
def _load(lesson: str) -> _FrozenDict:
    """A lesson's stored exercises, frozen (:func:`_freeze`). The cache holds no tensor, list or
    dict: the checks decode the expected outputs after the answer has run, from bytes the answer
    could not edit (battery 17: an answer zeroed the cached expected tensors through ``gc`` and
    then returned zeros, and was told it was right)."""
    return _freeze(read_store(ANSWERS_DIR / f"{lesson}.pt")["exercises"])


def stored(lesson: str, name: str) -> dict | None:
    """The stored entry of exercise ``name`` of ``lesson`` ("lesson02"), a fresh copy on each call
    (so an edit to one copy never reaches the next check), or None when the store has none;
    raises OSError / ValueError when the file is missing or unreadable, and ValueError for a
    lesson that is not "lessonNN" (a path would read outside the store)."""
    lesson = lesson_name(lesson)
    name = plain_str(name, "name", "an exercise's stored name (a str)")
    for key, entry in _load(lesson):
        if key == name:
            return _thaw(entry)  # a fresh copy on each call: no caller shares it with another
    return None

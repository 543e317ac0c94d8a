"""Stored answers: what the checks compare with, so no reference solution ships as code.

Each lesson's checks read ``answers/lessonNN.pt``: for every exercise, the right output
on each test case and the output of each known mistake (or the exception it raises), plus
a digest of the test inputs those outputs belong to. The file is made by
``python scripts/exercise_answers.py build`` from the reference solutions kept outside
the package (``solutions/``), and a test fails when it is stale.

Values are stored in a form ``torch.load(weights_only=True)`` accepts (tensors, numbers,
strings, lists, dicts), so loading the file runs no code.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

ANSWERS_DIR = Path(__file__).resolve().parent / "answers"
FORMAT = 1


@dataclass(frozen=True)
class Raised:
    """A stored outcome: the mistake's implementation raised ``kind`` with ``message``."""

    kind: str
    message: str


class UnstorableValue(TypeError):
    """An output the store cannot hold; the message names its type."""


def encode(value: Any) -> Any:
    """``value`` as plain data that ``torch.load(weights_only=True)`` reads back."""
    if isinstance(value, Raised):
        return {"__raised__": [value.kind, value.message]}
    if isinstance(value, torch.Tensor):
        return {"__tensor__": value.detach().cpu().clone()}
    if isinstance(value, np.ndarray):
        array = torch.from_numpy(np.ascontiguousarray(value).copy())
        return {"__ndarray__": array, "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return {"__npscalar__": value.item(), "dtype": str(value.dtype)}
    if isinstance(value, bool) or value is None or isinstance(value, (int, float, str)):
        return value
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: encode(v) for k, v in value.items()}}
    raise UnstorableValue(f"cannot store a value of type {type(value).__module__}.{type(value).__qualname__}")


def decode(data: Any) -> Any:
    """The inverse of :func:`encode` (a fresh copy each time, so a caller may edit it)."""
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict):
        return data
    if "__raised__" in data:
        return Raised(*data["__raised__"])
    if "__tensor__" in data:
        return data["__tensor__"].clone()
    if "__ndarray__" in data:
        return data["__ndarray__"].numpy().astype(data["dtype"], copy=True)
    if "__npscalar__" in data:
        return np.dtype(data["dtype"]).type(data["__npscalar__"])
    if "__tuple__" in data:
        return tuple(decode(v) for v in data["__tuple__"])
    if "__dict__" in data:
        return {k: decode(v) for k, v in data["__dict__"].items()}
    raise ValueError(f"unknown stored value with keys {sorted(data)}")


def _feed(digest: Any, value: Any, depth: int = 0) -> None:
    """Add a description of a test input to ``digest`` (tensors by their bytes)."""
    if depth > 20:
        digest.update(b"<deep>")
        return
    if isinstance(value, torch.nn.Module):
        digest.update(type(value).__qualname__.encode())
        for name, tensor in value.state_dict().items():
            digest.update(name.encode())
            _feed(digest, tensor, depth + 1)
        return
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        digest.update(f"T{tuple(t.shape)}{t.dtype}".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        return
    if isinstance(value, np.ndarray):
        digest.update(f"A{value.shape}{value.dtype}".encode() + np.ascontiguousarray(value).tobytes())
        return
    if isinstance(value, (tuple, list)):
        digest.update(f"L{len(value)}".encode())
        for v in value:
            _feed(digest, v, depth + 1)
        return
    if isinstance(value, dict):
        for k in sorted(value, key=repr):
            digest.update(repr(k).encode())
            _feed(digest, value[k], depth + 1)
        return
    if hasattr(value, "to_json"):  # a pandas table
        digest.update(value.to_json().encode())
        return
    if callable(value):  # a closure made by the case builder: its name stands for it
        digest.update(getattr(value, "__qualname__", type(value).__qualname__).encode())
        return
    if isinstance(value, float) and math.isnan(value):
        digest.update(b"nan")
        return
    digest.update(repr(value).encode())


def cases_digest(cases: Any) -> str:
    """A short digest of the test inputs, to tell when stored outputs belong to other inputs."""
    digest = hashlib.sha256()
    for case in cases:
        _feed(digest, (case.args, case.kwargs))
    return digest.hexdigest()[:16]


@functools.cache
def _load(lesson: str) -> dict:
    path = ANSWERS_DIR / f"{lesson}.pt"
    data = torch.load(path, weights_only=True)
    if data.get("format") != FORMAT:
        raise ValueError(f"{path.name}: stored answers of format {data.get('format')}, expected {FORMAT}")
    return data["exercises"]


def stored(lesson: str, name: str) -> dict | None:
    """The stored entry of exercise ``name`` of ``lesson`` ("lesson02"), or None when the store
    has none; raises OSError / ValueError when the file is missing or unreadable."""
    return _load(lesson).get(name)

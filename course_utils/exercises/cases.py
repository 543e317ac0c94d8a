"""One set of test inputs for an exercise: its own module, so the checker (:mod:`.core`) and the
stored answers (:mod:`.answers`) both use it without importing each other in a loop."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import torch

from ..attention.validation import items_of, plain_str, shown


def listed(value: object, name: str, expected: str) -> object:
    """``value``'s items as a plain list when it is a sequence (not a str or bytes), read once
    through :func:`validation.items_of`: one whose ``len()`` or iteration raises is a TypeError
    naming ``name``, what was ``expected`` and what arrived, instead of its own error (battery
    30), and one whose ``len()`` lies is read for what it holds. Anything else comes back as it
    is, for the caller's own type check to name. The exercises' one way to take a sequence."""
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return items_of(value, name, expected)
    return value


@dataclass
class Case:
    """One set of inputs for the learner's function."""

    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    label: str = ""

    def __post_init__(self) -> None:
        kind = type(self).__name__  # Case or ListCopyCase: messages name Class.field
        if not isinstance(self.args, tuple):
            raise TypeError(f"{kind}.args must be a tuple of the positional inputs, got "
                            f"{type(self.args).__name__} "
                            f"(write args=(x, y), or tuple(your_list))")
        if not isinstance(self.kwargs, dict) or not all(isinstance(k, str) for k in self.kwargs):
            raise TypeError(f"{kind}.kwargs must be a dict from argument names to inputs, "
                            f"got {type(self.kwargs).__name__}")
        if not isinstance(self.label, str):
            raise TypeError(f"{kind}.label must be a str, got {type(self.label).__name__} "
                            f"{shown(self.label)}")
        # a str subclass is kept as the plain str it holds: one whose __repr__ raises made the
        # Case unprintable, and its label is printed in feedback (battery 31)
        self.label = plain_str(self.label, f"{kind}.label")

    def fresh(self) -> tuple[tuple, dict]:
        """Copies of the inputs, so an in-place edit by one call cannot leak into the next (a
        tensor, an array, a torch module such as an ``nn.Linear``, a pandas table)."""
        def copy(x: Any) -> Any:
            if isinstance(x, torch.Tensor):
                return x.clone()
            if isinstance(x, np.ndarray):
                return x.copy()
            if isinstance(x, torch.nn.Module):
                return copy_module(x)
            if _is_pandas(x):
                return x.copy(deep=True)
            return x

        return tuple(copy(a) for a in self.args), {k: copy(v) for k, v in self.kwargs.items()}


def _is_pandas(x: Any) -> bool:
    """True for a pandas DataFrame or Series (pandas is not imported for this)."""
    pandas = sys.modules.get("pandas")
    return pandas is not None and isinstance(x, (pandas.DataFrame, pandas.Series))


def copy_module(module: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``module`` with its own parameters and buffers (``copy.deepcopy``)."""
    import copy

    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module must be a torch.nn.Module to copy, got {type(module).__name__} "
                        f"{shown(module, 60)}")

    return copy.deepcopy(module)


_T = TypeVar("_T")
_UNSEEN_SALT: list[int] = []  # set by autograde.salted_seeds while it builds unseen cases


def seen_or_unseen(seen: _T, *unseen: _T) -> _T:
    """A case builder's sizes: ``seen`` for the cases whose outputs ship with the package, and
    one of ``unseen`` (chosen by the grader's salt) while the grader builds its unseen cases.

    Drawing only new values under the salt let an answer learn an index map from the shipped
    outputs and replay it on unseen cases of the same shape (a cold trial's C18); with the
    sizes drawn too, only code that works for any size passes."""
    if not _UNSEEN_SALT or not unseen:
        return seen
    digest = hashlib.sha256(f"{_UNSEEN_SALT[-1]}:{seen!r}".encode()).digest()
    return unseen[int.from_bytes(digest[:8], "big") % len(unseen)]


"""The machinery behind every exercise check.

An :class:`Exercise` knows the reference solution, how to build test inputs, and a
list of :class:`Mistake` s: deliberately wrong implementations of the usual errors.
``exercise.check(learner_fn)`` runs the learner's function on the same inputs and
returns :class:`Feedback`:

* correct: matches the reference on every case;
* not attempted: the function still raises ``NotImplementedError``;
* a named mistake: the output matches one of the known-wrong implementations, so we
  can say *what* is wrong (softmax over the wrong axis, missing 1/sqrt(d_k), ...);
* wrong shape / wrong values / raised an error: a plain description and a hint.

A check never raises at the learner: every failure becomes a message.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

__all__ = ["Case", "Mistake", "Exercise", "Feedback", "outputs_close", "describe_value"]


@dataclass
class Case:
    """One set of inputs for the learner's function."""

    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    label: str = ""

    def fresh(self) -> tuple[tuple, dict]:
        """Copies of the inputs, so an in-place edit by one call cannot leak into the next."""
        def copy(x: Any) -> Any:
            if isinstance(x, torch.Tensor):
                return x.clone()
            if isinstance(x, np.ndarray):
                return x.copy()
            return x

        return tuple(copy(a) for a in self.args), {k: copy(v) for k, v in self.kwargs.items()}


@dataclass
class Mistake:
    """A common error, written as code so the check can recognise it by its output."""

    key: str
    message: str
    hint: str
    implementation: Callable[..., Any]


@dataclass
class Feedback:
    """The result of a check. ``passed`` is True only for a correct answer."""

    exercise: str
    status: str  # "correct" | "not attempted" | "mistake" | "wrong" | "error"
    message: str
    hint: str = ""
    mistake: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == "correct"

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        icon = {"correct": "✅", "not attempted": "✏️"}.get(self.status, "❌")
        text = f"{icon} {self.exercise}: {self.message}"
        if self.hint:
            text += f"\n   Hint: {self.hint}"
        return text

    __str__ = __repr__


def describe_value(x: Any) -> str:
    """A short description of a value for feedback messages."""
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)} ({x.dtype})"
    if isinstance(x, np.ndarray):
        return f"an array of shape {x.shape} ({x.dtype})"
    if isinstance(x, (tuple, list)):
        inner = ", ".join(describe_value(v) for v in x)
        return f"a {type(x).__name__} of {len(x)} ({inner})"
    return f"{type(x).__name__} {x!r}"


def _as_array(x: Any) -> np.ndarray | None:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().to(torch.float64).numpy()
    if isinstance(x, np.ndarray):
        return x.astype(np.float64)
    return None


def outputs_close(got: Any, expected: Any, *, rtol: float = 1e-5, atol: float = 1e-6) -> bool:
    """True when ``got`` matches ``expected``: same structure, same shapes, close values."""
    if isinstance(expected, (tuple, list)):
        return (
            isinstance(got, (tuple, list))
            and len(got) == len(expected)
            and all(outputs_close(g, e, rtol=rtol, atol=atol) for g, e in zip(got, expected, strict=False))
        )
    exp_arr = _as_array(expected)
    if exp_arr is not None:
        got_arr = _as_array(got)
        if got_arr is None or got_arr.shape != exp_arr.shape:
            return False
        return bool(np.allclose(got_arr, exp_arr, rtol=rtol, atol=atol, equal_nan=True))
    if isinstance(expected, (bool, str)) or expected is None:
        return got == expected
    if isinstance(expected, (int, float)):
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, np.ndarray) and got.size == 1:
            got = got.item()
        if not isinstance(got, (int, float, np.integer, np.floating)) or isinstance(got, bool):
            return False
        return math.isclose(float(got), float(expected), rel_tol=rtol, abs_tol=atol)
    return got == expected


def _call(fn: Callable[..., Any], case: Case) -> Any:
    args, kwargs = case.fresh()
    return fn(*args, **kwargs)


def _shape_of(x: Any) -> tuple | None:
    arr = _as_array(x)
    return None if arr is None else arr.shape


@dataclass
class Exercise:
    """A learner-facing exercise with a diagnosing check.

    Args:
        title: shown in feedback, e.g. "Exercise 2.1: attention weights".
        reference: the correct implementation.
        make_cases: builds the inputs (deterministically) the check runs on.
        mistakes: known-wrong implementations, tried in order.
        hint: a general hint for answers that match no known mistake.
        rtol, atol: tolerances for comparing outputs.
    """

    title: str
    reference: Callable[..., Any]
    make_cases: Callable[[], Sequence[Case]]
    mistakes: list[Mistake] = field(default_factory=list)
    hint: str = ""
    rtol: float = 1e-5
    atol: float = 1e-6

    def _close(self, got: Any, expected: Any) -> bool:
        return outputs_close(got, expected, rtol=self.rtol, atol=self.atol)

    def check(self, fn: Callable[..., Any]) -> Feedback:
        """Grade ``fn``; never raises."""
        if not callable(fn):
            return Feedback(self.title, "error", f"expected a function, got {describe_value(fn)}",
                            "pass the function itself, without calling it: check(my_fn)")
        cases = list(self.make_cases())
        outputs = []
        for case in cases:
            args, kwargs = case.fresh()
            try:
                outputs.append(fn(*args, **kwargs))
            except NotImplementedError:
                return Feedback(self.title, "not attempted",
                                "not attempted yet: replace `raise NotImplementedError` with "
                                "your code, then run this cell again.", self.hint)
            except Exception as exc:  # the learner's bug, reported without a traceback
                where = f" on {case.label}" if case.label else ""
                return Feedback(self.title, "error",
                                f"your function raised {type(exc).__name__}{where}: {exc}",
                                self.hint)
        expected = [_call(self.reference, c) for c in cases]
        if all(self._close(g, e) for g, e in zip(outputs, expected, strict=False)):
            return Feedback(self.title, "correct", f"correct on all {len(cases)} test cases.")
        for mistake in self.mistakes:
            try:
                wrong = [_call(mistake.implementation, c) for c in cases]
            except Exception:  # a mistake that cannot run on these inputs cannot match
                continue
            if all(self._close(g, w) for g, w in zip(outputs, wrong, strict=False)):
                return Feedback(self.title, "mistake", mistake.message, mistake.hint,
                                mistake=mistake.key)
        return self._generic_feedback(cases, outputs, expected)

    def _generic_feedback(self, cases, outputs, expected) -> Feedback:
        for case, got, exp in zip(cases, outputs, expected, strict=False):
            if self._close(got, exp):
                continue
            label = f" on {case.label}" if case.label else ""
            exp_shape, got_shape = _shape_of(exp), _shape_of(got)
            if exp_shape is not None and got_shape != exp_shape:
                return Feedback(self.title, "wrong",
                                f"wrong shape{label}: expected {exp_shape}, got "
                                f"{describe_value(got)}.", self.hint)
            if exp_shape is not None:
                diff = np.abs(_as_array(got) - _as_array(exp))
                worst = np.unravel_index(np.nanargmax(diff), diff.shape)
                return Feedback(self.title, "wrong",
                                f"right shape {exp_shape} but wrong values{label}: the largest "
                                f"difference is {diff[worst]:.4g} at index {tuple(map(int, worst))}.",
                                self.hint)
            return Feedback(self.title, "wrong",
                            f"wrong answer{label}: expected {describe_value(exp)}, got "
                            f"{describe_value(got)}.", self.hint)
        return Feedback(self.title, "wrong", "the answer does not match.", self.hint)

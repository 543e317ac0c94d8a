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
        try:
            return self._grade(cases, outputs, expected)
        except Exception as exc:  # an answer too odd to compare (sparse tensor, ...)
            return Feedback(self.title, "wrong",
                            f"could not compare your answer with the expected one: you returned "
                            f"{describe_value(outputs[0])} ({type(exc).__name__}: {exc}).", self.hint)

    def _grade(self, cases, outputs, expected) -> Feedback:
        if all(self._close(g, e) for g, e in zip(outputs, expected, strict=True)):
            n = len(cases)
            return Feedback(self.title, "correct",
                            "correct on the test case." if n == 1 else f"correct on all {n} test cases.")
        for mistake in self.mistakes:
            try:
                wrong = [_call(mistake.implementation, c) for c in cases]
            except Exception:  # a mistake that cannot run on these inputs cannot match
                continue
            if all(self._close(g, w) for g, w in zip(outputs, wrong, strict=True)):
                return Feedback(self.title, "mistake", mistake.message, mistake.hint,
                                mistake=mistake.key)
        return self._generic_feedback(cases, outputs, expected)

    def _generic_feedback(self, cases, outputs, expected) -> Feedback:
        for case, got, exp in zip(cases, outputs, expected, strict=False):
            if self._close(got, exp):
                continue
            label = f" on {case.label}" if case.label else ""
            feedback = self._describe_difference(got, exp, label)
            if feedback is not None:
                return feedback
        return Feedback(self.title, "wrong", "the answer does not match.", self.hint)

    def _describe_difference(self, got: Any, exp: Any, label: str) -> Feedback | None:
        """Say in words how ``got`` differs from ``exp`` (never raises)."""
        wrong = lambda message: Feedback(self.title, "wrong", message, self.hint)  # noqa: E731
        if got is None and exp is not None:
            return wrong(f"your function returned None{label}: did you forget `return`?")
        if (isinstance(exp, (tuple, list)) and isinstance(got, (tuple, list))
                and len(got) == len(exp)):
            for i, (g, e) in enumerate(zip(got, exp, strict=True)):
                if not outputs_close(g, e, rtol=self.rtol, atol=self.atol):
                    inner = self._describe_difference(g, e, f"{label}, in element {i} of the "
                                                      f"{type(got).__name__} you returned")
                    if inner is not None:
                        return inner
        exp_arr, got_arr = _as_array(exp), _as_array(got)
        if exp_arr is not None and isinstance(got, (tuple, list)) and len(got) > 0:
            try:
                as_tensor = torch.as_tensor(got, dtype=torch.float64)
            except (TypeError, ValueError, RuntimeError):
                as_tensor = None
            if as_tensor is not None and outputs_close(as_tensor, exp, rtol=self.rtol, atol=self.atol):
                return wrong(f"the values are right{label}, but you returned a {type(got).__name__}: "
                             f"return a tensor, e.g. torch.tensor(...).")
            if any(outputs_close(g, exp, rtol=self.rtol, atol=self.atol) for g in got):
                return wrong(f"you returned {describe_value(got)}{label}; one of them is right: "
                             "return only that one.")
            return wrong(f"expected one {describe_value(exp)}{label}, but you returned "
                         f"{describe_value(got)}.")
        if exp_arr is not None and got_arr is not None and got_arr.shape == exp_arr.shape:
            finite = np.isfinite(got_arr)
            if not finite.all():
                bad = np.argwhere(~finite)[0]
                kind = "NaN" if np.isnan(got_arr[tuple(bad)]) else "inf"
                return wrong(f"your output contains {kind}{label} ({int((~finite).sum())} of "
                             f"{got_arr.size} entries, first at index {tuple(map(int, bad))}). "
                             "NaN usually comes from 0 * inf, inf - inf, or exp() overflowing: "
                             "shift by the maximum of each row before exp, and block entries "
                             "with masked_fill(..., float('-inf')) rather than multiplying.")
            diff = np.abs(got_arr - exp_arr)
            worst = np.unravel_index(np.argmax(diff), diff.shape)
            return wrong(f"right shape {exp_arr.shape} but wrong values{label}: the largest "
                         f"difference is {diff[worst]:.4g} at index {tuple(map(int, worst))}.")
        if exp_arr is not None:
            return wrong(f"wrong shape{label}: expected {exp_arr.shape}, got {describe_value(got)}.")
        return wrong(f"wrong answer{label}: expected {describe_value(exp)}, got {describe_value(got)}.")

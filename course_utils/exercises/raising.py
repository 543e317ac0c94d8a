"""Checks that also name answers that *raise*: the shared base classes of the lesson modules.

* :class:`RaisingMistake` and :class:`DiagnosingExercise`: a slip recognised by the exception
  its stored outcome raised (type and message, or a pattern).
* :class:`DiagnosesRaisingAnswers`: the answer is run again under :class:`RecordFailure`,
  which remembers the tensor operation that raised and its arguments' shapes, and
  :meth:`~DiagnosesRaisingAnswers._key_for` says which slip that is (a builtin that refused
  its arguments before any operation ran: :class:`RecordRefusedCall`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

from ..attention.validation import check_callable, check_distinct, check_flag, items_of, plain_str, shown
from .answers import Raised, _check_case, same_raise
from .cases import listed
from .core import Case, Exercise, Feedback, Mistake, _Deadline, _safe_str, _where_bound

__all__ = ["RaisingMistake", "DiagnosingExercise", "RecordFailure", "RecordRefusedCall", "requested_shape",
           "failed_operation", "DiagnosesRaisingAnswers"]


@dataclass
class RaisingMistake(Mistake):
    """A slip that makes the function raise instead of returning a wrong value. It is named
    when the learner's function raises the same exception (type and message) on the first
    test case it fails on; with ``loose=True`` the same exception type is enough, and with a
    ``pattern`` the same type with that text in its message (another function, same slip).

    ``pattern`` is plain text, found in the message as a substring (``pattern in message``), not a
    regular expression: ``"["`` or ``"(*"`` match themselves, so no pattern is invalid and there is
    nothing to compile at construction (the messages it matches, such as ``"values to unpack"`` or
    ``"subscripts in the equation"``, are quoted as they read)."""

    loose: bool = False
    pattern: str = ""  # also named when the error has the same type and contains this text

    def __post_init__(self) -> None:
        super().__post_init__()
        check_flag(self.loose, "RaisingMistake.loose")
        if not isinstance(self.pattern, str):
            raise TypeError(f"RaisingMistake.pattern must be a str (\"\" for none), got "
                            f"{type(self.pattern).__name__} {shown(self.pattern, 60)}")
        self.pattern = plain_str(self.pattern, "RaisingMistake.pattern")  # (a subclass: the str it holds)


def _raised(fn: Callable[..., Any], case: Case) -> BaseException | None:
    args, kwargs = case.fresh()
    try:
        with warnings.catch_warnings(), _Deadline():
            warnings.simplefilter("ignore")  # e.g. torch's warning about x.T on 3-D tensors
            fn(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - any error is information here, sys.exit() too
        return exc
    return None


@dataclass
class DiagnosingExercise(Exercise):
    """An :class:`Exercise` that also names slips that raise (:class:`RaisingMistake`) and,
    with ``numpy_output=True``, an answer that returns a torch tensor instead of an array."""

    numpy_output: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_flag(self.numpy_output, "DiagnosingExercise.numpy_output")

    def check(self, fn: Callable[..., Any]) -> Feedback:
        """Grade ``fn``; never raises."""
        feedback = super().check(fn)
        if feedback.stopped:  # interrupted or out of time: never run it again
            return feedback
        named = None  # (a Feedback is falsy unless it passed, so compare with None)
        try:
            if feedback.status == "error":
                named = self._name_raising_slip(fn)
            elif feedback.passed and self.numpy_output:
                named = self._name_tensor_output(fn)
        except BaseException:  # noqa: BLE001 - the plain feedback is still right
            named = None
        return feedback if named is None else named

    def _name_raising_slip(self, fn: Callable[..., Any]) -> Feedback | None:
        cases = self.cases()
        for index, case in enumerate(cases):
            exc = _raised(fn, case)
            if exc is None:
                continue
            kind, text = type(exc).__name__, _safe_str(exc)
            for loose in (False, True):
                for mistake in self.mistakes:
                    if not isinstance(mistake, RaisingMistake) or mistake.loose != loose:
                        continue
                    outcomes = self._mistake_outputs(mistake, cases)
                    theirs = None if outcomes is None else outcomes[index]
                    same = isinstance(theirs, Raised) and same_raise(theirs, kind, theirs.message, loose=True)
                    if same and (same_raise(theirs, kind, text, loose=loose)
                                 or (mistake.pattern and mistake.pattern in text)):
                        where = f" on {case.label}" if case.label else ""
                        return Feedback(self.title, "mistake",
                                        f"{mistake.message} (Your function raised {kind}{where}.)",
                                        mistake.hint, mistake=mistake.key)
            return None
        return None

    def _name_tensor_output(self, fn: Callable[..., Any]) -> Feedback | None:
        args, kwargs = self.cases()[0].fresh()
        if isinstance(fn(*args, **kwargs), torch.Tensor):
            mistake = next(m for m in self.mistakes if m.key == "returned_tensor")
            return Feedback(self.title, "mistake", mistake.message, mistake.hint, mistake=mistake.key)
        return None


class RecordFailure(TorchFunctionMode):
    """Remembers the first tensor operation that raised, with its arguments' shapes."""

    def __init__(self) -> None:
        super().__init__()
        self.failed: tuple[str, list] | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        try:
            return func(*args, **(kwargs or {}))
        except Exception:
            if self.failed is None:
                name = getattr(func, "__name__", str(func)).strip("_")
                self.failed = (name, [tuple(a.shape) if isinstance(a, Tensor) else a for a in args])
            raise


def requested_shape(args: list) -> tuple:
    """The target shape of ``t.view(*args[1:])``, whether given as ints or as one tuple.
    ``args[0]`` is the tensor or its shape (as :class:`RecordFailure` records it); ``()`` when no
    size follows (``t.view()``, which torch refuses). A first entry that is no tensor or shape is
    a TypeError naming ``args`` (it was read as ``()``). The sizes are returned as the failed call
    gave them, a float too (``d / h``): the checks read such a slip from them, so never raise."""
    if isinstance(args, (list, tuple)):
        args = listed(args, "args", "the arguments of a view or reshape call (a list or tuple)")
    if not isinstance(args, (list, tuple)) or not args:
        raise TypeError(f"args: expected the arguments of a view or reshape call (a list or tuple: the "
                        f"tensor, then the shape), got {type(args).__name__} {shown(args, 60)}")
    if not (isinstance(args[0], torch.Tensor) or _is_shape(args[0])):
        raise TypeError(f"args: expected the tensor (or its shape, a tuple of ints) first, then the shape, "
                        f"got {type(args[0]).__name__} {shown(args[0], 60)} first")
    rest = args[1:]
    if len(rest) == 1 and isinstance(rest[0], (tuple, list, torch.Size)):
        return tuple(rest[0])
    return tuple(rest)


def _is_shape(value: object) -> bool:
    return isinstance(value, (tuple, list, torch.Size)) and all(
        isinstance(n, int) and not isinstance(n, bool) for n in value)


def failed_operation(fn, case: Case) -> tuple[str, list] | None:
    """Run ``fn`` on ``case`` again and return the tensor operation that raised, if any."""
    check_callable(fn, "fn", "the answer (a function)")
    _check_case(case, "case")
    args, kwargs = case.fresh()
    recorder = RecordFailure()
    try:
        with recorder, _Deadline():
            fn(*args, **kwargs)
    except BaseException:  # the learner's error again, now recorded
        pass
    return recorder.failed


def _named(exercise: Exercise, key: str) -> Feedback:
    m = next(m for m in exercise.mistakes if m.key == key)
    return Feedback(exercise.title, "mistake", m.message, m.hint, mistake=m.key)


class RecordRefusedCall:
    """Remembers the first call the answer made to one of torch's builtins ``names`` (such as
    ``"cat"``) that refused its arguments with a TypeError, as ``(name, args, kwargs)`` given.

    torch reads a builtin's arguments before any TorchFunctionMode sees the call, so
    :class:`RecordFailure` never sees such a call, and torch's message for it differs from
    version to version (torch.cat(q, k, v): "cat() received an invalid combination of
    arguments" in 2.5.1, "takes from 1 to 2 positional arguments" in 2.13). While active, each
    place torch binds the builtin (``torch.cat``) holds a wrapper that records the call."""

    def __init__(self, names: tuple[str, ...]) -> None:
        expected = "a tuple of the names of torch's builtins (such as 'cat')"
        # its items taken once (items_of: a len() that raises or lies is named, not met later), each
        # the plain str it holds (plain_str: a str subclass's own __str__ or __eq__ is never called)
        items = items_of(names, "names", expected) if isinstance(names, tuple | list) else None
        if items is None or not all(isinstance(n, str) for n in items):
            raise TypeError(f"names must be {expected}, got {type(names).__name__} {shown(names, 60)}")
        names = tuple(plain_str(n, "names", expected) for n in items)
        unknown = [n for n in names if getattr(torch, n, None) is None]
        if unknown:
            raise ValueError(f"names: torch has no function {shown(unknown[0])} (names must be torch "
                             f"builtins such as 'cat', 'stack'), got {shown(names, 80)}")
        self._names = tuple(check_distinct(names, "names", "torch builtins' names"))
        self._bound: list[tuple[Any, str, Any]] = []
        self.refused: tuple[str, tuple, dict] | None = None

    def _wrapped(self, name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def refusing(*args: Any, **kwargs: Any) -> Any:
            try:
                return f(*args, **kwargs)
            except TypeError:
                if self.refused is None:
                    self.refused = (name, args, kwargs)
                raise
        return refusing

    def __enter__(self) -> RecordRefusedCall:
        for name in self._names:
            f = getattr(torch, name, None)
            if f is None or hasattr(f, "__code__"):  # (not a builtin: a TorchFunctionMode sees it)
                continue
            for module, attr in _where_bound(f):
                self._bound.append((module, attr, f))
                setattr(module, attr, self._wrapped(name, f))
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for module, attr, f in reversed(self._bound):
            setattr(module, attr, f)
        self._bound.clear()


class DiagnosesRaisingAnswers(Exercise):
    """An exercise whose check also names an answer that *raises*: it runs the answer again,
    case by case under :class:`RecordFailure`, up to the first case that raises, and asks
    :meth:`_key_for` which slip that failure is; a call to one of torch's builtins in
    :attr:`refusable` that refused its arguments goes to :meth:`_key_for_refused`."""

    refusable: tuple[str, ...] = ()  # torch builtins (names) whose refused calls are recorded

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.refusable, tuple) or not all(isinstance(n, str) for n in self.refusable):
            raise TypeError(f"{type(self).__name__}.refusable must be a tuple of torch builtin names, got "
                            f"{type(self.refusable).__name__} {shown(self.refusable, 60)}")

    def check(self, fn) -> Feedback:
        feedback = super().check(fn)
        if feedback.status != "error" or feedback.stopped:
            return feedback
        for case in self.cases():
            args, kwargs = case.fresh()
            recorder, refused, error = RecordFailure(), RecordRefusedCall(self.refusable), None
            try:
                with refused, recorder, _Deadline():
                    fn(*args, **kwargs)
            except BaseException as exc:  # the same error again: now we know which operation raised
                error = exc
            if error is not None:
                break
        key = self._key_for(recorder.failed)
        if key is None and refused.refused is not None:
            key = self._key_for_refused(*refused.refused)
        if key is None and error is not None:
            key = self._key_for_error(error)  # e.g. raised while torch parsed the arguments
        if key is None:
            return feedback
        return self._mistake_feedback(key)

    @staticmethod
    def _key_for(failed: tuple[str, list] | None) -> str | None:
        """The key of the Mistake that ``failed`` (operation name, its args) shows, or None."""
        return None

    @staticmethod
    def _key_for_refused(name: str, args: tuple, kwargs: dict) -> str | None:
        """The key of the Mistake that a refused call ``name(*args, **kwargs)`` to one of the
        :attr:`refusable` builtins shows, or None."""
        return None

    @staticmethod
    def _key_for_error(error: BaseException) -> str | None:
        """The key of the Mistake that ``error`` itself shows, when :meth:`_key_for` names none:
        torch rejects some arguments (a list of lists, a float count) while parsing them."""
        return None

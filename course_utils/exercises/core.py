"""The machinery behind every exercise check.

An :class:`Exercise` knows the reference solution, how to build test inputs, and a
list of :class:`Mistake` s: deliberately wrong implementations of the usual errors.
``exercise.check(learner_fn)`` runs the learner's function on the same inputs and
returns :class:`Feedback`:

* correct: matches the reference on every case;
* not attempted: the function is still the stub, whose own body raises a bare
  ``NotImplementedError`` (one raised deeper, by real code, is reported as an error);
* a named mistake: the output matches one of the known-wrong implementations, so we
  can say *what* is wrong (softmax over the wrong axis, missing 1/sqrt(d_k), ...);
* wrong shape / wrong values / raised an error: a plain description and a hint;
* used the reference: the function called the exercise's own reference code, or the
  package's (or torch's) ready-made implementation of the same thing, which the
  exercise asks you to write (``Exercise.forbidden`` and :data:`LIBRARY_TWINS`), under any
  alias torch gives it (``Tensor.softmax``, ``torch.special.softmax``, ``torch.ops.aten.*``: by
  name, the names the outside grader refuses in an answer's code), a torch module of a twin's
  name (``nn.MultiheadAttention``), or a copy of a library twin's code (``__code__.replace``).

A check never raises at the learner: every failure becomes a message, even
``sys.exit()`` or ``KeyboardInterrupt`` from inside the learner's function. For
autograding, :meth:`Feedback.assert_passed` prints the same feedback and raises
``AssertionError`` carrying it when the answer is not correct.

What a check guards (one table each): the names its comparison and the reference code look
up (:func:`_guarded_namespaces`) and the process settings of :data:`_SETTINGS`. Around each
call of the answer they are copied, and afterwards put back and named ("your function
replaced torch.allclose ..."). The names are also compared with their originals, captured
when ``course_utils.exercises`` was imported (or when the first check saw a module imported
later), at the start and at the end of every check: a patch made before the check (by a
cell, or a thread an earlier cell started) is put back and named as the kernel's, not the
answer's; one that appears while the check compares makes the check answer "cannot be
trusted, run it again" instead of a verdict. A change seen right after the answer's call is
blamed on the answer unless a thread that was alive before the check is still running
notebook code (then on the kernel). Limits: a thread that patches and restores a name
between two of these comparisons, or patches after the last one, is not seen; a module
imported and patched before any check ran is taken as it was found; nothing here resists
code that reaches the check's own frames, its functions' closures or defaults, ``ctypes`` or
NumPy's and torch's private modules. The copies a check puts back and compares with (this
module's globals as imported, :data:`_OWN_GLOBALS`, and the originals, :data:`_ORIGINALS`) are
read-only views an answer cannot write; one that rebinds those names, or changes what they hold
by other means (``gc``), is seen, and from then on every check in the kernel answers that the
kernel cannot be trusted (restart it) instead of giving a verdict (battery 20).

A check says "correct" only for an answer that did not replay the shipped stored answers
(``answers/lessonNN.pt``, the outputs every check compares with): when the kernel's input
history (IPython's ``In``), the answer's own code or the functions, defaults and closure it
reaches name the store's reader (``answers.stored`` / ``decode``, ``read_store``) or one of its
files, the check answers "not graded" instead, by the grader's own rule
(:func:`.sandbox.store_reads`). What it cannot see: a read by other means (``torch.load`` of
a path built at run time, a copy of the file, a script run outside the kernel, a kernel whose
history was cleared), and outside IPython a read in code whose source is gone. The outside
grader (:mod:`.autograde`), which runs each answer in a process of its own with the store
out of reach, refuses such code (and, given a salt, grades on cases the store does not
hold): it is the trusted one.
"""

from __future__ import annotations

import _signal
import builtins
import copyreg
import gc as _gc
import importlib
import itertools
import math
import operator
import os
import re
import signal
import sys
import textwrap
import threading
import time
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..attention.validation import check_distinct, finite, is_real, plain_str, say, shown
from . import answers as _answers
from .cases import Case, _is_pandas

_OWN_MISSING = object()  # (a name absent from a namespace)


def _same_items(mapping: Mapping[Any, Any], items: tuple[tuple[Any, Any], ...],
                all_: Callable[..., bool] = all, map_: Callable[..., Any] = map,
                len_: Callable[[Any], int] = len, is_: Callable[[Any, Any], bool] = operator.is_,
                repeat: Callable[..., Any] = itertools.repeat,
                key: Callable[[Any], Any] = operator.itemgetter(0),
                value: Callable[[Any], Any] = operator.itemgetter(1), missing: Any = _OWN_MISSING) -> bool:
    """Whether ``mapping`` holds exactly ``items``, the same objects (compared by identity, in C;
    it looks up no global and no built-in)."""
    return len_(mapping) == len_(items) and all_(
        map_(is_, map_(mapping.get, map_(key, items), repeat(missing)), map_(value, items)))


def _filled_once() -> tuple[Mapping[str, Any], Callable[[Mapping[str, Any]], None],
                            Callable[[], tuple[tuple[str, Any], ...]], Callable[[], bool]]:
    """``(view, fill, items, intact)`` over a dict only their closure holds: ``fill(names)`` copies
    ``names`` in the first time it is called and never again; ``view`` is read-only; ``items()``
    the copy as an immutable tuple (what to put back); ``intact()`` whether the dict still holds
    exactly that tuple (False once something reached it by other means, ``gc`` say)."""
    held: dict[str, Any] = {}
    snapshot: tuple[tuple[str, Any], ...] = ()

    def fill(names: Mapping[str, Any]) -> None:
        nonlocal snapshot
        if not snapshot:
            snapshot = tuple(names.items())
            held.update(snapshot)

    def items() -> tuple[tuple[str, Any], ...]:
        return snapshot

    def intact(same: Callable[..., bool] = _same_items) -> bool:
        return same(held, snapshot)

    return types.MappingProxyType(held), fill, items, intact


def _one_way_flag() -> tuple[Callable[[str], None], Callable[[], tuple[str, ...]]]:
    """``(mark, marks)``: ``mark(name)`` records that a check saw its own machinery tampered with
    (``name``), ``marks()`` the names recorded, for good: the list lives in their closure, not in
    a module attribute an answer could reset, and nothing empties it but a new kernel."""
    seen: list[str] = []

    def mark(name: str) -> None:
        if name not in seen:
            seen.append(name)

    def marks(as_tuple: Callable[[Any], tuple[str, ...]] = tuple) -> tuple[str, ...]:
        return as_tuple(seen)

    return mark, marks


# This module's own globals as imported (filled by the package's first _capture_originals, once
# sandbox has set GRADING_NOTE and STORE_READS): the check's put-back looks its helpers up here
# (``_put_back``, ``_same_method``, ``outputs_close``, ...), so an answer that rebinds one would
# make every later comparison and put-back its own (battery 16). A read-only view of a dict only
# _fill_own_globals' closure holds, whose items _put_back_own binds at import: an answer can
# neither write these golden copies nor, by rebinding the name, change what is put back (battery 20).
_OWN_GLOBALS, _fill_own_globals, _own_items, _own_intact = _filled_once()
_OWN_LIVE = globals()
# Once an answer (or a cell) rebinds one of the names that hold or use the golden copies, no later
# check in the kernel gives a verdict: each says the kernel cannot be trusted (restart it).
_mark_tampered, _tampered = _one_way_flag()
# (the names that hold the golden copies or the flag; the helpers that use them, `_put_back`, ..., are
# put back and named like any other: battery 16)
_MACHINERY = frozenset({"_OWN_GLOBALS", "_fill_own_globals", "_own_items", "_own_intact", "_OWN_LIVE",
                        "_OWN_MISSING", "_mark_tampered", "_tampered", "_MACHINERY", "_ORIGINALS",
                        "_remember_original", "_originals_intact", "_VOLATILE", "_remember_built",
                        "_built_fields", "_SETTABLE_FIELDS", "_grading", "_grading_with", "_GRADER_KEYS"})


def _put_back_own(live: dict[str, Any] = _OWN_LIVE, items: Callable[[], Any] = _own_items,
                  get: Callable[..., Any] = _OWN_LIVE.get, is_: Callable[[Any, Any], bool] = operator.is_,
                  missing: Any = _OWN_MISSING, machinery: frozenset[str] = _MACHINERY,
                  mark: Callable[[str], None] = _mark_tampered,
                  intact: Callable[[], bool] = _own_intact) -> list[str]:
    """Put back each of this module's own globals an answer rebound or deleted, first of all
    (before any helper is looked up), from the immutable copy of :data:`_OWN_GLOBALS`; the names
    ("core._same_method", ...). One that holds the golden copies (:data:`_MACHINERY`), or those
    copies changed, is also marked, for good (:func:`_one_way_flag`).
    Everything it uses is bound here, at import, as its defaults: it looks up no global and no
    built-in."""
    if not intact():  # (the read-only view's dict reached by other means: the tuple is put back)
        mark("core._OWN_GLOBALS")
    changed = []
    for key, value in items():
        if not is_(get(key, missing), value):
            live[key] = value
            changed.append("core." + key)
            if key in machinery:
                mark("core." + key)
    return changed


__all__ = ["Case", "Mistake", "Exercise", "Feedback", "LIBRARY_TWINS", "outputs_close", "describe_value"]

# Ready-made implementations of what an exercise asks for, by check name. While the
# learner's function runs, a call to any of these (or to the exercise's reference and
# the private functions of its lesson module) is recorded, and the check names it instead
# of passing the answer. Dotted names resolve lazily; a test keeps every key current.
LIBRARY_TWINS: dict[str, tuple[str, ...]] = {
    "lesson01.check_attend": (
        "course_utils.attention.mha.scaled_dot_product_attention",
        "torch.nn.functional.scaled_dot_product_attention",
    ),
    "lesson01.check_head_scores": (
        "course_utils.attention.mha.MultiHeadAttention.project_qkv",
        "course_utils.attention.mha.MultiHeadAttention.forward",
        "course_utils.attention.mha.scaled_dot_product_attention",
        "torch.nn.functional.scaled_dot_product_attention",
    ),
    "lesson01.check_relation_accuracy": (
        "course_utils.tasks.two_relations.split_pair_class",
        "course_utils.tasks.two_relations.evaluate",
    ),
    "lesson02.check_softmax_rows": (  # a numpy exercise: its Library use line rules these out
        "torch.softmax",
        "torch.nn.functional.softmax",
    ),
    "lesson02.check_attention_weights": (
        "course_utils.attention.mha.scaled_dot_product_attention",
        "torch.nn.functional.scaled_dot_product_attention",
    ),
    "lesson02.check_causal_attention_weights": (
        "course_utils.attention.mha.scaled_dot_product_attention",
        "torch.nn.functional.scaled_dot_product_attention",
    ),
    "lesson02.check_single_head_attention": (
        "course_utils.attention.mha.scaled_dot_product_attention",
        "course_utils.attention.mha.MultiHeadAttention.forward",
        "torch.nn.functional.scaled_dot_product_attention",
    ),
    "lesson03.check_merge_heads": ("course_utils.attention.mha.MultiHeadAttention.merge_heads",),
    "lesson03.check_parameter_count": (
        "course_utils.attention.shapes.mha_parameter_count",
        "course_utils.attention.shapes.count_parameters",
        "course_utils.attention.shapes.parameter_table",
    ),
    "lesson03.check_score_macs": (
        "course_utils.attention.shapes.mha_macs",
        "course_utils.attention.shapes.measured_macs",
        "course_utils.attention.shapes.cost_table",
    ),
    "lesson04.check_stack_head_weights": (
        "course_utils.attention.naive_mha.stack_head_weights",
        "course_utils.attention.naive_mha.naive_from_batched",
    ),
    "lesson04.check_mha_forward": (
        "course_utils.attention.masks.causal_mask",  # (causal=True: the mask is the learner's to build)
        "course_utils.attention.mha.scaled_dot_product_attention",
        "course_utils.attention.mha.MultiHeadAttention.forward",
        "torch.nn.functional.scaled_dot_product_attention",
        "torch.nn.functional.multi_head_attention_forward",
        "torch.nn.MultiheadAttention.forward",
    ),
    "lesson04.check_masks_for_torch": (
        "course_utils.attention.masks.to_torch_attn_mask",
        "course_utils.attention.masks.to_torch_key_padding_mask",
    ),
    "lesson05.check_previous_token_score": ("course_utils.interp.scores.previous_token_score",),
    "lesson05.check_induction_score": ("course_utils.interp.scores.induction_score",),
    "lesson06.check_mean_ablation": ("course_utils.interp.ablation.ablated_logits",
                                     "course_utils.interp.ablation.mean_head_outputs"),
    "lesson06.check_gate_importance": ("course_utils.interp.ablation.head_importance",),
    "lesson07.check_cache_bytes": ("course_utils.attention.gqa.kv_cache_bytes",),
    "lesson07.check_decode_step": ("course_utils.attention.gqa.grouped_query_attention",),
}

# Exits that are not ``Exception`` s but must still end in feedback, not escape the check.
_EXITS = (SystemExit, KeyboardInterrupt, GeneratorExit)

# Seconds one call of the learner's function may take while learning; the test inputs are tiny,
# so a right answer takes milliseconds even on a busy laptop. Override with COURSE_CHECK_TIMEOUT.
CALL_TIME_LIMIT = 10.0


class TimeLimitExceeded(BaseException):
    """Raised inside the learner's function when one call runs past :data:`CALL_TIME_LIMIT`
    (a ``BaseException``, so an answer's own ``except Exception`` does not swallow it)."""


IMPORT_GRACE = 30.0  # seconds the time limit waits, in all, for an import the answer started


def _inside_import(frame: Any, boundary: Any) -> bool:
    """True when ``frame`` (where the alarm struck) runs inside an ``import`` below ``boundary``."""
    while frame is not None and frame is not boundary:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


_ENVIRON = os.environ  # (an answer may replace os.environ: the check reads the one of import time)


def _time_limit() -> float:
    """The time limit of one call: COURSE_CHECK_TIMEOUT, read once per check before the answer
    runs (:func:`_never_raises`), so that an answer changing it changes nothing."""
    if _CHECK_LIMITS:
        return _CHECK_LIMITS[-1]
    try:
        seconds = float(_ENVIRON.get("COURSE_CHECK_TIMEOUT", CALL_TIME_LIMIT))
    except ValueError:
        return CALL_TIME_LIMIT
    return seconds if math.isfinite(seconds) and seconds > 0 else CALL_TIME_LIMIT


def _limit_setting_note(seconds: float) -> str:
    """For the message of a stop after ``seconds``: a note naming COURSE_CHECK_TIMEOUT when it is set
    to what is not a number of seconds above 0 (``2s``, ``abc``), which :func:`_time_limit` replaces
    with the default; "" when it is unset or valid, or the limit was not the default."""
    raw = _ENVIRON.get("COURSE_CHECK_TIMEOUT")
    if raw is None or seconds != CALL_TIME_LIMIT:
        return ""
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if math.isfinite(seconds) and seconds > 0:
        return ""
    return (f" (the default: COURSE_CHECK_TIMEOUT={shown(raw, 40)} is not a number of seconds above 0, "
            "such as 2, so it was not used)")


_CHECK_LIMITS: list[float] = []  # the time limit of each check running now (innermost last)
# The signal the time limit's watchdog sends the main thread to wake a C call (time.sleep) the
# alarm no longer reaches: SIGURG, whose default action is to ignore it, so one that arrives late
# does nothing; the time limit's handler is set for it while an answer runs.
_KICK = getattr(signal, "SIGURG", None) if hasattr(signal, "pthread_kill") else None
_LIMIT_SIGNALS = {signal.SIGALRM, _KICK} - {None} if hasattr(signal, "SIGALRM") else set()


class _Deadline:
    """While active, a call that runs past the time limit raises :class:`TimeLimitExceeded`
    where it is (SIGALRM: Unix, main thread; elsewhere no limit, and the check still runs).

    An answer that catches the exception in a loop, switches the alarm off, ignores or blocks
    SIGALRM, or catches it in a recursion that starts again from every ``except`` is stopped
    anyway, without killing the kernel: from then on the alarm repeats every few milliseconds,
    puts back its handler and unblocks SIGALRM when the answer changed them (a watchdog thread
    asks the main thread to, through ``Py_AddPendingCall``, and wakes a C call such as
    ``time.sleep`` that the alarm no longer reaches with :data:`_KICK`, SIGURG, whose handler is
    the limit's own while the answer runs and raises as the alarm would), marks every frame of the running
    answer with a trace function that raises at its next line, so an ``except`` clause that
    caught the first exception raises again, and gives every function that runs more than once
    on the answer's stack (a recursion) code that raises at once, so no ``except`` can start
    the recursion again. An answer that was stopped is refused whatever it returns afterwards
    (a ``return`` in ``finally`` swallows the stop): :class:`TimeLimitExceeded` is raised on exit.
    On exit the handler, the timer, the signal mask, the trace function
    and those functions' code are as they were before the check; a SIGALRM left pending under
    a mask the answer blocked (or one pending when the check starts) is taken by the check's
    handler and dropped, never by the default action, which would end the kernel.

    What it cannot stop: ``os._exit()`` or a crash in C ends the kernel (the outside grader
    runs each answer in its own process and survives it), and an answer blocked inside one C
    call that neither signal reaches (SIGURG blocked or ignored too, ``signal.pthread_sigmask``
    of every signal, or a C call that does not return on a signal: a long torch kernel) is not
    reached until that call returns; the outside grader's per-call limit, which ends the
    answer's process, is the guarantee there.

    On exit it also puts back each process setting of :data:`_SETTINGS` the answer changed
    (signal handlers, CPU-time interval timers, hooks, soft resource limits, the import state,
    pandas' display options, forward-AD levels, ``torch.library`` kernels registered from the
    learner's files, ...). A ``faulthandler.dump_traceback_later`` the answer armed is cancelled
    and the learner's own, armed before the check, is never cancelled (armed again, counted from
    then, when the answer replaced or cancelled it); one armed through a reference to the function
    taken before the course was imported is not seen. ``sys.stdout`` or ``sys.stderr`` replaced is
    put back; the learner's own stream closed by the answer cannot be opened again: it is named,
    and ``sys.__stdout__`` (``sys.__stderr__``) takes its place when that one is another object and
    open (in Jupyter its output goes to the kernel's terminal or log, not the notebook), else it
    stays closed. Hard resource limits an answer lowered stay lowered, and kernels torch registers
    itself while the answer runs stay registered.
    """

    _active: _Deadline | None = None  # the one running now (main thread)

    def __enter__(self) -> _Deadline:
        import signal

        self.changed: str | None = None  # what the answer replaced in the guarded namespaces
        self._armed = (hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread())
        if self._armed and _KICK is not None:
            # before the settings are read: an answer that changes what _KICK does is named
            self._previous_kick = signal.signal(_KICK, self._kick)
        self._settings = _process_settings()
        self.rounds = 0  # how many times the time limit struck (0: the answer ran in time)
        self._raised = False  # whether a stop was raised in the answer
        self._taken = False  # whether the check's own code caught that stop (not the answer)
        self._graced = False  # whether the limit waited for an import the answer started
        self.seconds = _time_limit()
        self._ended = False  # set first on exit: from then on its trace functions raise nothing
        # a check the answer calls while this limit runs (a diagnosis's rerun too) answers at once,
        # never runs it again (battery 24: 4.4's rerun of an answer that calls 4.4 recursed)
        self._checks_called: list[str] = []
        _CHECKS_INSIDE_ANSWERS.append(self._checks_called)
        self._traced: list[Any] = []  # the frames _expire gave a trace function (cleared on exit)
        self._previous_trace = _gettrace()  # put back on exit: this limit's, or the answer's own
        if self._armed:
            self._swapped: list[tuple[types.FunctionType, Any, Any]] = []
            self._seen_codes: set[Any] = set()
            self._boundary = sys._getframe(1)  # the check's frame: the answer runs below it
            self._import_grace = IMPORT_GRACE
            self._outer = _Deadline._active
            # the handler first: a SIGALRM left pending under a blocked mask reaches it (it
            # ignores a signal while this limit is not active), not the default action (exit)
            self._previous = signal.signal(signal.SIGALRM, self._expire)
            # SIGALRM unblocked while the answer runs (an earlier cell may have blocked it)
            self._mask = (signal.pthread_sigmask(signal.SIG_UNBLOCK, _LIMIT_SIGNALS)
                          if hasattr(signal, "pthread_sigmask") else None)
            self._done = threading.Event()
            _Deadline._active = self
            self._watchdog = threading.Thread(target=self._watch, name="course-check-deadline", daemon=True)
            # after _active above, the check's own change
            self._saved_names = _unprofiled(_guarded_namespaces)
            self._watchdog.start()
            self._started = _monotonic()
            signal.setitimer(signal.ITIMER_REAL, self.seconds)  # last: no stop inside __enter__
        else:
            self._saved_names = _unprofiled(_guarded_namespaces)
        return self

    def _expire(self, signum: int, frame: Any) -> None:
        import signal

        if _Deadline._active is not self:
            return
        if frame is not None and (frame.f_code in _OWN_CODES or (
                frame.f_code.co_filename == __file__ and frame.f_code.co_name not in _ANSWER_SIDE)):
            return  # the check's own code (setting up or taking down the limit): not the answer
        if frame is not None and frame.f_code.co_filename == __file__ and not self._answer_on(frame):
            # a call watch's profiler or a tripwire with no answer frame below it: the answer has
            # ended and the check is on its way to __exit__ (raised there, the stop kept __exit__
            # from running, and this limit's alarm and watchdog outlived the check: battery 29)
            return
        if self.rounds == 0 and self._import_grace > 0 and _inside_import(frame, self._boundary):
            # a module half-imported stays broken in sys.modules for the rest of the kernel
            # (battery 8: torch's lazy sympy import under use_deterministic_algorithms): let
            # the import finish, for up to IMPORT_GRACE seconds in all, then stop the answer
            self._import_grace -= 0.05
            self._graced = True
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            return
        self.rounds += 1
        signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)  # again soon, until the answer is gone
        if self.rounds >= 2:  # the first stop was caught or ignored: stop it line by line
            while frame is not None and frame is not self._boundary:
                if frame.f_code.co_filename != __file__ or frame.f_code.co_name == "_tripwire":
                    frame.f_trace, frame.f_trace_lines = self._stop_line, True
                    self._traced.append(frame)
                frame = frame.f_back
            sys.settrace(self._stop_call)
        self._raised = True
        raise TimeLimitExceeded(self.seconds)

    def _kick(self, signum: int, frame: Any) -> None:
        """The handler of :data:`_KICK`, which the watchdog sends the main thread while an answer
        runs past the limit: it wakes a C call (``time.sleep``) that the alarm no longer reaches
        (SIGALRM blocked, ignored or given a handler of the answer's), puts the alarm back and
        stops the answer as the alarm would."""
        if _Deadline._active is not self:
            return
        self._restore_alarm()
        self._expire(signum, frame)

    def _answer_on(self, frame: Any) -> bool:
        """True when a frame of code outside this module runs between ``frame`` and the check."""
        while frame is not None and frame is not self._boundary:
            if frame.f_code.co_filename != __file__:
                return True
            frame = frame.f_back
        return False

    def _disarm_recursion(self, frame: Any) -> None:
        """Give each function whose code runs more than once between ``frame`` and the check
        (a recursion) code that raises :class:`TimeLimitExceeded` at once, until exit.

        Run by the watchdog thread on the main thread's stack. A trace function that raises
        is switched off by the interpreter, and the alarm's handler cannot even start at the
        recursion limit, so neither stops ``def r(): try: r() except BaseException: r()``:
        each caught exception starts the recursion again, down to the limit, an exponential
        amount of work. With the code swapped, every such ``except`` raises again and the
        stack unwinds."""
        import gc

        counts: dict[Any, int] = {}
        while frame is not None and frame is not self._boundary:
            counts[frame.f_code] = counts.get(frame.f_code, 0) + 1
            frame = frame.f_back
        for code, n in counts.items():
            if n < 2 or code in self._seen_codes or code.co_filename == __file__ \
                    or code.co_filename.startswith("<frozen"):  # never the import machinery's code
                continue
            self._seen_codes.add(code)
            stop = _stop_code(len(code.co_freevars))
            for f in gc.get_referrers(code):
                if isinstance(f, types.FunctionType) and f.__code__ is code:
                    self._swapped.append((f, code, f.__kwdefaults__))
                    try:
                        f.__code__ = stop
                        f.__kwdefaults__ = {"_course_stop": (TimeLimitExceeded, (self.seconds,))}
                    except (ValueError, TypeError):  # (a closure of another size: left running)
                        pass

    def _stop_line(self, frame: Any, event: str, arg: Any) -> Any:
        """A frame's trace function: raises at its next line while this limit is the active one;
        once it is not (it ended, or an inner one runs), it raises nothing and stops tracing the
        frame (battery 22: a late raise escaped from a check)."""
        if self._ended or _Deadline._active is not self:
            return None
        if event == "line":
            import signal

            signal.setitimer(signal.ITIMER_REAL, 0.0001)  # a raise unsets tracing: set it again
            self._raised = True
            raise TimeLimitExceeded(self.seconds)
        return self._stop_line

    def _stop_call(self, frame: Any, event: str, arg: Any) -> Any:
        if _Deadline._active is self and frame.f_code.co_filename != __file__:
            return self._stop_line
        return None

    def _restore_alarm(self) -> None:
        """Run in the main thread (a pending call): the handler and the timer back in place."""
        import signal

        if _Deadline._active is not self:
            return
        if signal.getsignal(signal.SIGALRM) != self._expire:
            signal.signal(signal.SIGALRM, self._expire)
        if _KICK is not None and signal.getsignal(_KICK) != self._kick:
            signal.signal(_KICK, self._kick)
        if self._mask is not None:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _LIMIT_SIGNALS)
        if signal.getitimer(signal.ITIMER_REAL)[0] == 0:
            signal.setitimer(signal.ITIMER_REAL, 0.001)

    def _watch(self) -> None:
        sys.setprofile(None)  # (threading.setprofile of a call watch: nothing to record here)
        if self._done.wait(self.seconds + 0.5):
            return
        main = threading.main_thread().ident
        while self.rounds == 0 and self._import_grace > 0:  # an import the alarm is waiting for
            frame = sys._current_frames().get(main)
            importing = frame is not None and _inside_import(frame, self._boundary)
            del frame
            if not importing:
                break
            self._graced = True
            if self._done.wait(0.25):
                return
        self.rounds = max(self.rounds, 1)
        pending = _pending_call()
        while True:
            frame = sys._current_frames().get(main)
            if frame is not None:
                self._disarm_recursion(frame)
            del frame
            if pending is not None:
                pending(self._restore_alarm)
            if _KICK is not None:  # wakes a C call the alarm cannot reach (the pending call waits for it)
                try:
                    signal.pthread_kill(main, _KICK)
                except (OSError, ValueError):  # (the main thread has ended: nothing to stop)
                    return
            if self._done.wait(0.25):
                return

    def __exit__(self, *exc_info: Any, _own: Callable[[], list[str]] = _put_back_own) -> None:
        self._ended = True
        # back after the limit with no stop raised: it ignored or blocked SIGALRM meanwhile
        # (battery 28: accepted late, then run again for every case); stopped all the same
        stopped = exc_info[0] is not None and issubclass(exc_info[0], (TimeLimitExceeded, KeyboardInterrupt))
        allowed = self.seconds + (IMPORT_GRACE if self._graced else 0)
        # stopped, it returned all the same (a `return` in `finally` swallows the stop): whatever it
        # returned came after the limit, and the answer is never run again
        # (not when the check's own code took the stop: _within_time_limit printing an object)
        swallowed = exc_info[0] is None and self._raised and not self._taken
        overran = not self._raised and _monotonic() - self._started > allowed
        late = self._armed and not stopped and (swallowed or overran)
        if self._armed:  # first: from here on the alarm stops nothing (no global name: see below)
            self.__class__._active = self._outer
        own = _own()  # this module's helpers as imported, before any is looked up (battery 16)
        _AnswerRunning(self._checks_called).__exit__()
        _unprofiled(self._exit, exc_info[0] is not None, stopped, own)
        if late:  # (what it returned or raised came after the limit)
            raise TimeLimitExceeded(self.seconds) from None

    def _exit(self, raised: bool, stopped: bool, own: list[str]) -> None:
        # the trace function as it was, whether this limit set one or the answer did (battery 23;
        # bound at import: the answer may have replaced sys.settrace, put back only below)
        _settrace(self._previous_trace)
        settings = _restore_settings(self._settings)  # before the names: set_default_dtype rebinds
        # torch.Storage; next the names: even `import` may have been replaced
        self.changed = _changes(settings, own + _put_back(self._saved_names))
        self._saved_names = []
        # a thread an earlier cell started, still running: it may have made the change, not the answer
        self.threads = (_threads_running_user_code(_THREADS_AT_START[-1])
                        if self.changed is not None and _THREADS_AT_START else [])
        if self._armed:
            import signal

            self._done.set()
            self._watchdog.join()  # no pending call is asked for after this
            signal.setitimer(signal.ITIMER_REAL, 0)
            if self._mask is not None:
                # a SIGALRM the answer left pending under its blocked mask (the timer struck after
                # the watchdog ended, or the answer sent one) is delivered now, to this limit's
                # handler, which ignores it: under the default handler it would end the kernel
                signal.pthread_sigmask(signal.SIG_UNBLOCK, _LIMIT_SIGNALS)
            for frame in self._traced:  # no frame keeps this limit's trace function (a generator's
                if frame.f_trace == self._stop_line:  # frame may run again after the check)
                    frame.f_trace = None
            self._traced.clear()
            for f, code, kwdefaults in reversed(self._swapped):
                f.__code__, f.__kwdefaults__ = code, kwdefaults
            self._swapped.clear()
            if self._mask is not None:  # the answer may have blocked SIGALRM: the mask as it was
                signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
            signal.signal(signal.SIGALRM, self._previous)
            if _KICK is not None:
                signal.signal(_KICK, self._previous_kick)
        if self.rounds and raised and not stopped:
            # what it raised last (a RecursionError, an error of the code that raised at once) is
            # not the answer's doing: it was stopped
            raise TimeLimitExceeded(self.seconds) from None


_getprofile, _setprofile = sys.getprofile, sys.setprofile  # (bound at import, like the names below)
_gettrace, _settrace = sys.gettrace, sys.settrace
_monotonic = time.monotonic  # (bound at import: an answer may replace time.monotonic)


def _unprofiled(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` with this thread's profiler off, then the profiler as it was (the one of a
    :class:`_CallWatch`, or whatever the answer left in its place, for the watch to judge).

    For the check's own bookkeeping around each call of the answer (copying and putting back
    the guarded names: some 15,000 calls of C functions): a call watch's profiler would run
    for each of them, several times the work of the bookkeeping itself, and could record
    nothing there, as none of the watched functions is called by it."""
    profiler = _getprofile()
    if profiler is None:
        return fn(*args)
    _setprofile(None)
    try:
        return fn(*args)
    finally:
        _setprofile(profiler)


_MISSING = object()
_INSTANCE = object()  # the owner of an exercise's own attributes in _guarded_namespaces
_FIELDS = object()  # the owner of an exercise's fields as built, in the originals (put back, none removed)
_type_setattr = type.__setattr__
_type_delattr = type.__delattr__


def _global_module_hooks() -> dict[str, Any]:
    """torch.nn's global module hooks (``register_module_forward_hook`` and friends): each
    ``_global_*`` of ``torch.nn.modules.module``, a dict as a list of its items."""
    module = sys.modules.get("torch.nn.modules.module")
    return {name: list(value.items()) if isinstance(value, dict) else value
            for name, value in vars(module).copy().items() if name.startswith("_global_")} if module else {}


def _put_global_module_hooks(saved: dict[str, Any]) -> None:
    module = sys.modules.get("torch.nn.modules.module")
    for name, value in saved.items():
        live = getattr(module, name, None)
        if isinstance(live, dict) and isinstance(value, list):
            live.clear()
            live.update(value)
        else:
            setattr(module, name, value)


# torch's stack of saved_tensors_hooks: read with a private function that torch 2.5.1 (the
# floor) lacks and 2.13 has; popped with one that both have. Bound at import, as below.
_top_saved_hooks = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
_pop_saved_hooks = torch._C._autograd._pop_saved_tensors_default_hooks
_inference_mode, _enable_grad, _zeros, _sin = torch.inference_mode, torch.enable_grad, torch.zeros, torch.sin


def _saved_tensors_hooks(top: Callable[[bool], Any] | None = _top_saved_hooks) -> Any:
    """The innermost ``torch.autograd.graph.saved_tensors_hooks`` entered (None: none), read
    with ``top``, torch's reader (a test passes None to stand in for torch 2.5.1).

    A torch that cannot read its stack (2.5.1) answers True or None: whether any are entered
    (:func:`_saved_tensors_hooks_entered`). The guard is weaker there: hooks an answer leaves
    entered are named and left when none were entered before the check (in a lesson, always);
    inside hooks entered before the check, it cannot tell which the answer added, so it names
    and leaves none (it never pops hooks that were there before)."""
    if top is not None:
        return top(False)
    return True if _saved_tensors_hooks_entered() else None


def _saved_tensors_hooks_entered() -> bool:
    """Whether a tensor saved for backward now goes through ``saved_tensors_hooks``, read
    through torch's documented API: it saves one (calling the innermost pack hook, the only
    outside code this runs, outside the time limit) and asks the saved tensor to take a pair of hooks, which
    it refuses when it already has one ("Hooks for saved tensors", autograd mechanics)."""
    with _inference_mode(False), _enable_grad():
        x = _zeros((), dtype=torch.float32, device="cpu", requires_grad=True)
        try:
            y = _sin(x)  # (kept: its grad_fn holds the saved tensor)
            saved = y.grad_fn._raw_saved_self
        except Exception:  # noqa: BLE001 - a pack hook that raises: there is one
            return True
        try:
            saved.register_hooks(_unchanged, _unchanged)
        except RuntimeError:
            return True
    return False


def _unchanged(x: Any) -> Any:
    return x


def _leave_saved_tensors_hooks(saved: Any) -> None:
    """Leave the ``saved_tensors_hooks`` entered since ``saved`` was the innermost."""
    for _ in range(1000):
        if _same(_saved_tensors_hooks(), saved):
            return
        _pop_saved_hooks()


# torch's mode stacks and autocast, bound at import: an answer that enters a TorchFunctionMode or
# TorchDispatchMode, or torch.autocast, and never leaves it left every later torch call of the
# notebook going through its mode or in bfloat16 (battery 30)
_function_modes = torch._C._len_torch_function_stack
_pop_function_mode = torch._C._pop_torch_function_stack
_dispatch_modes = torch._C._len_torch_dispatch_stack
_AUTOCAST_DEVICES = ("cpu", "cuda")


def _pop_dispatch_mode() -> None:
    from torch.utils._python_dispatch import _pop_mode

    _pop_mode()


def _leave_function_modes(depth: int) -> None:
    """Leave the ``TorchFunctionMode``s entered since the stack was ``depth`` deep."""
    for _ in range(1000):
        if _function_modes() <= depth:
            return
        _pop_function_mode()


def _leave_dispatch_modes(depth: int) -> None:
    """Leave the ``TorchDispatchMode``s entered since the stack was ``depth`` deep."""
    for _ in range(1000):
        if _dispatch_modes() <= depth:
            return
        _pop_dispatch_mode()


def _autocast_state() -> tuple[tuple[bool, Any], ...]:
    """Whether ``torch.autocast`` is on, and in which dtype, for each of :data:`_AUTOCAST_DEVICES`."""
    return tuple((torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in _AUTOCAST_DEVICES)


def _put_autocast_state(state: tuple[tuple[bool, Any], ...]) -> None:
    for device, (enabled, dtype) in zip(_AUTOCAST_DEVICES, state, strict=True):
        torch.set_autocast_enabled(device, enabled)
        torch.set_autocast_dtype(device, dtype)


def _default_device_context() -> Any:
    return getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)


def _put_default_device(context: Any) -> None:
    _set_default_device(None if context is None else context.device)


def _described(x: Any) -> str:
    return f"{getattr(x, 'device', 'cpu')}" if x is not None else "cpu"


def _warnings_filters() -> tuple[list, tuple]:
    """The warnings module's filter list (the object: an answer may rebind it) and its entries."""
    return _WARNINGS.filters, tuple(_WARNINGS.filters)


def _put_warnings_filters(saved: tuple[list, tuple]) -> None:
    listed, entries = saved
    _WARNINGS.filters = listed
    listed[:] = entries
    _filters_mutated()  # the C side caches the filters by a version number


def _signal_handlers() -> tuple[Any, ...]:
    """The handler of every catchable signal but SIGALRM (the time limit's own: :class:`_Deadline`)."""
    return tuple(_getsignal(number) for number in _CATCHABLE)


def _put_signal_handlers(handlers: tuple[Any, ...]) -> None:
    for number, handler in zip(_CATCHABLE, handlers, strict=True):
        if handler is not None and _getsignal(number) is not handler:  # (None: set outside Python)
            try:
                _setsignal(number, handler)
            except (OSError, TypeError, ValueError):  # one refused does not keep the others
                pass


def _signals_change(was: tuple[Any, ...], now: tuple[Any, ...]) -> str:
    names = [_signal_name(number) for number, a, b in zip(_CATCHABLE, was, now, strict=True)
             if not _same(a, b)]
    others = [name for name in names if name not in ("SIGINT", "SIGTERM")]
    more = " and more" if len(others) > 3 else ""
    said = [f"changed what {', '.join(others[:3])}{more} does (signal.signal)"] if others else []
    if len(others) < len(names):  # (the words the lessons' tests and earlier feedback used)
        said.insert(0, "changed what SIGINT or SIGTERM does (signal.signal): Kernel > Interrupt might not "
                       "have stopped a later cell")
    return ", ".join(said)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _interval_timers() -> tuple[tuple[float, float], ...]:
    """The CPU-time interval timers (ITIMER_PROF, ITIMER_VIRTUAL; ITIMER_REAL is the time limit's)."""
    return tuple(_getitimer(which) for which in _CPU_TIMERS)


def _timers_left(was: tuple[tuple[float, float], ...], now: tuple[tuple[float, float], ...]) -> list[int]:
    """The timers the answer armed, disarmed or re-armed with another interval: one armed before
    the check and still running as it was (only its time left changed) is left alone."""
    return [which for which, (w, n) in zip(_CPU_TIMERS, zip(was, now, strict=True), strict=True)
            if (w[0] > 0) != (n[0] > 0) or (w[0] > 0 and w[1] != n[1])]


def _put_interval_timers(saved: tuple[tuple[float, float], ...]) -> None:
    for which in _timers_left(saved, _interval_timers()):
        _setitimer(which, *saved[_CPU_TIMERS.index(which)])


def _timers_change(was: Any, now: Any) -> str:
    return ("left a CPU-time interval timer armed (signal.setitimer: its signal would have ended the "
            "kernel later)") if any(now[_CPU_TIMERS.index(w)][0] > 0 for w in _timers_left(was, now)) else ""


def _course_modules() -> dict[str, Any]:
    """The course's modules in ``sys.modules``: one deleted or replaced there would be imported
    afresh by the next cell, and a check made from the old one would find no stored answers.
    Their names are looked for again only when ``sys.modules`` grew or shrank (a scan of its
    ~1,500 entries took 0.4 ms, and the settings are read around every call of the answer)."""
    if len(sys.modules) != _COURSE_NAMES[0]:
        names = tuple(name for name in list(sys.modules) if name.startswith(_COURSE_PREFIX))
        _COURSE_NAMES[:] = [len(sys.modules), names]
    return {name: module for name in _COURSE_NAMES[1] if (module := sys.modules.get(name)) is not None}


def _put_course_modules(modules: dict[str, Any]) -> None:
    sys.modules.update(modules)


_COURSE_NAMES: list = [-1, ()]  # len(sys.modules) when last scanned, and the course's names then


def _environment() -> dict[str, str]:
    """``os.environ`` as a dict, from one atomic copy of the dict behind it: ``dict(os.environ)``
    lists the names, then looks each up again in Python, between bytecodes, so a variable another
    thread of the kernel removed meanwhile made the copy raise (KeyError)."""
    data = getattr(_ENVIRON, "_data", None)
    if type(data) is not dict:
        return dict(_ENVIRON)
    decode_key, decode_value = _ENVIRON.decodekey, _ENVIRON.decodevalue
    return {decode_key(key): decode_value(value) for key, value in list(data.items())}


def _put_environment(saved: dict[str, str]) -> None:
    for name in [name for name in _environment() if name not in saved]:
        del _ENVIRON[name]
    for name, value in saved.items():
        if _ENVIRON.get(name) != value:
            _ENVIRON[name] = value


def _environment_change(was: dict[str, str], now: dict[str, str]) -> str:
    """What changed among the variables that steer the checks and the grading (COURSE_*, such as
    COURSE_CHECK_TIMEOUT, and NBGRADER_*), with their values; "" when only others changed: those
    are put back without a word (torch sets TORCHINDUCTOR_CACHE_DIR as it imports its compiler,
    which a right answer may make it do: ``torch.use_deterministic_algorithms(True)``)."""
    names = sorted(name for name in set(was) | set(now)
                   if was.get(name) != now.get(name) and name.startswith(("COURSE_", "NBGRADER_")))
    changes = [f"os.environ[{shown(name)}] from {shown(was.get(name))} to {shown(now.get(name))}"
               for name in names[:3]]
    return "changed " + ", ".join(changes) + (f" and {len(names) - 3} more" if len(names) > 3 else "") \
        if names else ""


def _anomaly_mode() -> tuple[bool, bool]:
    return torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()


def _put_anomaly_mode(saved: tuple[bool, bool]) -> None:
    torch.set_anomaly_enabled(saved[0], saved[1])


def _print_options() -> tuple[dict, dict]:
    return np.get_printoptions(), dict(vars(torch._tensor_str.PRINT_OPTS))


def _put_print_options(saved: tuple[dict, dict]) -> None:
    np.set_printoptions(**saved[0])
    vars(torch._tensor_str.PRINT_OPTS).update(saved[1])


def _pandas_options() -> tuple[tuple[str, Any], ...] | None:
    """pandas' display options (``pd.set_option('display.max_rows', 1)``: they set how lessons 05
    and 06 print tables), or None while pandas is not imported. Only ``display.*``: all of its
    options, read on every call of an answer, took 0.07 ms."""
    config = getattr(sys.modules.get("pandas._config.config"), "_global_config", None)
    display = config.get("display") if isinstance(config, dict) else None
    if not isinstance(display, dict):
        return None
    options: list[tuple[str, Any]] = []
    for key, value in list(display.items()):
        if isinstance(value, dict):
            options += [(f"display.{key}.{inner}", v) for inner, v in list(value.items())]
        else:
            options.append((f"display.{key}", value))
    return tuple(options)


def _put_pandas_options(saved: tuple[tuple[str, Any], ...] | None) -> None:
    now = dict(_pandas_options() or ())
    pandas = sys.modules.get("pandas")
    for key, value in saved or ():
        if key in now and not _same(now[key], value):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    pandas.set_option(key, value)
            except Exception:  # noqa: BLE001 - left as the answer made it, like a row of _SETTINGS
                pass


def _pandas_change(was: Any, now: Any) -> str:
    return "changed pandas' display options (pd.set_option)" if was is not None else ""  # (None: new)


def _mkldnn_enabled() -> bool:
    return bool(torch.backends.mkldnn.enabled)


def _put_mkldnn_enabled(saved: bool) -> None:
    torch.backends.mkldnn.enabled = saved


_STREAM_NAMES = ("stdout", "stderr")


def _closed(stream: Any) -> bool:
    """Whether ``stream`` says it is closed (a stream whose ``closed`` cannot be read: open)."""
    try:
        return bool(stream.closed)
    except Exception:  # noqa: BLE001 - (an object of the learner's with no usable `closed`)
        return False


def _streams() -> tuple[tuple[Any, bool], ...]:
    """``sys.stdout`` and ``sys.stderr``, each with whether it is closed: an answer may replace
    one, or close the learner's own (battery 32: every later print raised ValueError)."""
    return tuple((getattr(sys, name, None), _closed(getattr(sys, name, None))) for name in _STREAM_NAMES)


def _put_streams(streams: tuple[tuple[Any, bool], ...]) -> None:
    """Each stream as it was; one the answer closed cannot be opened again, so the kernel gets
    ``sys.__stdout__`` (``sys.__stderr__``) in its place when that one is open and another object
    (in Jupyter, the process's own stream: output goes to the terminal or log the kernel was started
    from, not to the notebook), else the closed one back."""
    for name, (stream, was_closed) in zip(_STREAM_NAMES, streams, strict=True):
        if _closed(stream) and not was_closed:
            spare = getattr(sys, f"__{name}__", None)
            if spare is not None and spare is not stream and not _closed(spare):
                stream = spare
        setattr(sys, name, stream)


def _streams_change(was: tuple[tuple[Any, bool], ...], now: tuple[tuple[Any, bool], ...]) -> str:
    """What the answer did to the streams (run after :func:`_put_streams`)."""
    said = []
    for name, (stream, was_closed), (_, closed_now) in zip(_STREAM_NAMES, was, now, strict=True):
        if closed_now is not True or was_closed or not _closed(stream):
            continue
        given = getattr(sys, name, None)
        said.append(f"closed sys.{name} (every later print to it would have raised ValueError; "
                    + (f"the check gave the kernel sys.__{name}__ in its place, whose output goes to the "
                       "terminal or log the kernel was started from: restart the kernel for output "
                       "in the notebook again)" if given is not stream else
                       "it stays closed: restart the kernel (Kernel > Restart))"))
    if any(w[0] is not n[0] for w, n in zip(was, now, strict=True)):
        said.append("replaced sys.stdout or sys.stderr (later output would have gone there)")
    return ", ".join(said)


_WARNINGS = warnings
_COURSE_PREFIX = __name__.split(".")[0] + "."  # "course_utils."
# every signal a handler can be set for but SIGALRM, the time limit's (Kernel > Interrupt sends SIGINT)
_CATCHABLE = tuple(sorted(set(signal.valid_signals()) - {getattr(signal, name, None) for name in (
    "SIGKILL", "SIGSTOP", "SIGALRM")}))
_CPU_TIMERS = tuple(getattr(signal, name) for name in ("ITIMER_PROF", "ITIMER_VIRTUAL")
                    if hasattr(signal, name))
_getitimer, _setitimer = getattr(signal, "getitimer", None), getattr(signal, "setitimer", None)
# the C functions: signal.getsignal's enum conversion calls isinstance, which an answer may replace
_getsignal, _setsignal = _signal.getsignal, _signal.signal
_filters_mutated = (getattr(warnings, "_filters_mutated", None)
                    or getattr(warnings, "_filters_mutated_lock_held", None) or (lambda: None))
_set_default_device = torch.set_default_device
_seterr, _seterrcall = np.seterr, np.seterrcall
_deterministic = torch.use_deterministic_algorithms

def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _keeps_denormals() -> bool:
    """torch.set_flush_denormal has no getter: ask the CPU, through NumPy (no torch operation
    here: a check names a slip by the last torch operation that raised)."""
    return bool(np.multiply(np.array([1e-39], dtype=np.float32), np.float32(1))[0] != 0)


def _rng_states() -> tuple[bytes, tuple, tuple]:
    """The three generators' states as plain data (bytes, tuples), compared with ``==`` by
    :func:`_restore_settings` (a tensor's or an array's ``==`` would compare elementwise)."""
    import random

    name, keys, *rest = np.random.get_state()
    return bytes(torch.get_rng_state().numpy()), (name, keys.tobytes(), *rest), random.getstate()


def _put_rng_states(saved: tuple[bytes, tuple, tuple]) -> None:
    import random

    torch.set_rng_state(torch.frombuffer(bytearray(saved[0]), dtype=torch.uint8))
    name, keys, *rest = saved[1]
    np.random.set_state((name, np.frombuffer(keys, dtype=np.uint32).copy(), *rest))
    random.setstate(saved[2])


_STANDARD_MODULES = ("math", "builtins", "numpy", "torch", "random", "os", "sys")


def _standard_modules() -> tuple[tuple[Any, ...], tuple[str, ...], tuple[Any, ...], tuple]:
    """The import state: the standard modules and torch's and NumPy's own in ``sys.modules`` (a
    replaced ``sys.modules['torch.nn.functional']`` would be what a later cell's import gets),
    and ``sys.path``, ``sys.meta_path`` and ``sys.path_hooks`` (each list object and its entries).
    torch's and NumPy's names are looked for again only when ``sys.modules`` grew or shrank, and
    their modules are read in C (``map``): a dict of their ~1,000 entries took 0.25 ms a read."""
    if len(sys.modules) != _LIBRARY_NAMES[0]:
        names = _STANDARD_MODULES + tuple(name for name in list(sys.modules)
                                          if name.startswith(_LIBRARY_PREFIXES))
        _LIBRARY_NAMES[:] = [len(sys.modules), names]
    names = _LIBRARY_NAMES[1]
    lists = (sys.path, tuple(sys.path), sys.meta_path, tuple(sys.meta_path), sys.path_hooks,
             tuple(sys.path_hooks))
    return names, tuple(map(sys.modules.get, names)), lists


def _put_standard_modules(saved: tuple[tuple[str, ...], tuple[Any, ...], tuple]) -> None:
    names, modules, lists = saved
    for name, module in zip(names, modules, strict=True):
        if module is not None and sys.modules.get(name) is not module:
            sys.modules[name] = module
    for index, attribute in enumerate(("path", "meta_path", "path_hooks")):
        listed, entries = lists[2 * index], lists[2 * index + 1]
        setattr(sys, attribute, listed)
        if tuple(listed) != entries:
            listed[:] = entries


_LIBRARY_PREFIXES = ("torch.", "numpy.")
_LIBRARY_NAMES: list = [-1, ()]  # len(sys.modules) when last scanned, and torch's and NumPy's names then


def _interpreter_settings() -> tuple[Any, ...]:
    """The interpreter's and the standard library's own settings, read together (one row)."""
    import decimal
    import socket

    return (_gc.isenabled(), _gc.get_threshold(), _umask(), sys.excepthook, sys.displayhook,
            decimal.getcontext().copy(), socket.getdefaulttimeout(), sys.getswitchinterval(),
            sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else None,
            _WARNINGS.showwarning, sys.unraisablehook, threading.excepthook, threading.gettrace(),
            _soft_limits())


def _put_interpreter_settings(saved: tuple[Any, ...]) -> None:
    import decimal
    import socket

    (enabled, threshold, mask, excepthook, displayhook, context, timeout, interval, digits, showwarning,
     unraisablehook, thread_excepthook, thread_trace, limits) = saved
    steps = ((_gc.enable if enabled else _gc.disable,), (_gc.set_threshold, *threshold),
             (os.umask, mask), (setattr, sys, "excepthook", excepthook),
             (setattr, sys, "displayhook", displayhook), (decimal.setcontext, context.copy()),
             (socket.setdefaulttimeout, timeout), (sys.setswitchinterval, interval),
             (setattr, _WARNINGS, "showwarning", showwarning),
             (setattr, sys, "unraisablehook", unraisablehook),
             (setattr, threading, "excepthook", thread_excepthook), (threading.settrace, thread_trace))
    if digits is not None:
        steps += ((sys.set_int_max_str_digits, digits),)
    if limits != _soft_limits():  # the soft limits (a hard limit the answer lowered stays lowered)
        steps += tuple((_set_soft_limit, which, soft) for which, soft in limits)
    for put, *args in steps:  # each on its own: one the system refuses does not keep the rest
        try:
            put(*args)
        except Exception:  # noqa: BLE001 - left as the answer made it, like a row of _SETTINGS
            pass


def _soft_limits() -> tuple[tuple[int, int], ...]:
    """The soft resource limits (``resource.setrlimit``: a lowered RLIMIT_NOFILE lets a later
    cell open only so many files); () where the resource module is missing (Windows)."""
    if _resource is None:
        return ()
    return tuple((which, _resource.getrlimit(which)[0]) for which in _RLIMITS)


def _set_soft_limit(which: int, soft: int) -> None:
    hard = _resource.getrlimit(which)[1]
    if _resource.getrlimit(which)[0] != soft:
        fits = hard == _resource.RLIM_INFINITY or 0 <= soft <= hard
        _resource.setrlimit(which, (soft if fits else hard, hard))


try:
    import resource as _resource
except ImportError:  # (Windows)
    _resource = None  # type: ignore[assignment]
_RLIMITS = tuple(getattr(_resource, name) for name in dir(_resource) if name.startswith("RLIMIT_")) \
    if _resource is not None else ()


def _thread_profile() -> Any:
    return threading.getprofile()


def _forward_ad_level() -> int:
    return _FORWARD_AD._current_level


def _leave_forward_ad_levels(saved: int) -> None:
    while _FORWARD_AD._current_level > saved:  # (an answer may enter levels, never leave the check's)
        _exit_dual_level(level=_FORWARD_AD._current_level)


_FORWARD_AD = sys.modules["torch.autograd.forward_ad"]
_exit_dual_level = _FORWARD_AD.exit_dual_level


def _faulthandler_later() -> tuple[int, tuple | None]:
    """How many times ``faulthandler.dump_traceback_later`` or its cancel ran, and the arguments
    of the dump armed now (None: none), as :func:`_later_dump` records them."""
    return _LATER[0], _LATER[1]


def _later_dump(timeout: Any, repeat: Any = False, file: Any = None, exit: Any = False) -> None:  # noqa: A002
    """``faulthandler.dump_traceback_later`` as the course puts it in the faulthandler module:
    the same, and it records its arguments, so that a check can cancel a dump an answer armed."""
    args = (timeout, repeat, sys.stderr if file is None else file, exit)
    _dump_traceback_later(*args)
    _LATER[:] = [_LATER[0] + 1, args]


def _cancel_later_dump() -> None:
    _cancel_dump_traceback_later()
    _LATER[:] = [_LATER[0] + 1, None]


def _put_faulthandler_later(saved: tuple[int, tuple | None]) -> None:
    """Cancel the dump an answer armed, and arm again the one it replaced or cancelled (counted
    from now). A dump armed through a reference to the function taken before the course was
    imported is not seen."""
    if _LATER[1] is not None:
        _cancel_dump_traceback_later()
    if saved[1] is not None:
        _dump_traceback_later(*saved[1])
    _LATER[1] = saved[1]


def _faulthandler_change(was: Any, now: Any) -> str:
    return ("left faulthandler.dump_traceback_later armed (it would have dumped tracebacks, or ended "
            "the kernel, later)") if now[1] is not None and now[1] is not was[1] else ""


import faulthandler as _faulthandler  # noqa: E402

# (the originals: a second import of the course finds its first import's functions in their place)
_dump_traceback_later = getattr(_faulthandler.dump_traceback_later, "_course_original",
                                _faulthandler.dump_traceback_later)
_cancel_dump_traceback_later = getattr(_faulthandler.cancel_dump_traceback_later, "_course_original",
                                       _faulthandler.cancel_dump_traceback_later)
_later_dump._course_original = _dump_traceback_later  # type: ignore[attr-defined]
_cancel_later_dump._course_original = _cancel_dump_traceback_later  # type: ignore[attr-defined]
_LATER: list = [0, None]  # the calls of the two, and the arguments of the dump armed now
_faulthandler.dump_traceback_later = _later_dump
_faulthandler.cancel_dump_traceback_later = _cancel_later_dump


def _library_impls() -> frozenset[str]:
    """The kernels registered through ``torch.library`` ("aten/exp/CPU", ...), copied again only
    when their number changed (a copy of ~1,800 took 0.13 ms)."""
    if len(_LIBRARY_IMPLS) != _IMPLS_SEEN[0]:
        _IMPLS_SEEN[:] = [len(_LIBRARY_IMPLS), frozenset(_LIBRARY_IMPLS)]
    return _IMPLS_SEEN[1]


def _remove_library_impls(saved: frozenset[str]) -> None:
    """Destroy each ``torch.library.Library`` that registered a kernel added since ``saved`` from
    a file of the learner's (one of torch's own modules, imported meanwhile, registers its kernels
    too: left registered); the ones removed are in :data:`_LIBRARIES_UNDONE`."""
    import weakref

    _LIBRARIES_UNDONE.clear()
    added = set(_LIBRARY_IMPLS) - saved
    if not added:
        return
    for info in list(weakref.finalize._registry.values()):  # (each Library has a finalizer)
        library = info.weakref()
        keys = getattr(library, "_op_impls", None)
        if isinstance(library, _Library) and isinstance(keys, set) and keys & added \
                and any(_registered_by_learner(key) for key in keys & added):
            _LIBRARIES_UNDONE.extend(sorted(keys))
            library._destroy()


def _registered_by_learner(key: str) -> bool:
    """Whether the kernel ``key`` ("ns/op/dispatch key") was registered from a learner's file (the
    dispatcher records where: "CPU: registered at FILE:LINE")."""
    ns, op, dispatch = (key.split("/", 2) + ["", ""])[:3]
    try:
        dump = torch._C._dispatch_dump(f"{ns}::{op}")
    except Exception:  # noqa: BLE001 - an operator the dispatcher does not know: not undone
        return False
    for line in dump.splitlines():
        if line.startswith(f"{dispatch}: registered at "):
            where = line[len(f"{dispatch}: registered at "):].split(" :: ")[0].rsplit(":", 1)[0]
            return _users_file(where)
    return False


def _library_change(was: Any, now: Any) -> str:
    if not _LIBRARIES_UNDONE:
        return ""
    more = f" and {len(_LIBRARIES_UNDONE) - 3} more" if len(_LIBRARIES_UNDONE) > 3 else ""
    return f"registered kernels through torch.library ({', '.join(_LIBRARIES_UNDONE[:3])}{more})"


_Library = torch.library.Library
_LIBRARY_IMPLS = torch.library._impls
_IMPLS_SEEN: list = [-1, frozenset()]
_LIBRARIES_UNDONE: list[str] = []


def _torch_flags() -> tuple[bool, bool, bool]:
    return _keeps_denormals(), torch.is_warn_always_enabled(), torch.backends.opt_einsum.enabled


def _put_torch_flags(saved: tuple[bool, bool, bool]) -> None:
    torch.set_flush_denormal(not saved[0])
    torch.set_warn_always(saved[1])
    torch.backends.opt_einsum.enabled = saved[2]


# Process-wide settings an answer may change, one row each: (what the Feedback says when an
# answer changed it, or None to put it back without a word; read it; put it back). The
# functions are bound here, at import, not looked up when a check runs (an answer may have
# replaced them). :func:`_process_settings` reads them all before an answer runs and
# :func:`_restore_settings` puts back each that changed, so the next check, the reference
# answer included, runs as it would have (battery 8: after ``np.seterr(all='raise')`` the next
# check failed the reference; battery 9: ``torch.set_default_device('meta')``, a global
# forward hook, a ``saved_tensors_hooks`` left entered, COURSE_CHECK_TIMEOUT set to 0.0001;
# battery 16: ``sys.setrecursionlimit(100000)``; battery 25: ``warnings.simplefilter('error')``,
# ``torch.set_num_threads(7)``, ``sys.stdout = io.StringIO()``, ``signal.signal(SIGINT, SIG_IGN)``:
# later cells raised, ran on other threads, printed nothing or could not be interrupted; battery 26:
# ``del sys.modules['course_utils.exercises.core']``, after which a check found no stored answers). The
# warnings filters are put back without a word: a module the answer imports first may set its own.
_SETTINGS: tuple[tuple[Callable[[Any, Any], str] | None, Callable[[], Any], Callable[[Any], None]], ...] = (
    (None, lambda: (np.geterr(), np.geterrcall()), lambda v: (_seterr(**v[0]), _seterrcall(v[1]))),
    (None, torch.get_default_dtype, torch.set_default_dtype),
    (None, torch.is_grad_enabled, torch.set_grad_enabled),
    # (an answer's high limit left behind lets a later deep recursion crash the kernel instead
    # of raising RecursionError: battery 16)
    (None, sys.getrecursionlimit, sys.setrecursionlimit),
    (None, lambda: (torch.are_deterministic_algorithms_enabled(),
                    torch.is_deterministic_algorithms_warn_only_enabled()),
     lambda v: _deterministic(v[0], warn_only=v[1])),
    (lambda was, now: f"changed the default device to {_described(now)!r} (torch.set_default_device)",
     _default_device_context, _put_default_device),
    (lambda was, now: "left a global module hook of torch.nn registered "
                      "(torch.nn.modules.module.register_module_*_hook)",
     _global_module_hooks, _put_global_module_hooks),
    (lambda was, now: "left torch.autograd.graph.saved_tensors_hooks entered",
     _saved_tensors_hooks, _leave_saved_tensors_hooks),
    # (after the default device: set_default_device is a TorchFunctionMode of its own; battery 30)
    (lambda was, now: "left a TorchFunctionMode entered (torch.overrides)", _function_modes,
     _leave_function_modes),
    (lambda was, now: "left a TorchDispatchMode entered (torch.utils._python_dispatch)", _dispatch_modes,
     _leave_dispatch_modes),
    (lambda was, now: "left torch.autocast entered", _autocast_state, _put_autocast_state),
    # (COURSE_CHECK_TIMEOUT set to 0.0001: battery 9; NBGRADER_EXECUTION set would turn every
    # later check into validate mode: battery 27)
    (_environment_change, _environment, _put_environment),
    (lambda was, now: "turned on autograd's anomaly detection (torch.autograd.set_detect_anomaly)",
     _anomaly_mode, _put_anomaly_mode),
    (lambda was, now: f"changed torch's float32 matmul precision from {was!r} to {now!r}",
     torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
    (lambda was, now: "changed NumPy's or torch's print options (np.set_printoptions, "
                      "torch.set_printoptions)", _print_options, _put_print_options),
    (lambda was, now: f"changed torch.backends.mkldnn.enabled from {was} to {now}",
     _mkldnn_enabled, _put_mkldnn_enabled),
    # (relative paths of later cells would read other files: battery 24)
    (lambda was, now: "changed the working directory (os.chdir)", os.getcwd, os.chdir),
    (None, _warnings_filters, _put_warnings_filters),
    (lambda was, now: f"changed torch's thread count from {was} to {now} (torch.set_num_threads)",
     torch.get_num_threads, torch.set_num_threads),
    # (battery 32: a stream the answer closed is named, and replaced by sys.__stdout__ when it can be)
    (_streams_change, _streams, _put_streams),
    # (battery 31: any catchable signal, SIGCHLD or SIGUSR1 ignored; the CPU-time interval timers, whose
    # signal ends the kernel; a forward-AD level left entered; a dump armed with faulthandler; pandas'
    # options; a torch.library kernel that overrode aten::exp for every later cell)
    (_signals_change, _signal_handlers, _put_signal_handlers),
    (_timers_change, _interval_timers, _put_interval_timers),
    (lambda was, now: "left a forward-mode AD level entered (torch.autograd.forward_ad.dual_level)",
     _forward_ad_level, _leave_forward_ad_levels),
    (_faulthandler_change, _faulthandler_later, _put_faulthandler_later),
    (_pandas_change, _pandas_options, _put_pandas_options),
    (_library_change, _library_impls, _remove_library_impls),
    (lambda was, now: "replaced the profiler new threads start with (threading.setprofile)",
     _thread_profile, threading.setprofile),
    # (without a word: an answer importing one of the course's modules for the first time adds one)
    (None, _course_modules, _put_course_modules),
    # (battery 29: put back without a word; none changes what a check compares, but each left
    # changed would surprise a later cell: gc off, files made unreadable by a umask, a reseeded RNG,
    # an exception hook that prints nothing, sys.modules['math'] replaced, ...)
    (None, _interpreter_settings, _put_interpreter_settings),
    (None, _torch_flags, _put_torch_flags),
    (None, _rng_states, _put_rng_states),
    (None, _standard_modules, _put_standard_modules),
    # (battery 32: the trace function, put back without a word as _Deadline's exit does; a row here
    # so a check's calls of the answer outside the time limit (a DiagnosingExercise's probe run,
    # 2.1's tensor-output test) put it back too: 2.1 left an answer's sys.settrace installed)
    (None, _gettrace, _settrace),
)


def _same(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` are the same object or equal (never raises)."""
    try:
        return a is b or bool(a == b)
    except Exception:  # noqa: BLE001
        return False


def _process_settings() -> list[tuple[Any, Any]]:
    """Each row of :data:`_SETTINGS` with its value now (see :func:`_restore_settings`)."""
    read = []
    for row in _SETTINGS:
        try:
            read.append((row, row[1]()))
        except Exception:  # noqa: BLE001 - a setting that cannot be read is not guarded
            pass
    return read


def _restore_settings(settings: list[tuple[Any, Any]]) -> list[str]:
    """Put back each setting :func:`_process_settings` read that has changed since, with the
    functions bound at import; what the Feedback says of those that name a change."""
    said = []
    for (describe, read, restore), value in settings:
        try:
            now = read()
            if _same(now, value):
                continue
            restore(value)
            if describe is not None and (text := describe(value, now)):  # ("": nothing to say)
                said.append(text)
        except Exception:  # noqa: BLE001 - a setting that cannot be put back stays as the answer left it
            pass
    return said


def _guarded_namespaces() -> list[tuple[str, Any, Any, dict]]:
    """A copy of each namespace a check's comparison looks names up in, to put back what an
    answer replaces in them: the built-ins, ``math``, NumPy (and ``numpy._core.numeric``, the
    module behind ``np.allclose``), ``numpy.testing``, torch, ``torch.nn.functional``, ``torch.testing``,
    ``torch.Tensor``'s methods, and the course's exercise modules, their classes and their
    exercises' own attributes (``PREVIOUS_TOKEN_SCORE.__dict__.clear()``, battery 9).
    Entries ``(label, owner, live mapping, copy)``; owner is a class (put back with
    ``type.__setattr__``), :data:`_INSTANCE` (an exercise's ``__dict__``: put back by item, and
    what the answer added is removed) or None (a module's dict, put back by item).

    Every namespace is taken by module name (``sys.modules``), never from a live attribute
    (``np.allclose.__globals__`` is the notebook's globals once a cell assigns
    ``np.allclose = my_close``), and the notebook's own namespaces (:func:`_notebook_namespaces`)
    are never among them: a check never rolls back the learner's variables (battery 10)."""
    return [(label, owner, live, dict(live)) for label, owner, live in _guarded_spaces()]


def _guarded_spaces() -> list[tuple[str, Any, Any]]:
    """The namespaces of :func:`_guarded_namespaces`, ``(label, owner, live mapping)``, not
    copied (:func:`_capture_originals` copies only those it has not seen)."""
    import builtins

    spaces: list[tuple[str, Any, Any]] = [("builtins", None, builtins.__dict__)]
    modules = [math, os, np, *map(sys.modules.get, _GUARDED_MODULES)]
    modules += [m for name, m in sys.modules.copy().items() if name.startswith(_COURSE)]
    seen = {id(builtins.__dict__)} | _notebook_namespaces()
    for module in modules:
        if not isinstance(module, types.ModuleType) or id(module.__dict__) in seen \
                or module.__dict__.get("__name__") == "__main__":
            continue
        seen.add(id(module.__dict__))
        spaces.append((module.__name__, None, module.__dict__))
        if module.__name__.startswith(_COURSE):
            for value in list(module.__dict__.values()):
                if isinstance(value, type) and value.__module__ == module.__name__ and id(value) not in seen \
                        and value is not _Deadline:  # (whose _active changes on exit, before the put-back)
                    seen.add(id(value))
                    spaces.append((f"{module.__name__}.{value.__qualname__}", value, value.__dict__))
                elif isinstance(value, Exercise) and id(value) not in seen:  # what its check reads
                    seen.add(id(value))
                    name = next((k for k, v in module.__dict__.copy().items() if v is value), "exercise")
                    spaces.append((f"{module.__name__}.{name}", _INSTANCE, value.__dict__))
    classes = [("torch.Tensor", torch.Tensor)]
    classes += [(f"torch.nn.{name}", value) for name, value in vars(torch.nn).copy().items()
                if isinstance(value, type) and issubclass(value, torch.nn.Module)]
    pandas = sys.modules.get("pandas")
    if pandas is not None:
        classes += [(f"pandas.{name}", getattr(pandas, name, None)) for name in _PANDAS_CLASSES]
        generic = sys.modules.get("pandas.core.generic")
        classes.append(("pandas.NDFrame", getattr(generic, "NDFrame", None)))
    for label, value in classes:  # (read through live attributes: only torch's and pandas' own classes)
        if isinstance(value, type) and id(value) not in seen \
                and str(getattr(value, "__module__", "")).split(".")[0] in ("torch", "pandas"):
            seen.add(id(value))
            spaces.append((label, value, value.__dict__))
    return spaces


def _notebook_namespaces() -> set[int]:
    """The ids of the learner's namespaces: ``__main__``'s globals and, in IPython, the
    kernel's ``user_ns`` and ``user_global_ns`` (never guarded, never put back)."""
    ids = set()
    main = sys.modules.get("__main__")
    if main is not None:
        ids.add(id(getattr(main, "__dict__", None)))
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    for name in ("user_ns", "user_global_ns"):
        ns = getattr(shell, name, None) if shell is not None else None
        if ns is not None:
            ids.add(id(ns))
    return ids


_COURSE = f"{__package__.split('.')[0]}."  # every module of the course ("course_utils.")
# The namespaces a check's comparison, its reference code or its inputs' code look names up in,
# besides the built-ins, math, os, NumPy and the course's modules (the guarded names: see
# :func:`_guarded_namespaces`); one that is not imported is left out.
_GUARDED_MODULES = ("numpy._core.numeric", "numpy.core.numeric", "numpy.testing", "torch", "torch.nn",
                    "torch.nn.functional", "torch.nn.init", "torch.nn.modules.module", "torch.autograd",
                    "torch.autograd.graph", "torch.testing", "pandas")
_PANDAS_CLASSES = ("Series", "DataFrame", "Index")


def _put_back(spaces: list[tuple[str, Any, Any, dict]]) -> list[str]:
    """Put back every name of ``spaces`` (:func:`_guarded_namespaces`) that was replaced or
    deleted since; the names ("numpy.allclose", ...). Uses no built-in until the built-ins are
    back (they come first). A name torch itself rebinds to a wrapper of the same function when
    one of its modules is first imported (``torch._dynamo`` wraps ``torch.manual_seed``, and
    ``use_deterministic_algorithms(True, warn_only=True)`` imports it) is left as torch made it."""
    changed = []
    for label, owner, live, saved in spaces:
        if _all(_map(_is, _map(live.get, saved, _repeat(_MISSING)), saved.values())) \
                and _len(live) == _len(saved):
            continue  # every name as saved, none added (compared in C: no profiler event per name)
        for key, value in saved.items():
            now = live.get(key, _MISSING)
            if now is not value and not _torch_wrapped(now, value) and not _same_method(now, value) \
                    and not (key == "__slotnames__" and now == value):  # (copyreg's cache, made again)
                changed.append(f"{label.replace('course_utils.exercises.', '')}.{key}")
                try:
                    if owner is None or owner is _INSTANCE or owner is _FIELDS:
                        live[key] = value
                    else:
                        _type_setattr(owner, key, value)
                except Exception:  # noqa: BLE001 - (an attribute that cannot be set again)
                    pass
        if owner is _INSTANCE:  # an attribute the answer gave an exercise (`_expected`): removed
            for key in [k for k in list(live) if k not in saved]:
                changed.append(f"{label.replace('course_utils.exercises.', '')}.{key}")
                live.pop(key, None)
        elif owner is _FIELDS:  # the outside grader's cases and outputs, unless it is grading now
            if not _grading_with(live):
                for key in [k for k in _GRADER_KEYS if k in live]:
                    changed.append(f"{label.replace('course_utils.exercises.', '')}.{key}")
                    live.pop(key, None)
        elif label != "builtins":
            # what an added name can change: a built-in it shadows in a
            # module (`core.abs = ...`), an inherited attribute it hides in a course class, and in
            # torch's and pandas' classes an inherited method it hides or a protocol (`__x__`) it
            # adds (`torch.Tensor.__eq__ = ...`, inherited from TensorBase: battery 15)
            added = [k for k in list(live) if k not in saved and (
                k in _BUILTIN_NAMES if owner is None else
                (label.startswith(_COURSE) or _hides_or_dunder(owner, k))
                and not _slot_names_cache(owner, k))]
            for key in added:
                changed.append(f"{label.replace('course_utils.exercises.', '')}.{key}")
                try:
                    if owner is None:
                        live.pop(key, None)
                    else:
                        _type_delattr(owner, key)
                except Exception:  # noqa: BLE001 - (an attribute that cannot be removed)
                    pass
    return changed


def _hides_or_dunder(owner: type, key: str) -> bool:
    """Whether a name added to a library class (torch's, pandas') can change what the check
    computes: it hides an attribute of a base class, or it is a protocol name (``__x__``)."""
    return (key.startswith("__") and key.endswith("__")) or _any(
        key in _vars(base) for base in owner.__mro__[1:])


def _slot_names_cache(owner: type, key: str) -> bool:
    """Whether ``owner.<key>`` is copyreg's cache of the class's slot names, as copyreg makes it:
    ``copy.copy`` or ``pickle`` of an instance adds ``__slotnames__`` to its class (the outside
    grader pickles a lesson's cases), which is nobody's tampering. Recomputed to tell: a cache
    that holds other names (an answer's ``Case.__slotnames__ = ["args"]``) is named and removed."""
    if key != "__slotnames__":
        return False
    held = owner.__dict__.get(key)
    try:
        _type_delattr(owner, key)
        return held == _copyreg_slotnames(owner)  # (which caches the true names again)
    except Exception:  # noqa: BLE001 - (a class whose slots cannot be read: named, as any added name)
        return False


# _put_back's comparison of a whole namespace, bound at import (the built-ins may be replaced)
_all, _map, _len, _is, _repeat = all, map, len, operator.is_, itertools.repeat
_any, _vars = any, vars
_copyreg_slotnames = copyreg._slotnames
_BUILTIN_NAMES = frozenset(vars(builtins))
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _torch_wrapped(now: Any, original: Any) -> bool:
    """True when ``now`` is torch's own wrapper of ``original`` (its ``__wrapped__``, with code
    in torch's own files)."""
    try:
        code = getattr(now, "__code__", None)
        return (getattr(now, "__wrapped__", None) is original and code is not None
                and code.co_filename.startswith(_TORCH_DIR))
    except Exception:  # noqa: BLE001
        return False


def _same_method(now: Any, original: Any) -> bool:
    """True when ``now`` and ``original`` are the same method of the same object, bound twice
    (IPython binds ``builtins.get_ipython`` and ``input`` afresh for every cell)."""
    return (type(now) is types.MethodType and type(original) is types.MethodType
            and now.__func__ is original.__func__ and now.__self__ is original.__self__)


# The guarded names as they were when first seen (course_utils.exercises' import, or the first
# check after a module's import), by id of the namespace: each check starts by putting these
# back (:func:`_restore_originals`). An exercise's own attributes are there as it was built, less
# those set on purpose (:data:`_SETTABLE_FIELDS`) and less what is added later (the outside
# grader's cases, the check's own caches), nor are names that change
# without anyone tampering: the built-ins IPython sets for each cell and the REPL's ``_``, and
# torch.Storage, which torch.set_default_dtype rebinds.
_VOLATILE: Mapping[str, tuple[str, ...]] = types.MappingProxyType(
    {"builtins": ("_", "exit", "quit", "get_ipython", "display", "input"), "torch": ("Storage",)})


def _originals_store() -> tuple[Mapping[int, tuple[str, Any, Any, Mapping[str, Any]]], Callable[..., None],
                               Callable[[], bool]]:
    """``(view, remember, intact)``: a read-only view of the originals, by id of the module's dict or
    the class; the only function that adds to them (:func:`_remember_original`); and whether every
    entry is still the one remembered, holding the names it copied (False once something reached
    them by other means, ``gc`` say). The dict lives in their closure, and each entry's copy is
    read-only too: an answer can neither rewrite nor remove an original (battery 20)."""
    held: dict[int, tuple[str, Any, Any, Mapping[str, Any]]] = {}
    frozen: dict[int, tuple[tuple[str, Any, Any, Mapping[str, Any]], tuple[tuple[str, Any], ...]]] = {}

    def remember(label: str, owner: Any, live: Any, drop: Sequence[str] = (),
                 copy: Callable[[Any], dict] = dict, freeze: Callable[[dict], Any] = types.MappingProxyType,
                 key_of: Callable[[Any], int] = id, as_tuple: Callable[[Any], tuple] = tuple) -> None:
        """Copy ``live`` (less the names of ``drop``) as its namespace's originals, unless that
        namespace has some already (an entry is never replaced)."""
        # (a class's __dict__: a new proxy each time; an exercise's fields: by its own __dict__)
        key = key_of(live) if owner is None or owner is _FIELDS else key_of(owner)
        if key in held:
            return
        saved = copy(live)
        for name in drop:
            saved.pop(name, None)
        entry = (label, owner, live, freeze(saved))
        held[key] = entry
        frozen[key] = (entry, as_tuple(saved.items()))

    def intact(same: Callable[..., bool] = _same_items, len_: Callable[[Any], int] = len) -> bool:
        if len_(held) != len_(frozen):
            return False
        for key, (entry, items) in frozen.items():
            if held.get(key) is not entry or not same(entry[3], items):
                return False
        return True

    return types.MappingProxyType(held), remember, intact


_ORIGINALS, _remember_original, _originals_intact = _originals_store()


def _built_fields_store() -> tuple[Callable[[Any], None], Callable[[Any], dict]]:
    """``(remember, built)``: ``remember(exercise.__dict__)`` copies an exercise's fields as
    :meth:`Exercise.__post_init__` leaves them; ``built(live)`` answers a copy of those (empty for
    a namespace never remembered). Held in their closure, as :func:`_originals_store`'s."""
    held: dict[int, tuple[Any, Mapping[str, Any]]] = {}

    def remember(live: Any) -> None:
        held.setdefault(id(live), (live, types.MappingProxyType(dict(live))))

    def built(live: Any) -> dict:
        entry = held.get(id(live))
        return dict(entry[1]) if entry is not None and entry[0] is live else {}

    return remember, built


_remember_built, _built_fields = _built_fields_store()


def _grading_store() -> tuple[Callable[[Any, bool], None], Callable[[Any], bool]]:
    """``(grading, grading_with)``: ``grading(exercise.__dict__, on)`` marks an exercise as given
    the outside grader's cases (:data:`_GRADER_KEYS`, ``autograde._these_cases``) or not any
    more; ``grading_with(live)`` tells. Held in their closure."""
    held: set[int] = set()

    def grading(live: Any, on: bool) -> None:
        (held.add if on else held.discard)(id(live))

    def grading_with(live: Any) -> bool:
        return id(live) in held

    return grading, grading_with


_grading, _grading_with = _grading_store()
# An exercise's attributes that only the outside grader adds (its very cases, and the outputs of
# unseen cases): found before a check outside its grading, they are a cell's, removed and named.
_GRADER_KEYS = ("_cases", "_expected")
# An exercise's fields that are set on purpose, so not put back before a check: ``make_cases``
# (the outside grader's unseen cases, the course's tests; a lesson's exercise compares the cases
# built with its store, so a cell's builder is told "other test inputs", never passed),
# ``reference`` (solutions.attach gives it to the course's tests; a lesson's exercise grades with
# its stored outputs, never with it) and ``_guarded`` (Exercise.check_trusted, a public method).
_SETTABLE_FIELDS = ("make_cases", "reference", "_guarded")


def _capture_originals() -> None:
    """Remember the guarded names of each namespace not seen before, as they are now (and, the
    first time, this module's own globals: :func:`_put_back_own`). An exercise's fields are
    remembered as it was built (:func:`_built_fields`), less :data:`_SETTABLE_FIELDS`: a cell run
    before the first check that sets its ``rtol`` is put back and named, as a patched module
    name is (battery 22)."""
    _fill_own_globals(globals())
    for label, owner, live in _guarded_spaces():
        if owner is _INSTANCE:
            _remember_original(label, _FIELDS, live, _SETTABLE_FIELDS, copy=_built_fields)
        else:
            _remember_original(label, owner, live, _VOLATILE.get(label, ()))


def _restore_originals() -> list[str]:
    """Put back each guarded name that differs from its original (:data:`_ORIGINALS`); the names.
    Copies found changed are not used: the kernel is marked untrusted (:func:`_one_way_flag`)."""
    _capture_originals()
    if not _originals_intact():  # (never put back from copies something rewrote: no check trusts them)
        _mark_tampered("core._ORIGINALS")
        return []
    return _put_back(list(_ORIGINALS.values()))


_LIBRARY_DIRS = tuple({os.path.join(p, "") for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
                      | {os.path.join(os.path.dirname(os.path.dirname(__file__)), "")})


def _threads_running_user_code(idents: set[int]) -> list[str]:
    """The names of the threads among ``idents`` (those alive when the check started) that are
    still alive and run code of the notebook's own (a frame outside Python's, the installed
    packages' and the course's files): a thread an earlier cell started."""
    names = []
    frames = sys._current_frames()
    for thread in threading.enumerate():
        frame = frames.get(thread.ident) if thread.ident in idents else None
        while frame is not None:
            if _users_file(frame.f_code.co_filename):
                names.append(thread.name)
                break
            frame = frame.f_back
    del frames
    return names


_THREADS_AT_START: list[set[int]] = []  # per check running now: the threads alive when it started
# while a check runs: id(thread) -> (the thread, the ident of the thread that started it), and the
# threads alive or starting when the outermost check began (held, so that no id is reused meanwhile)
_STARTED_BY: dict[int, tuple[threading.Thread, int]] = {}
_PRESENT_AT_START: dict[int, threading.Thread] = {}
_thread_start = threading.Thread.start  # bound at import, like the names above


def _start_noting_who(self: threading.Thread, *args: Any, **kwargs: Any) -> Any:
    """``threading.Thread.start`` while a check runs: notes which thread started this one, so
    a thread that an earlier cell's thread starts meanwhile is not taken for the answer's."""
    _STARTED_BY[id(self)] = (self, threading.get_ident())
    return _thread_start(self, *args, **kwargs)


def _started_by_an_earlier_thread(thread: threading.Thread, started: set[int], mine: int,
                                  alive: dict[int | None, threading.Thread]) -> bool:
    """Whether ``thread`` was started, directly or through threads still alive, by one of the
    threads alive when the check began (``started``) other than the answer's own (``mine``).
    Unknown starters (a start this record missed, a starter that has ended) count as the
    answer's, as before."""
    seen: set[int] = set()
    while id(thread) not in seen:
        seen.add(id(thread))
        parent = _STARTED_BY.get(id(thread), (None, None))[1]
        if parent is None or parent == mine:
            return False
        if parent in started:
            return True
        if parent not in alive:
            return False
        thread = alive[parent]
    return False


def _threads_the_answer_left() -> list[str]:
    """The names of the threads started since the outermost check began (not in
    :data:`_THREADS_AT_START`) that are still alive and are the answer's: their target (a
    ``threading.Timer``'s function, a ``Thread`` subclass's ``run``) or a frame they run now is
    the notebook's own code, or a built-in (a library's own worker thread is left alone).
    Empty when no check runs (a check called directly, without :func:`_never_raises`)."""
    if not _THREADS_AT_START:
        return []
    started = _THREADS_AT_START[0]
    mine = threading.get_ident()
    frames = sys._current_frames()
    names = []
    alive = {thread.ident: thread for thread in threading.enumerate()}
    for thread in list(alive.values()):
        if thread.ident in started or thread.ident == mine or id(thread) in _PRESENT_AT_START:
            continue  # (the last: a thread still starting, with no ident yet, when the check began)
        if _started_by_an_earlier_thread(thread, started, mine, alive):  # (an earlier cell's thread's)
            continue
        target = (getattr(thread, "_target", None) or getattr(thread, "function", None)
                  or getattr(type(thread).run, "__func__", type(thread).run))
        code = getattr(getattr(target, "__func__", target), "__code__", None)
        if code is None or _users_file(code.co_filename):
            names.append(thread.name)
            continue
        frame = frames.get(thread.ident)
        while frame is not None and not _users_file(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is not None:
            names.append(thread.name)
        del frame
    del frames
    return names


def _users_file(filename: str) -> bool:
    """``filename`` is none of Python's, the installed packages' or the course's files."""
    return not filename.startswith(_LIBRARY_DIRS) and not filename.startswith("<frozen")


def _changes(settings: list[str], names: list[str]) -> str | None:
    """What an answer changed, in words ("changed the default device ..., replaced numpy.allclose
    ... while it ran"), or None: ``settings`` from :func:`_restore_settings`, ``names`` from
    :func:`_put_back`."""
    parts = list(settings)
    if names:
        more = f" and {len(names) - 6} more" if len(names) > 6 else ""
        parts.append("replaced " + ", ".join(names[:6]) + more)
    if not parts:
        return None
    return f"{', '.join(parts)} while it ran (the check put back the originals and compares with those)"


# code during which the alarm does not raise: the time limit being set up or taken down (and
# the rest of this module but what runs inside the answer's calls, _ANSWER_SIDE)
_ANSWER_SIDE = ("_tripwire", "recorded", "_profile", "_stop_line", "_stop_call")
_OWN_CODES = {_Deadline.__enter__.__code__, _Deadline.__exit__.__code__, _Deadline._exit.__code__,
              _unprofiled.__code__, _put_back.__code__, _put_back_own.__code__, _guarded_namespaces.__code__,
              _guarded_spaces.__code__, _Deadline._restore_alarm.__code__, _Deadline._answer_on.__code__}

_STOP_CODES: dict[int, Any] = {}


def _stop_code(free: int) -> Any:
    """The code of a function that raises ``_course_stop[0](*_course_stop[1])`` whatever it is
    called with, with ``free`` free variables (a closure's code may only be swapped for code
    with as many)."""
    if free not in _STOP_CODES:
        names = [f"_course_free{i}" for i in range(free)]
        source = "def _outer():\n"
        source += "".join(f"    {name} = None\n" for name in names)
        source += "    def _course_stopped(*args, _course_stop=None, **kwargs):\n"
        source += "        raise _course_stop[0](*_course_stop[1])\n"
        source += "".join(f"        {name}\n" for name in names)  # (never run: free, not read)
        source += "    return _course_stopped\n"
        namespace: dict[str, Any] = {}
        exec(compile(source, "<course check: stopped>", "exec"), namespace)  # noqa: S102
        _STOP_CODES[free] = namespace["_outer"]().__code__
    return _STOP_CODES[free]


_PENDING: list[Any] = []  # the ctypes callback, kept alive while the interpreter runs


def _pending_call() -> Callable[[Callable[[], None]], None] | None:
    """A function that asks the main thread to run a callable soon (CPython's
    ``Py_AddPendingCall``); None where ctypes or the API is missing."""
    try:
        import ctypes

        kind = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
        add = ctypes.pythonapi.Py_AddPendingCall
        add.argtypes = (kind, ctypes.c_void_p)
        add.restype = ctypes.c_int
    except (ImportError, AttributeError):
        return None
    if not _PENDING:
        queue: list[Callable[[], None]] = []

        def run(_: Any) -> int:
            # a bounded loop: at the recursion limit even queue.pop raises, and the item stays
            for _attempt in (1, 2, 3, 4):
                if not queue:
                    break
                try:
                    queue.pop(0)()
                except BaseException:  # noqa: BLE001 - a pending call must not fail
                    pass
            return 0

        _PENDING.extend([kind(run), queue])
        _OWN_CODES.add(run.__code__)  # (the alarm does not raise in it: it may run in __exit__)
    callback, queue = _PENDING

    def schedule(fn: Callable[[], None]) -> None:
        queue.append(fn)
        add(callback, None)

    return schedule


_STUB_MESSAGES = ("", "your code here")


@dataclass
class Mistake:
    """A common error, written as code so the check can recognise it by its output."""

    key: str
    message: str
    hint: str
    # the slip as code: kept with the reference solutions outside the package (solutions/)
    # and attached for the course's own tests; a check uses the outputs stored from it
    implementation: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        kind = type(self).__name__  # Mistake, RaisingMistake: messages name Class.field
        for name in ("key", "message"):  # a key names the slip in feedback and the store
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{kind}.{name} must be a non-empty str, got {describe_value(value)}")
        if not isinstance(self.hint, str):
            raise TypeError(f"{kind}.hint must be a str, got {describe_value(self.hint)}")
        if self.implementation is not None and not callable(self.implementation):
            raise TypeError(f"{kind}.implementation must be a function or None, got "
                            f"{describe_value(self.implementation)}")
        # a str subclass is kept as the plain str it holds: one whose __repr__ raises made the
        # Mistake unprintable, and its key is compared and stored (battery 31)
        for name in ("key", "message", "hint"):
            object.__setattr__(self, name, plain_str(getattr(self, name), f"{kind}.{name}"))


@dataclass
class Feedback:
    """The result of a check. ``passed`` is True only for a correct answer."""

    exercise: str
    status: str  # "correct" | "not attempted" | "mistake" | "wrong" | "error"
    message: str
    hint: str = ""
    mistake: str | None = None
    # the answer was interrupted or ran past the time limit: no later diagnosis runs it again
    stopped: bool = field(default=False, repr=False, compare=False)

    STATUSES = ("correct", "not attempted", "mistake", "wrong", "error")

    def __post_init__(self) -> None:
        # exactly a str: a subclass whose __eq__ always says yes passed as "wrong" (battery 27)
        if type(self.status) is not str or self.status not in self.STATUSES:
            raise ValueError(f"Feedback.status must be one of {', '.join(map(repr, self.STATUSES))} (a "
                             f"str), got {describe_value(self.status)}")
        for name in ("exercise", "message", "hint"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"Feedback.{name} must be a str, got {describe_value(getattr(self, name))}")
        if self.mistake is not None and (not isinstance(self.mistake, str) or not self.mistake.strip()):
            raise TypeError(f"Feedback.mistake must be a Mistake's key (a non-empty str) or None, got "
                            f"{describe_value(self.mistake)}")
        if not isinstance(self.stopped, bool):  # a truthy "no" would stop every later diagnosis
            raise TypeError(f"Feedback.stopped must be True or False, got {describe_value(self.stopped)}")

    def __setattr__(self, name: str, value: Any) -> None:
        """A field set after the Feedback was made (a diagnosis adds to ``message``) is checked as
        when it was made; a refused value leaves the field as it was (battery 25: ``status``
        set to ``'bogus'`` printed as a failure of no kind)."""
        done = "stopped" in self.__dict__  # __init__ sets the fields in order, stopped last
        old = self.__dict__.get(name)
        object.__setattr__(self, name, value)
        if done:
            try:
                self.__post_init__()
            except (TypeError, ValueError):
                object.__setattr__(self, name, old)
                raise

    @property
    def passed(self) -> bool:
        return self.status == "correct"

    def assert_passed(self) -> None:
        """Print this feedback; under nbgrader, also raise ``AssertionError`` unless correct.

        The lessons' test cells call this. While learning (JupyterLab, Colab, Binder) it only
        prints, so Run All goes on past an exercise not done yet; when nbgrader runs the
        notebook (``nbgrader validate`` sets ``NBGRADER_EXECUTION``) a wrong or missing answer
        raises. This is feedback, not a grade: at autograde the notebook does not run, and
        the outside grader (:mod:`.autograde`, :mod:`.sandbox`) runs each answer's code in a
        separate process and records the points itself.
        """
        say(self)  # ASCII-safe: an ASCII terminal got UnicodeEncodeError for the icon (battery 29)
        if self.status != "correct" and _ENVIRON.get("NBGRADER_EXECUTION"):  # (not self.passed:
            raise AssertionError(str(self))  # a thread may have replaced the property since)

    def __bool__(self) -> bool:
        return self.status == "correct"

    def __repr__(self) -> str:
        icon = {"correct": "✅", "not attempted": "✏️"}.get(self.status, "❌")
        text = f"{icon} {self.exercise}: {self.message}"
        if self.hint:
            text += f"\n   Hint: {self.hint}"
        return text

    __str__ = __repr__


#: The types whose printing runs no code of the answer's (exact types: a subclass may redefine
#: ``__repr__``, ``__len__`` or ``__str__``); anything else is printed under the time limit.
_PLAIN_TYPES = frozenset({int, float, bool, complex, str, bytes, type(None), torch.Tensor,
                          torch.nn.Parameter, np.ndarray, torch.dtype, torch.device, torch.Size,
                          *np.sctypeDict.values()})


def _plain(x: Any, _depth: int = 0, *, whole: bool = False) -> bool:
    """Whether describing ``x`` runs only the course's, torch's and NumPy's code: ``x`` (and
    what :func:`describe_value` shows of a tuple or list in it) has one of :data:`_PLAIN_TYPES`.
    ``whole``: every item of every tuple, list and dict in it, to any depth up to 6 (what a
    comparison may read; deeper counts as not plain)."""
    kind = type(x)
    if kind is tuple or kind is list:
        if whole:
            return _depth < 6 and all(_plain(v, _depth + 1, whole=True) for v in x)
        return _depth >= 3 or all(_plain(v, _depth + 1) for v in x[:8])
    if kind is dict and whole:
        return _depth < 6 and all(_plain(k, _depth + 1, whole=True) and _plain(v, _depth + 1, whole=True)
                                  for k, v in x.items())
    return kind in _PLAIN_TYPES


_EXCEPTION_ARGS = BaseException.__dict__["args"]  # read directly: no __getattribute__ of the answer's


def _plain_exception(exc: Any) -> bool:
    """Whether ``exc`` is an exception of a built-in class (exact type) holding arguments of
    :data:`_PLAIN_TYPES`: reading or printing it runs no code of the answer's."""
    return type(exc) in _BUILTIN_EXCEPTIONS and _plain(_EXCEPTION_ARGS.__get__(exc), whole=True)


#: :func:`_within_time_limit`'s answer when ``make()`` raised before the time limit was reached.
_RAISED: Any = type("_Raised", (), {"__repr__": lambda self: "<raised>"})()


def _within_time_limit(make: Callable[[], str]) -> str | None:
    """``make()``, which runs an answer's own ``__repr__`` or ``__str__``, under the check's time
    limit; None when it is stopped by the limit (battery 23: a ``__str__`` that sleeps held a check
    with a 3 s limit for 121 s), :data:`_RAISED` when it raises before (a message that blamed the
    time limit for a ``__str__`` that raised at once misled: battery 31). An interrupt (Ctrl-C)
    still reaches the learner."""
    start = time.monotonic()
    try:
        if _Deadline._active is not None:  # already under a limit (one per check: never nested)
            return make()
        with _Deadline():
            return make()
    except TimeLimitExceeded:
        if _Deadline._active is not None:  # the stop is the check's to report, not one the answer
            _Deadline._active._taken = True  # swallowed (refused on that limit's exit)
        return None
    except Exception:  # noqa: BLE001 - the answer's own code: any error
        return None if time.monotonic() - start >= _time_limit() else _RAISED


def describe_value(x: Any, _depth: int = 0) -> str:
    """A short description of a value for feedback messages; never raises (a value whose
    ``repr`` fails, or a list that holds itself, is described by its type) and takes at most
    the time limit of one call (a value of the answer's own class is printed under it)."""
    if _depth == 0 and not _plain(x):
        text = _within_time_limit(lambda: _describe(x))
        if text is _RAISED:
            return f"a {type(x).__name__} object (it could not be printed)"
        return text if isinstance(text, str) else \
            f"a {type(x).__name__} object (it could not be printed within the {_time_limit():g} s time limit)"
    return _describe(x, _depth)


def _describe(x: Any, _depth: int = 0) -> str:
    """:func:`describe_value`'s text, with no time limit."""
    try:
        if isinstance(x, torch.Tensor):
            where = "" if x.device.type == "cpu" else f", on the {x.device.type!r} device"
            if x.is_nested:  # it has no one shape: x.shape raises "Internal error"
                count = x.size(0)
                return f"a nested tensor of {count} tensor{'' if count == 1 else 's'} ({x.dtype}{where})"
            layout = "" if x.layout == torch.strided else f"{str(x.layout).removeprefix('torch.')} "
            return f"a {layout}tensor of shape {tuple(x.shape)} ({x.dtype}{where})"
        if isinstance(x, np.ndarray):
            return f"an array of shape {x.shape} ({x.dtype})"
        if isinstance(x, (tuple, list)):
            if _depth >= 3:
                return f"a {type(x).__name__} of {len(x)}"
            shown = ", ".join(_describe(v, _depth + 1) for v in x[:8])
            more = ", ..." if len(x) > 8 else ""
            return f"a {type(x).__name__} of {len(x)} ({shown}{more})"
        text = repr(x)
        if len(text) > 80:
            text = text[:77] + "..."
        return f"{type(x).__name__} {text}"
    except TimeLimitExceeded:  # stopped under the time limit: describe_value says so
        raise
    except BaseException:  # noqa: BLE001 - a broken __repr__ / __len__ still gets a description
        return f"a {type(x).__name__} object (it could not be printed)"


def _without_values(x: Any, _depth: int = 0) -> torch.Tensor | None:
    """The first tensor in ``x`` (itself, or inside a tuple or list) on the 'meta' device: it
    has a shape and a dtype but no values, so nothing can compare it; None when there is none."""
    return _first_tensor_where(x, lambda t: t.device.type == "meta")


def _nested(x: Any) -> torch.Tensor | None:
    """The first nested tensor in ``x`` (``torch.nested``: tensors of several shapes in one,
    with no one shape to compare); None when there is none."""
    return _first_tensor_where(x, lambda t: t.is_nested)


#: The tensor classes an answer may return: a Tensor subclass of its own can redefine what every
#: comparison says (its ``__torch_function__`` sees allclose, equal and ``==``); nn.Parameter does not.
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def _own_subclass(x: Any) -> torch.Tensor | np.ndarray | None:
    """The first tensor or NumPy array in ``x`` whose class is a subclass of ``torch.Tensor`` (not
    :data:`_PLAIN_TENSORS`) or of ``numpy.ndarray``; None when there is none. Its class is read
    with ``type``, which the subclass cannot redefine: an ndarray subclass's ``__eq__``,
    ``__array_ufunc__`` or ``__array_function__`` can make ``np.allclose`` say yes to anything,
    as a Tensor subclass's ``__torch_function__`` can (the outside grader refuses both)."""
    tensor = _first_tensor_where(x, lambda t: type(t) not in _PLAIN_TENSORS)
    return tensor if tensor is not None else \
        _first_tensor_where(x, lambda a: type(a) is not np.ndarray, kind=np.ndarray)


def _first_tensor_where(x: Any, test: Callable[[Any], bool], _depth: int = 0, *,
                        kind: type = torch.Tensor) -> Any:
    """The first tensor (or object of ``kind``, e.g. ``np.ndarray``) in ``x`` (itself, or inside
    a tuple or list, 3 levels deep) that passes ``test``; None when there is none."""
    if isinstance(x, kind):
        return x if test(x) else None
    if isinstance(x, (tuple, list)) and _depth < 3:
        for item in x[:64]:
            found = _first_tensor_where(item, test, _depth + 1, kind=kind)
            if found is not None:
                return found
    return None


def _as_array(x: Any, complex_: bool = False) -> np.ndarray | None:
    """``x`` as a float64 array (complex128 with ``complex_``, so an imaginary part is kept)."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().to(torch.complex128 if complex_ else torch.float64).numpy()
    if isinstance(x, np.ndarray) and _is_numeric(x.dtype):
        return x.astype(np.complex128 if complex_ else np.float64)
    return None


def _arrays_close(got: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> bool:
    """``np.allclose`` (NaN matching NaN) with ``atol`` raised by ``rtol`` times the largest finite
    ``|expected|``. Float rounding of an entry is relative to the terms summed into it, not to the
    entry: a near-zero score of a (5, 8) @ (8, 5) product came out 3.8e-6 apart on an Intel CPU's
    AVX2 path and on an AMD CPU, beyond 1e-6 + 1e-5 * |entry|, so an answer right on one machine
    could be "wrong" against a reference computed on another. A named mistake is wrong by far
    more than ``rtol`` of the output's scale."""
    finite = np.abs(expected[np.isfinite(expected)])
    scale = float(finite.max()) if finite.size else 0.0
    return bool(np.allclose(got, expected, rtol=rtol, atol=atol + rtol * scale, equal_nan=True))


def _array_for_tensor(got: Any, expected: Any, _depth: int = 0) -> bool:
    """True when ``got`` holds a NumPy array of real numbers or bools where ``expected`` holds a
    torch tensor (also inside tuples and lists of the same length). Complex and object arrays are
    left to their own, more specific diagnoses."""
    if isinstance(expected, torch.Tensor):
        return isinstance(got, np.ndarray) and got.dtype.kind in "biuf"
    if _depth < 8 and isinstance(expected, (tuple, list)) and isinstance(got, (tuple, list)) \
            and len(got) == len(expected):
        return any(_array_for_tensor(g, e, _depth + 1) for g, e in zip(got, expected, strict=True))
    return False


_RETURNED_NUMPY = ("you returned a NumPy array where this exercise asks for a torch tensor (the torch "
                   "code that uses the result needs one).",
                   "stay in torch: use the tensors you are given with torch operations, and drop the "
                   ".numpy() / np.* calls.")


def _is_numeric(dtype: Any) -> bool:
    """False for a NumPy array of Python objects, text, bytes, dates or records."""
    return not isinstance(dtype, np.dtype) or dtype.kind in "biufc"


def as_scalar(x: Any) -> Any:
    """A one-element tensor or array, or a numpy scalar, as a Python number; else ``x``."""
    if isinstance(x, torch.Tensor) and x.numel() == 1:
        return x.item()
    if isinstance(x, (np.ndarray, np.generic)) and x.size == 1:
        return x.item()
    return x


def _plain_value(name: str, value: Any) -> Any:
    """``value`` for :func:`outputs_close` to compare: a tensor or NumPy array of a subclass as a
    plain ``torch.Tensor`` / ``np.ndarray`` of the same memory (a subclass's ``__eq__``,
    ``__array_function__``, ``__torch_function__`` or ``shape`` could make any answer match);
    anything else unchanged. Its kind is read with ``type``, which an object cannot redefine.

    Raises TypeError for an object whose ``__class__`` claims to be a tensor or array (it is
    neither) and for a sparse, nested or other non-strided tensor, and ValueError for a tensor on
    the 'meta' device (a shape but no values); each names ``name``."""
    kind = type(value)
    if isinstance(value, (torch.Tensor, np.ndarray)) and not issubclass(kind, (torch.Tensor, np.ndarray)):
        raise TypeError(f"outputs_close: {name} is a {kind.__name__} object whose __class__ claims to be "
                        "a tensor or array; expected a real torch.Tensor or np.ndarray, or a plain value")
    if issubclass(kind, np.ndarray):
        return value if kind is np.ndarray else np.asarray(value)  # asarray drops the subclass
    if not issubclass(kind, torch.Tensor):
        return value
    if kind not in _PLAIN_TENSORS:
        try:
            with torch._C.DisableTorchFunctionSubclass():  # its __torch_function__ is not asked
                value = torch.Tensor.as_subclass(value, torch.Tensor)
        except Exception as exc:  # noqa: BLE001 - a wrapper subclass with no storage of its own
            raise TypeError(f"outputs_close: {name} is a {kind.__name__} (a Tensor subclass) that cannot "
                            f"be read as a plain tensor ({type(exc).__name__}); expected a torch.Tensor"
                            ) from None
    layout = torch.Tensor.layout.__get__(value)
    if torch.Tensor.is_nested.__get__(value) or layout != torch.strided:
        raise TypeError(f"outputs_close: {name} is {describe_value(value)}; expected a dense (strided) "
                        "tensor, e.g. via .to_dense(), to compare entry by entry")
    if value.device.type == "meta":
        raise ValueError(f"outputs_close: {name} is {describe_value(value)}, which has a shape but "
                         "no values to compare; expected a tensor with values (on the CPU or a GPU)")
    return value


def _check_tolerances(rtol: Any, atol: Any) -> None:
    """Tolerances are finite non-negative real numbers (a negative one matches nothing)."""
    for name, value in (("rtol", rtol), ("atol", atol)):
        if not is_real(value) or not finite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {type(value).__name__} "
                             f"{shown(value)}")


def outputs_close(got: Any, expected: Any, *, rtol: float = 1e-5, atol: float = 1e-6,
                  _depth: int = 0) -> bool:
    """True when ``got`` matches ``expected``: same structure, same shapes, close values; an
    integer or bool result never matches a floating-point answer, and a str, bool or None
    only matches a value of that very kind (not an object whose ``==`` says yes). NaN matches
    NaN (in a tensor, an array or a plain number). Tensors and arrays are close entry by entry
    within ``atol + rtol * (|entry| + the largest finite |expected|)``: see :func:`_arrays_close`.

    Raises ValueError for a tensor on the 'meta' device (it has no values to compare) and for
    an ``expected`` nested more than 100 lists deep (a list that holds itself), and TypeError
    when two objects of another kind cannot be compared (their ``==`` raised)."""
    _check_tolerances(rtol, atol)
    if _depth > 100:
        raise ValueError("outputs_close: expected is a tuple or list nested more than 100 levels deep "
                         "(one that holds itself?); expected an output of the exercise's kind")
    got, expected = _plain_value("got", got), _plain_value("expected", expected)
    if isinstance(expected, _answers.Raised):
        return False
    if isinstance(expected, (tuple, list)):
        return (
            isinstance(got, (tuple, list))
            and len(got) == len(expected)
            and all(outputs_close(g, e, rtol=rtol, atol=atol, _depth=_depth + 1)
                    for g, e in zip(got, expected, strict=False))
        )
    if isinstance(expected, (torch.Tensor, np.ndarray)):
        if not isinstance(got, (torch.Tensor, np.ndarray)) or tuple(got.shape) != tuple(expected.shape):
            return False  # shapes first: no float64 copy of an answer of the wrong size
        if _is_integral(got.dtype) and not _is_integral(expected.dtype):
            return False
        if _is_complex(got.dtype) and not _is_complex(expected.dtype):
            return False  # converting would drop the imaginary part, with only a warning
        if not _is_numeric(got.dtype):
            return False  # Python objects, text: no numbers to compare
        as_complex = _is_complex(expected.dtype)  # a real answer is compared with both parts
        return _arrays_close(_as_array(got, as_complex), _as_array(expected, as_complex), rtol, atol)
    if expected is None:
        return got is None
    if isinstance(expected, bool):
        return isinstance(got, (bool, np.bool_)) and bool.__eq__(bool(got), expected)
    if isinstance(expected, str):
        return isinstance(got, str) and str.__eq__(got, expected) is True
    if isinstance(expected, (int, float)):
        got = as_scalar(got)
        if not isinstance(got, (int, float, np.integer, np.floating)) or isinstance(got, bool):
            return False
        try:
            got_float, expected_float = float(got), float(expected)
        except OverflowError:  # an int too large for a float: it matches only the very same int
            return isinstance(got, (int, np.integer)) and isinstance(expected, int) and int(got) == expected
        if math.isnan(got_float) and math.isnan(expected_float):
            return True  # as in a tensor (equal_nan): the same output twice is the same
        return math.isclose(got_float, expected_float, rel_tol=rtol, abs_tol=atol)
    if type(got) is not type(expected):
        return False
    try:
        return bool(got == expected)
    except Exception as exc:  # noqa: BLE001 - an __eq__ or __bool__ that raises
        raise TypeError(f"outputs_close: cannot compare got ({describe_value(got)}) with expected "
                        f"({describe_value(expected)}): their == raised {type(exc).__name__}: "
                        f"{_safe_str(exc, 200)}") from None


def _call(fn: Callable[..., Any], case: Case) -> Any:
    args, kwargs = case.fresh()
    return fn(*args, **kwargs)


def _edited_input(case: Case, args: tuple, kwargs: dict) -> str | None:
    """Which tensor or array input the answer changed in place (``args[i]`` or the keyword),
    comparing the copies it was given with the case's own; None when it changed none."""
    given = [(f"(argument {i + 1})", a, b) for i, (a, b) in enumerate(zip(case.args, args, strict=False))]
    given += [(f"`{k}`", case.kwargs[k], kwargs[k]) for k in case.kwargs if k in kwargs]
    for name, original, passed in given:
        if isinstance(original, torch.Tensor) and isinstance(passed, torch.Tensor):
            same = (original.shape == passed.shape and original.dtype == passed.dtype
                    and bool(torch.equal(original.nan_to_num(), passed.detach().nan_to_num())))
        elif isinstance(original, np.ndarray) and isinstance(passed, np.ndarray):
            same = original.shape == passed.shape and bool(np.array_equal(original, passed, equal_nan=True))
        elif isinstance(original, torch.nn.Module) and isinstance(passed, torch.nn.Module):
            same = _same_module(original, passed)
        elif _is_pandas(original):
            same = _same_table(original, passed)
        else:
            continue
        if not same:
            return name
    return None


_MODULE_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
                 "_state_dict_hooks", "_load_state_dict_pre_hooks")


def _same_module(original: torch.nn.Module, passed: torch.nn.Module) -> bool:
    """True when the copy of a torch module the answer was given (:meth:`Case.fresh`) still has
    the original's parameters and buffers, values included, and no hook the original lacks."""
    try:
        mine, theirs = original.state_dict(), passed.state_dict()
        if list(mine) != list(theirs):
            return False
        for key, value in mine.items():
            other = theirs[key]
            if not (isinstance(other, torch.Tensor) and other.shape == value.shape
                    and other.dtype == value.dtype
                    and bool(torch.equal(value.nan_to_num(), other.detach().nan_to_num()))):
                return False
        pairs = zip(original.modules(), passed.modules(), strict=False)
        return all(len(getattr(a, name, {}) or {}) == len(getattr(b, name, {}) or {})
                   for a, b in pairs for name in _MODULE_HOOKS)
    except Exception:  # noqa: BLE001 - a module too broken to read: changed
        return False


def _same_table(original: Any, passed: Any) -> bool:
    """True when ``passed`` is a pandas table (or Series) of the same type, values, row labels
    and columns as ``original``."""
    try:
        return (type(passed) is type(original) and bool(original.equals(passed))
                and bool(original.index.equals(passed.index))
                and (not hasattr(original, "columns") or bool(original.columns.equals(passed.columns))))
    except Exception:  # noqa: BLE001 - a table too broken to compare: changed
        return False


def _changes_its_input(fn: Callable[..., Any], cases: list[Case]) -> bool:
    """True when ``fn`` changes an input it was given in place on one of ``cases`` (run again,
    under the time limit: a check asks this only of an answer that was already wrong)."""
    for case in cases:
        args, kwargs = case.fresh()
        try:
            with _Deadline():
                fn(*args, **kwargs)
        except BaseException:  # noqa: BLE001 - the check already said what it could
            return False
        if _edited_input(case, args, kwargs) is not None:
            return True
    return False


def _parameter_name(fn: Any, edited: str) -> str:
    """``edited`` as :func:`_edited_input` names it, with the answer's own parameter name when
    it is ``(argument i)`` and ``fn``'s signature can be read: "`x` (argument 1)"."""
    import inspect

    match = re.fullmatch(r"\(argument (\d+)\)", edited)
    if match is None:
        return edited
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return edited
    index = int(match.group(1)) - 1
    return f"`{params[index].name}` {edited}" if index < len(params) else edited


def _ints_as_floats(got: Any, expected: Any) -> Any:
    """``got`` as float64 when it is an integer (not bool) tensor or array of ``expected``'s
    shape and ``expected`` is floating point; otherwise ``got`` itself."""
    if not (isinstance(got, (torch.Tensor, np.ndarray)) and isinstance(expected, (torch.Tensor, np.ndarray))
            and tuple(got.shape) == tuple(expected.shape) and _is_integral(got.dtype)
            and not _is_integral(expected.dtype) and str(got.dtype).removeprefix("torch.") != "bool"):
        return got
    return _as_array(got)


def _is_integral(dtype: Any) -> bool:
    """True for an integer or bool dtype of torch or NumPy."""
    if isinstance(dtype, torch.dtype):
        return not (dtype.is_floating_point or dtype.is_complex)
    if isinstance(dtype, np.dtype):
        return dtype.kind in "biu"
    return False


def _source_text(fn: Any) -> str:
    """The source code of the learner's function, or "" when it cannot be read."""
    import inspect

    try:
        return inspect.getsource(_unwrap(fn))
    except (OSError, TypeError):
        return ""


def _is_complex(dtype: Any) -> bool:
    """True for a complex dtype of torch or NumPy."""
    if isinstance(dtype, torch.dtype):
        return dtype.is_complex
    if isinstance(dtype, np.dtype):
        return dtype.kind == "c"
    return False


def _own_class_name(got: Any) -> str:
    """The name of the first class in ``got`` (the outputs' list, an output or an exception) that
    is not one of :data:`_PLAIN_TYPES`, found by ``type`` and exact tuples and lists only (no
    method of the answer's runs): what :meth:`Exercise._examined` names."""
    found = type(got)
    if type(got) is list or type(got) is tuple:
        for item in got[:64]:
            if not _plain(item):
                return _own_class_name(item)
    return found.__qualname__ if type(found.__dict__.get("__qualname__", "")) is str else found.__name__


def _safe_str(exc: BaseException, limit: int = 2000) -> str:
    """``str(exc)``, cut to ``limit`` characters; a description when it cannot be printed. An
    exception of the answer's own class, or one holding the answer's objects, is printed under
    the time limit of one call (:func:`_within_time_limit`)."""
    if _plain_exception(exc):
        try:
            text = str(exc)
        except BaseException:  # noqa: BLE001
            return f"a {type(exc).__name__} that could not be printed"
    elif any(seen is type(exc) for seen in _UNPRINTED):  # (a check may run the answer again)
        text = None
    else:
        text = _within_time_limit(lambda: str(exc))
        if text is _RAISED:  # at once: no time limit was reached
            return f"a {type(exc).__name__} that could not be printed"
    if text is None:
        if not any(seen is type(exc) for seen in _UNPRINTED):
            _UNPRINTED[:] = [*_UNPRINTED[-7:], type(exc)]
        return (f"a {type(exc).__name__} that could not be printed within the "
                f"{_time_limit():g} s time limit")
    if not isinstance(text, str):
        return f"a {type(exc).__name__} whose message is not text"
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters in all)"


#: The last few exception classes whose ``str`` was stopped by the time limit: not tried again
#: (a check that names a slip runs the answer a second time, for a new exception of that class).
_UNPRINTED: list[type] = []

#: The built-in exception classes (exact types), whose ``str`` runs no code of the answer's when
#: their arguments are of :data:`_PLAIN_TYPES`.
_BUILTIN_EXCEPTIONS = frozenset(v for v in vars(builtins).values()
                                if isinstance(v, type) and issubclass(v, BaseException))


# A name an answer uses without importing it: the import that binds it, and (for math) the torch
# form that needs none (learner trial l21: `math.sqrt(dk)` in lesson 01, which imports no math).
_IMPORTS_FOR = {
    "math": ("import math", "or use the torch form, which needs no import: `dk ** 0.5` for a number, "
             "`torch.sqrt(t)` for a tensor, `torch.exp`, `torch.log`, `torch.pi`"),
    "np": ("import numpy as np", "or stay with torch: a tensor has the same operations"),
    "numpy": ("import numpy", "or stay with torch: a tensor has the same operations"),
    "F": ("import torch.nn.functional as F", ""),
    "nn": ("from torch import nn", ""),
    "torch": ("import torch", ""),
    "einops": ("import einops", "or use `view`, `reshape` and `transpose`"),
    "itertools": ("import itertools", ""),
    "functools": ("import functools", ""),
    "collections": ("import collections", ""),
}


def _undefined_name(exc: BaseException) -> str | None:
    """The name a ``NameError`` says is not defined (a local read before it is set, an
    ``UnboundLocalError``, is another slip: None); read from the message too, since the grader
    rebuilds the exception from its type and text."""
    import re

    if not isinstance(exc, NameError) or isinstance(exc, UnboundLocalError):
        return None
    name = getattr(exc, "name", None)
    if isinstance(name, str) and name.isidentifier():
        return name
    found = re.match(r"name '([A-Za-z_][A-Za-z0-9_]*)' is not defined", _safe_str(exc))
    return found.group(1) if found else None


def _undefined_name_hint(name: str) -> str:
    """What to do about ``name``, which an answer used but nothing defined."""
    if name in _IMPORTS_FOR:
        line, other = _IMPORTS_FOR[name]
        return (f"`{name}` is a module this notebook has not imported: add `{line}` to your answer "
                f"cell, above the `def` line" + (f" ({other})" if other else "") + ".")
    return (f"nothing in this kernel defines `{name}`: check its spelling (Python tells `Dk` from "
            f"`dk`), set it inside your function, or run the cell that defines it first.")


# (cells run so far, "lessonNN.check_xxx") -> a warning or None; set by the grader's module
# (.sandbox, imported with the package) so that this module imports nothing of the grader
GRADING_NOTE: Callable[[Sequence[str], str], str | None] | None = None


# "lessonNN.check_xxx" -> the names of its ready-made twins (the last part of each name in
# LIBRARY_TWINS, and the grader's extra ones); set by the grader's module (.sandbox)
TWIN_NAMES: Callable[[str], frozenset[str]] | None = None


# code cells -> what in them reads the course's stored answers (sorted; empty when nothing
# does), by the grader's own rule (:func:`.sandbox.store_reads`); set by the grader's module
STORE_READS: Callable[[Sequence[str]], list[str]] | None = None


def _answer_functions(fn: Any, limit: int = 64) -> list[Any]:
    """``fn`` (unwrapped) and the functions it reaches through the globals its code names and
    its closure, transitively, leaving out the course's, the libraries' and the standard
    library's own functions (files under :data:`_LIBRARY_DIRS`)."""
    found: list[Any] = []
    todo, seen = [_unwrap(fn)], set()
    while todo and len(found) < limit:
        f = todo.pop()
        code = getattr(f, "__code__", None)
        if id(f) in seen or not isinstance(code, types.CodeType) \
                or code.co_filename.startswith(_LIBRARY_DIRS):
            continue
        seen.add(id(f))
        found.append(f)
        names, codes = set(), [code]
        while codes:
            current = codes.pop()
            names |= set(current.co_names)
            codes += [c for c in current.co_consts if isinstance(c, types.CodeType)]
        namespace = getattr(f, "__globals__", None)
        values = [namespace.get(n) for n in names] if isinstance(namespace, dict) else []
        values += list(getattr(f, "__defaults__", None) or ())
        values += list((getattr(f, "__kwdefaults__", None) or {}).values())
        for cell in getattr(f, "__closure__", None) or ():
            try:
                values.append(cell.cell_contents)
            except ValueError:  # (an empty cell)
                pass
        todo += [_unwrap(v) for v in values if callable(v)]
        found += [v for v in values if v is _answers or getattr(v, "__module__", None) == _answers.__name__]
    return found


def _kernel_store_reads(fn: Any, cells: Sequence[str] | None) -> list[str]:
    """What this kernel did that reads the course's stored answers: the code cells run so far
    (``cells``, None outside IPython), the answer's own code and the functions it reaches
    (:func:`_answer_functions`), by the grader's rule (:data:`STORE_READS`); empty when none."""
    if STORE_READS is None:
        return []
    sources, found = list(cells or ()), set()
    for f in _answer_functions(fn):
        if f is _answers or getattr(f, "__module__", None) == _answers.__name__:
            found.add(f"`{getattr(f, '__name__', 'answers')}` (the course's stored answers)")
        else:
            sources.append(textwrap.dedent(_source_text(f)))  # (a nested def is indented)
    return sorted(found | set(STORE_READS([s for s in sources if isinstance(s, str) and s])))


def _kernel_cells() -> list[str] | None:
    """The code cells run so far in this IPython kernel, the current one (the test cell) last;
    None outside IPython or when its history cannot be read."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    history = getattr(shell, "user_ns", {}).get("In") if shell is not None else None
    if not isinstance(history, list) or not all(isinstance(c, str) for c in history):
        return None
    return list(history)


def outcome(fn: Callable[..., Any], case: Case) -> Any:
    """``fn``'s output on ``case``, or :class:`~.answers.Raised` describing what it raised.
    ``case`` must be a :class:`Case` (checked before ``fn`` runs: anything else is the caller's
    mistake, not something the answer raised)."""
    import warnings

    if not isinstance(case, Case):
        raise TypeError(f"outcome: case must be a Case (the inputs to call fn with), got "
                        f"{type(case).__name__} {shown(case, 60)}")

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _call(fn, case)
    except (Exception, *_EXITS) as exc:  # noqa: BLE001 - a raise is an outcome here
        return _answers.Raised(type(exc).__name__, _safe_str(exc))


# One list per answer being run by a check (innermost last): the titles of the checks that
# answer called. A check called there grades nothing; the check running the answer names it.
_CHECKS_INSIDE_ANSWERS: list[list[str]] = []


class _AnswerRunning:
    """While an answer runs: checks it calls are recorded in ``called``, not run."""

    def __init__(self, called: list[str]) -> None:
        self.called = called

    def __enter__(self) -> None:
        _CHECKS_INSIDE_ANSWERS.append(self.called)

    def __exit__(self, *exc: object) -> None:
        # by identity (another answer's list may be equal); an entry a stop left behind is
        # cleared by the outermost check (_never_raises)
        for i in range(len(_CHECKS_INSIDE_ANSWERS) - 1, -1, -1):
            if _CHECKS_INSIDE_ANSWERS[i] is self.called:
                del _CHECKS_INSIDE_ANSWERS[i]
                break


def _never_raises(check: Callable[..., Feedback]) -> Callable[..., Feedback]:
    """``check`` made to answer every failure of its own with an error Feedback."""
    import functools

    own = _put_back_own  # (bound here: an answer may rebind the module's name)

    @functools.wraps(check)
    def guarded(self: Exercise, *args: Any, **kwargs: Any) -> Feedback:
        slip = _call_slip(args, kwargs)
        if slip is not None:  # (Python's TypeError would escape the check: say it in the feedback)
            return Feedback(self.title, "error", slip, _CALL_HINT)
        fn = args[0] if args else kwargs["fn"]
        try:
            return graded(self, fn)
        except TimeLimitExceeded as exc:  # a stop that reached the check after the answer's call
            if _THREADS_AT_START:  # (a check inside an answer: the stop is for that answer)
                raise
            return self._stopped(exc, None)  # (its trace function struck late: battery 22)

    def graded(self: Exercise, fn: Callable[..., Any]) -> Feedback:
        replaced = own()  # an earlier cell's rebinding of this module's helpers: put back, named
        outermost = not _THREADS_AT_START
        if outermost:  # no check runs an answer now: an entry is one a time-limit stop left behind
            _CHECKS_INSIDE_ANSWERS.clear()  # while its answer was being left (battery 16)
        if _CHECKS_INSIDE_ANSWERS:  # called by an answer that a check is running: say so there
            _CHECKS_INSIDE_ANSWERS[-1].append(self.title)
            return Feedback(self.title, "error", "a check cannot run inside an answer that is being "
                            "checked; the outer check says so.")
        if outermost:  # a patch made before this check (a cell, a leftover thread): put back, named
            try:
                before = replaced + _restore_originals()
            except Exception:  # noqa: BLE001 - (the per-answer guard still runs)
                before = replaced
        if _tampered():  # the check's own machinery was seen tampered with: no verdict, ever again
            return _untrusted_kernel(self)
        if outermost:  # (start noted first: a thread started from now on has its starter noted)
            _STARTED_BY.clear()
            type.__setattr__(threading.Thread, "start", _start_noting_who)
            present = threading.enumerate()
            _PRESENT_AT_START.clear()
            _PRESENT_AT_START.update((id(t), t) for t in present)
            _THREADS_AT_START.append({t.ident for t in present} - {threading.get_ident()})
        settings = _process_settings()  # also after calls outside the time limit (a probe call)
        # this thread's profiler as it was: not a row of _SETTINGS, which each time limit puts back
        # on exit, before the call watch around it can see an answer switched its profiler off; a
        # check's run of the answer under a time limit alone (4.4's second look) left it installed
        profiler = _getprofile()
        _CHECK_LIMITS.append(_time_limit())  # read once, before the answer can change it
        try:
            feedback = check(self, fn)
        except BaseException as exc:  # noqa: BLE001 - a check answers with a message, always
            feedback = Feedback(self.title, "error",
                                f"the check could not grade this answer ({type(exc).__name__}: "
                                f"{_safe_str(exc)}).", self.hint)
        finally:
            replaced = own()  # rebound outside the time limit (a probe call): named below
            _CHECK_LIMITS.pop()
            _restore_settings(settings)
            _setprofile(profiler)
            if outermost:
                _THREADS_AT_START.pop()
                _CHECKS_INSIDE_ANSWERS.clear()
                type.__setattr__(threading.Thread, "start", _thread_start)
                _STARTED_BY.clear()
                _PRESENT_AT_START.clear()
        if outermost:
            try:
                during = replaced + _restore_originals()
            except Exception:  # noqa: BLE001
                during = replaced
            feedback = _kernel_feedback(self, feedback, before, during)
        if _tampered():  # seen during this check: a verdict that is not "correct" stands, told so
            if feedback.passed:
                return _untrusted_kernel(self)
            feedback.message += (" No later check in this kernel can be trusted: restart the kernel "
                                 "(Kernel > Restart).")
        return feedback

    return guarded


_CALL_HINT = ("pass the function you wrote, by its name and without calling it: for example "
              "check_split_heads(split_heads), not check_split_heads() or "
              "check_split_heads(split_heads(x, 2)).")


def _call_slip(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """What is wrong with how a check was called (it takes one argument, the answer), or None."""
    if len(args) == 1 and not kwargs or not args and list(kwargs) == ["fn"]:
        return None
    given = len(args) + len(kwargs)
    if given == 0:
        what = "with no argument: pass it your function"
    else:
        parts = [f"{len(args)} argument{'s' if len(args) != 1 else ''}"] if args else []
        if kwargs:
            names = ", ".join(str.__str__(k)[:40] for k in list(kwargs)[:4])
            names += ", ..." if len(kwargs) > 4 else ""
            parts.append(f"the keyword argument{'s' if len(kwargs) != 1 else ''} {names}")
        what = f"with {' and '.join(parts)}: pass it your function alone"
    return f"the check takes one argument, your function, and was called {what}. Nothing was graded."


def _untrusted_kernel(exercise: Exercise) -> Feedback:
    """The answer of every check once one saw its own machinery (the golden copies it puts back
    and compares with, :data:`_MACHINERY`) tampered with in this kernel (:func:`_one_way_flag`)."""
    return Feedback(exercise.title, "error",
                    f"code run in this kernel tampered with {_names_text(list(_tampered()))}, the copies "
                    "the checks put back and compare with, so no check in this kernel can be trusted any "
                    "more: restart the kernel (Kernel > Restart), remove that code and run your cells "
                    "again.", exercise.hint)


def _names_text(names: list[str]) -> str:
    names = [n.replace("course_utils.exercises.", "") for n in names]
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def _kernel_feedback(exercise: Exercise, feedback: Feedback, before: list[str],
                     during: list[str]) -> Feedback:
    """``feedback``, told what something else in the kernel replaced: ``before`` the check ran
    (put back: the check graded with the originals), or ``during`` it, after the answer's
    own calls (a thread: the comparison itself may have used the replacement, so no verdict)."""
    if during:
        return Feedback(exercise.title, "error",
                        f"something in this kernel replaced {_names_text(during)} while the check was "
                        "comparing (a thread an earlier cell started?), so this check's verdict "
                        "cannot be trusted; the check put back the originals. Run the check again, "
                        "and restart the kernel (Kernel > Restart) if this happens again.", exercise.hint)
    if before:
        feedback.message += (f" (Something in this kernel replaced {_names_text(before)} before this "
                             "check ran; the check put back the originals and graded with those.)")
    return feedback


def _check_no_arguments(make_cases: Callable[..., Any]) -> None:
    """``make_cases`` can be called with no arguments (a signature Python cannot read passes):
    a wrong one would otherwise be found only when a check first builds the cases."""
    import inspect

    try:
        signature = inspect.signature(make_cases)
    except (TypeError, ValueError):
        return
    try:
        signature.bind()
    except TypeError:
        raise TypeError(f"make_cases must be a function of no arguments that returns the cases, got "
                        f"{getattr(make_cases, '__name__', type(make_cases).__name__)}{signature}") from None


class _StoreProblem(Exception):
    """The stored answers are missing, unreadable or made for other inputs."""


def _unwrap(fn: Any) -> Any:
    """The plain function behind a partial, a bound method or a decorated function."""
    for _ in range(10):
        inner = getattr(fn, "func", None) or getattr(fn, "__func__", None) or getattr(fn, "__wrapped__", None)
        if inner is None:
            return fn
        fn = inner
    return fn


def _resolve(dotted: str) -> Any:
    """``"pkg.module.Class.attr"`` -> the object, or None when it does not exist."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


# Modules of an earlier import of course_utils, by name, whose functions the watch also covers:
# autograde re-imports the package afresh, but the student's code may hold the first copy's
# functions (a thread pool started in an earlier cell calls those, not the fresh ones).
OTHER_COPIES: list[dict[str, Any]] = []


def _resolve_in(modules: dict[str, Any], dotted: str) -> Any:
    """``dotted`` looked up in ``modules`` (module name -> module), or None."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        obj = modules.get(".".join(parts[:split]))
        if obj is None:
            continue
        for attr in parts[split:]:
            obj = getattr(obj, attr, None)
        return obj
    return None


def _is_stub(fn: Callable[..., Any], exc: NotImplementedError) -> bool:
    """True when ``exc`` is the stub's own bare ``raise NotImplementedError``.

    It must come from the learner's function itself (the innermost frame of the
    traceback runs ``fn``'s code), with no message or the stub's placeholder message.
    """
    if len(exc.args) > 1 or (exc.args and str(exc.args[0]).strip() not in _STUB_MESSAGES):
        return False
    code = getattr(_unwrap(fn), "__code__", None)
    tb = exc.__traceback__
    if tb is None or code is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code is code


def _tripwire(*args: Any, _course_trip: Any = None, **kwargs: Any) -> Any:
    """Stands in for a watched Python function while a check runs (see :class:`_CallWatch`):
    records the call, in whatever thread it happens, then runs the original."""
    watch, name, original = _course_trip
    watch.record(name)
    return original(*args, **kwargs)


_TORCH_NAMESPACES = ("torch", "torch.nn.functional", "torch.special", "torch.linalg")


def _where_bound(f: Any) -> list[tuple[Any, str]]:
    """``(module, attribute)`` pairs of torch's namespaces that hold the builtin ``f``."""
    found = []
    for module_name in _TORCH_NAMESPACES:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        found += [(module, attr) for attr, value in vars(module).copy().items() if value is f]
    return found


def _recording(watch: Any, name: str, f: Any) -> Callable[..., Any]:
    """``f`` behind a wrapper that tells ``watch`` it was called, then calls it."""
    def recorded(*args: Any, **kwargs: Any) -> Any:
        watch.record(name)
        return f(*args, **kwargs)

    recorded._course_recording = True  # type: ignore[attr-defined]
    recorded.__wrapped_builtin__ = f  # type: ignore[attr-defined]
    return recorded


class _CallWatch:
    """Records, while active, the first call to any of ``functions`` (Python or builtin).

    Python functions are recognised under any alias or import path and in any thread: for
    the duration of the check their code is swapped for :func:`_tripwire`, which records
    the call and runs the original. The rest (builtins, functions with closures) are seen by
    a profiler (``sys.setprofile``) in this thread and in threads started meanwhile
    (``threading.setprofile``). An answer that switches either profiler off, or that leaves
    a watched function changed, is reported (:attr:`tampered`). Everything is restored on exit.
    """

    def __init__(self, functions: Sequence[Any], *, first_is_reference: bool = False,
                 twin_names: Sequence[str] = (), library_twins: Sequence[Any] = ()):
        self._codes: dict[Any, str] = {}
        # builtins and torch operators seen by name (battery 24: torch.special.softmax, Tensor.softmax
        # and torch.ops.aten._softmax are other objects than torch.softmax, and were not seen)
        self._twin_names = frozenset(_bare_name(n) for n in twin_names) | frozenset(
            _bare_name(f.__name__) for f in map(_unwrap, functions)
            if getattr(f, "__code__", None) is None and type(getattr(f, "__name__", None)) is str)
        self._twin_parts = tuple(part for part in _TWIN_NAME_PARTS
                                 if any(part in name for name in self._twin_names))
        self._copies: dict[tuple, str] = {}  # a watched function's code by its content (a copy of it)
        self._seen: dict[Any, str] = {}  # each other code object run, and what it is ("": nothing)
        self._builtins: dict[int, str] = {}
        self._swappable: list[tuple[types.FunctionType, str]] = []
        self._attributes: list[tuple[Any, str, Any, str]] = []  # builtins, by where torch binds them
        for i, f in enumerate(functions):  # the first is the exercise's reference
            f = _unwrap(f)
            name = f"{getattr(f, '__module__', '') or ''}.{getattr(f, '__qualname__', repr(f))}".lstrip(".")
            name = name.replace("torch._C._nn.", "torch.nn.functional.")  # F.* builtins' real module
            name = name.replace("torch._VariableFunctionsClass.", "torch.")  # torch.* builtins
            name = f"`{name.replace('course_utils.exercises.', '')}`"
            if "<" in name:  # a lambda or a local function: its name says nothing
                name = ""
            if i == 0 and first_is_reference:
                name = f"the exercise's reference solution {name}".rstrip()
            name = name or "a function the check keeps for itself"
            code = getattr(f, "__code__", None)
            if code is not None:
                self._codes.setdefault(code, name)
                if isinstance(f, types.FunctionType) and not code.co_freevars and f is not _tripwire:
                    self._swappable.append((f, name))
            elif callable(f):
                self._builtins.setdefault(id(f), name)
                self._attributes += [(module, attr, f, name) for module, attr in _where_bound(f)]
        for f in map(_unwrap, library_twins):  # never the reference or a mistake: a right answer's
            code = getattr(f, "__code__", None)  # code may well be the reference's, to the letter
            if isinstance(code, types.CodeType) and code in self._codes:
                self._copies.setdefault(_code_content(code), self._codes[code])
        self.used: str | None = None
        self.tampered: str | None = None
        self._previous: Any = None
        self._previous_threads: Any = None
        self._saved: list[tuple[types.FunctionType, Any, Any]] = []
        self._lock = threading.Lock()

    def record(self, name: str) -> None:
        with self._lock:
            if self.used is None:
                self.used = name

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if self.used is not None:
            return
        if event == "call":
            name = self._codes.get(frame.f_code)
            if name is None:
                name = self._seen.get(frame.f_code)
                if name is None:
                    name = self._seen[frame.f_code] = self._twin_code(frame.f_code)
                name = name or None
            if name is None and frame.f_code is _OP_OVERLOAD_CALL and self._twin_names:
                op = frame.f_locals.get("self")  # an OpOverload: torch.ops.aten.NAME.overload
                opname = op._opname if type(op) is _OP_OVERLOAD else None
                if type(opname) is str and self._is_twin(opname):
                    name = f"`torch.ops.aten.{opname}`"
        elif event == "c_call":
            name = self._builtins.get(id(arg))
            if name is None and self._twin_names:
                bare = getattr(arg, "__name__", None)  # a builtin's own name: never the answer's
                if type(bare) is str and self._is_twin(bare):
                    qualname = getattr(arg, "__qualname__", bare)
                    name = (f"`torch.ops.aten.{bare}`" if type(qualname) is not str
                            or qualname.startswith("pybind11") else f"`{qualname}`")
        else:
            return
        if name is not None:
            self.record(name)

    def _twin_code(self, code: Any) -> str:
        """What ``code`` is, when it is a watched function's in all but its name (a copy made
        with ``__code__.replace``), or a library's function or method of a twin's name
        (``nn.MultiheadAttention.__init__`` where the twins hold ``MultiheadAttention``); "" when
        neither (battery 24: copies of the course's functions and torch's modules passed)."""
        copied = self._copies.get(_code_content(code))
        if copied is not None:
            return copied
        if self._twin_names and code.co_filename.startswith(_LIBRARY_DIRS):
            qualname = getattr(code, "co_qualname", code.co_name)  # (Python 3.10: the name alone)
            if any(self._is_twin(part) for part in qualname.split(".") if part != "<locals>"):
                return f"`{qualname}`"
        return ""

    def _is_twin(self, name: str) -> bool:
        """Whether a builtin's or a torch operator's ``name`` is one of the twins, whatever its
        prefix (``_softmax``, ``special_softmax``) or a part of one (``scaled_dot_product``)."""
        bare = _bare_name(name)
        return bare in self._twin_names or any(part in bare for part in self._twin_parts)

    def __enter__(self) -> _CallWatch:
        self._previous = sys.getprofile()
        self._previous_threads = threading.getprofile()
        seen: set[int] = set()
        for f, name in self._swappable:
            if id(f) in seen:
                continue
            seen.add(id(f))
            original = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__,
                                          f.__closure__)
            original.__kwdefaults__ = f.__kwdefaults__
            self._saved.append((f, f.__code__, f.__kwdefaults__))
            f.__code__ = _tripwire.__code__
            f.__kwdefaults__ = {"_course_trip": (self, name, original)}
        for module, attr, f, name in self._attributes:  # a builtin looked up during the answer,
            setattr(module, attr, _recording(self, name, f))  # in any thread, also from C (map)
        self._profiler = self._profile  # one bound method, to recognise it again on exit
        threading.setprofile(self._profiler)
        sys.setprofile(self._profiler)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        current, current_threads = sys.getprofile(), threading.getprofile()
        sys.setprofile(self._previous)
        threading.setprofile(self._previous_threads)
        changed = []
        for f, code, kwdefaults in reversed(self._saved):
            trip = f.__kwdefaults__ or {}
            if f.__code__ is not _tripwire.__code__ or trip.get("_course_trip", (self,))[0] is not self:
                changed.append(f.__qualname__)
            f.__code__, f.__kwdefaults__ = code, kwdefaults
        self._saved.clear()
        for module, attr, f, _ in self._attributes:
            if not getattr(getattr(module, attr, None), "_course_recording", False):
                changed.append(f"{module.__name__}.{attr}")
            setattr(module, attr, f)
        if current is not self._profiler or current_threads is not self._profiler:
            self.tampered = self.tampered or "switched off the check's call watch (sys.setprofile or " \
                                             "threading.setprofile)"
        elif changed:
            self.tampered = self.tampered or f"changed the code of {', '.join(changed)} while it ran"


def _code_content(code: types.CodeType) -> tuple:
    """What a function's code does, whatever its name: its bytecode, constants, names and local
    variable names (equal for a copy made with ``code.replace(co_name=...)``)."""
    return (code.co_code, code.co_consts, code.co_names, code.co_varnames)


def _bare_name(name: str) -> str:
    """A builtin's or operator's name without the prefixes of its aliases: ``_softmax`` and
    ``special_softmax`` are ``softmax``."""
    return name.lstrip("_").removeprefix("special_")


#: Parts of a builtin's name that mark one twin of several spellings (the fused attention
#: kernels: _scaled_dot_product_flash_attention_for_cpu, _native_multi_head_attention).
_TWIN_NAME_PARTS = ("scaled_dot_product", "multi_head_attention")
_OP_OVERLOAD = torch._ops.OpOverload
_OP_OVERLOAD_CALL = torch._ops.OpOverload.__call__.__code__


def _size_of(x: Any) -> int | None:
    """The number of entries of a tensor or array, from its shape (no data read); else None."""
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return math.prod(int(n) for n in x.shape)
    return None


def _entries(expected: Any) -> int:
    """How many numbers ``expected`` holds: a tensor's or array's size, a tuple's or list's
    entries added up, 1 for anything else."""
    if isinstance(expected, (tuple, list)):
        return sum(_entries(e) for e in expected[:1000])
    size = _size_of(expected)
    return 1 if size is None else size


def _larger_than(got: Any, expected: Any) -> bool:
    """True when a tensor or array in ``got`` has more entries than its place in ``expected``
    holds (a number, a tuple of numbers, or a tensor or array of fewer entries)."""
    if isinstance(got, (tuple, list)):
        return isinstance(expected, (tuple, list)) and any(
            _larger_than(g, e) for g, e in zip(got, expected, strict=False))
    size = _size_of(got)
    return size is not None and size > max(_entries(expected), 1)


def _shape_of(x: Any) -> tuple | None:
    arr = _as_array(x)
    return None if arr is None else arr.shape


@dataclass
class Exercise:
    """A learner-facing exercise with a diagnosing check.

    An exercise of a lesson module (``lessonNN``) is graded against the outputs stored for
    it (:mod:`.answers`): the right output of each case and each mistake's output; its
    ``reference`` and the mistakes' implementations are not in the package (they are kept
    in ``solutions/`` and attached for the course's own tests). An exercise defined
    elsewhere (a notebook's warm-up) runs its ``reference`` and mistakes directly.

    Args:
        title: shown in feedback, e.g. "Exercise 2.1: attention weights".
        make_cases: builds the inputs (deterministically) the check runs on: a function of no
            arguments (checked here) returning a list of :class:`Case` (checked when a check
            first builds them; one that raises or returns anything else becomes the check's
            error Feedback, as the check never raises).
        mistakes: known-wrong implementations, tried in order.
        hint: a general hint for answers that match no known mistake.
        rtol, atol: tolerances for comparing outputs.
        forbidden: ready-made functions the answer may not call (besides the reference,
            its lesson module's private functions and :data:`LIBRARY_TWINS`).
        reference: the correct implementation (None in the package's lessons).
    """

    title: str
    make_cases: Callable[[], Sequence[Case]]
    mistakes: list[Mistake] = field(default_factory=list)
    hint: str = ""
    rtol: float = 1e-5
    atol: float = 1e-6
    forbidden: list[Callable[..., Any]] = field(default_factory=list)
    reference: Callable[..., Any] | None = None
    _guarded: bool = field(default=True, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kind = type(self).__name__  # Exercise or a subclass: messages name Class.field
        if not isinstance(self.title, str) or not self.title:
            raise TypeError(f"{kind}.title must be a non-empty str, got {type(self.title).__name__} "
                            f"{shown(self.title, 60)}")
        if not callable(self.make_cases):
            raise TypeError(f"{kind}.make_cases must be a function that returns the cases, got "
                            f"{type(self.make_cases).__name__} {shown(self.make_cases, 60)}")
        _check_no_arguments(self.make_cases)
        if not isinstance(self.mistakes, list) or not all(isinstance(m, Mistake) for m in self.mistakes):
            raise TypeError(f"{kind}.mistakes must be a list of Mistake, got {describe_value(self.mistakes)}")
        try:  # a key names its slip in feedback and in the store: a second one would never be reached
            check_distinct([m.key for m in self.mistakes], "mistakes", "keys (Mistake.key)")
        except ValueError as err:
            raise ValueError(f"{kind} {shown(self.title)}: {err}") from None
        if not isinstance(self.hint, str):
            raise TypeError(f"{kind}.hint must be a str, got {describe_value(self.hint)}")
        try:
            _check_tolerances(self.rtol, self.atol)
        except ValueError as err:
            raise ValueError(f"{kind}.{err}") from None
        if not isinstance(self.forbidden, list | tuple) or not all(callable(f) for f in self.forbidden):
            raise TypeError(f"{kind}.forbidden must be a list of functions (ready-made twins an answer "
                            f"may not call), got {describe_value(self.forbidden)}")
        if self.reference is not None and not callable(self.reference):
            raise TypeError(f"{kind}.reference must be a function or None, got "
                            f"{describe_value(self.reference)}")
        _remember_built(self.__dict__)  # its fields as built: put back before each check

    def _close(self, got: Any, expected: Any) -> bool:
        return outputs_close(got, expected, rtol=self.rtol, atol=self.atol)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "check" in cls.__dict__:  # a subclass's own diagnoses never raise either
            cls.check = _never_raises(cls.__dict__["check"])

    def check(self, fn: Callable[..., Any]) -> Feedback:
        """Grade ``fn``; never raises. Calling the reference or a ready-made twin is named.

        In the notebook this is feedback, not a grade. It resists an answer that replaces what
        it compares with: a name replaced in the built-ins, ``math``, ``os``, NumPy,
        ``numpy.testing``, torch, ``torch.nn`` (its module classes and ``init``),
        ``torch.autograd``, ``torch.testing``, ``torch.Tensor``, pandas' Series, DataFrame and
        Index, the course's modules and classes or an exercise's own attributes
        (``numpy.allclose = lambda *a, **k: True``) is put back before any comparison and named
        (:func:`_put_back`), and so is a process setting of :data:`_SETTINGS` it left changed
        (the default device, a global module hook, COURSE_CHECK_TIMEOUT, ...). It cannot resist
        code that reaches deeper (the private modules of NumPy or torch, the check's own frames,
        ``ctypes``, a thread that patches after the check), and ``os._exit()`` ends the kernel.
        The outside grader
        (:mod:`.autograde`), which runs each answer in a process of its own and compares in
        another, is the trusted one."""
        feedback = self._check(fn, self._forbidden() if self._guarded else [])
        if feedback.mistake is not None and feedback.hint:
            try:
                feedback.hint = self._hint_for(feedback.mistake, _source_text(fn)) or feedback.hint
            except Exception:  # noqa: BLE001 - the general hint stands
                pass
        if feedback.passed:
            cells = _kernel_cells()
            reads = _kernel_store_reads(fn, cells)
            if reads:  # a replay of the shipped outputs passes every case: no verdict (battery 10)
                return Feedback(self.title, "error", "not graded: this kernel read the stored answers "
                                f"({', '.join(reads[:4])}), so a match with them says nothing about your "
                                "code. Restart the kernel (Kernel > Restart), run your own cells without "
                                "that read, and check again.", self.hint, mistake="read_stored_answers")
            note = self._grading_note(fn, cells)
            if note:
                feedback.message += " " + note
        return feedback

    def _check_key(self) -> str | None:
        """"lessonNN.check_xxx", the name of this exercise's check in its lesson module."""
        key = self._store_key()
        module = sys.modules.get(f"{__package__}.{key[0]}") if key else None
        for name, value in vars(module).copy().items() if module else ():
            if name.startswith("check_") and getattr(value, "__self__", None) is self:
                return f"{key[0]}.{name}"
        return None

    def _grading_note(self, fn: Any, cells: Sequence[str] | None) -> str | None:
        """For a correct answer: a warning when the outside grader, which runs the answer's
        functions and imports alone, would not run it as this kernel did. ``cells`` are the
        notebook's code cells run so far, this test cell last. Says nothing outside IPython, or
        when the last cell is not this exercise's check call (:data:`GRADING_NOTE`)."""
        check_key = self._check_key()
        if not cells or check_key is None or GRADING_NOTE is None:
            return None
        return GRADING_NOTE(cells, check_key)

    def _hint_for(self, mistake: str, source: str) -> str | None:
        """Hook: a hint for ``mistake`` that follows what the answer's code did (``source``, its
        text, or "" when it cannot be read); None keeps the mistake's own hint."""
        return None

    # -- what the answer is compared with ----------------------------------------------
    def _twin_names(self) -> frozenset[str]:
        """The names of this exercise's ready-made twins, as the outside grader reads them from
        an answer's code (:data:`TWIN_NAMES`, set by :mod:`.sandbox`); empty outside a lesson."""
        key = self._check_key()
        return TWIN_NAMES(key) if key and TWIN_NAMES is not None else frozenset()

    def _check_key(self) -> str | None:
        """"lessonNN.check_xxx", the name of the check function of this exercise in its lesson
        module (the key of :data:`LIBRARY_TWINS`); None outside a lesson."""
        key = self._store_key()
        module = sys.modules.get(f"{__package__}.{key[0]}") if key else None
        for name, value in (vars(module).copy().items() if module is not None else ()):
            if name.startswith("check_") and getattr(value, "__self__", None) is self:
                return f"{module.__name__.rsplit('.', 1)[-1]}.{name}"
        return None

    def _store_key(self) -> tuple[str, str] | None:
        """("lessonNN", "NAME") when this exercise is ``NAME`` of a lesson module, else None."""
        key = self.__dict__.get("_key", False)
        if key is False:
            key = None
            for module_name, module in sys.modules.copy().items():
                if module is None or not module_name.startswith(f"{__package__}.lesson"):
                    continue
                for name, value in vars(module).copy().items():
                    if value is self:
                        key = (module_name.rsplit(".", 1)[-1], name)
                        break
                if key is not None:
                    break
            self.__dict__["_key"] = key
        return key

    def _entry(self) -> dict | None:
        """This exercise's stored answers; None when it is not a lesson module's exercise.
        Raises :class:`_StoreProblem` when they are missing or unreadable."""
        key = self._store_key()
        if key is None:
            return None
        try:
            entry = _answers.stored(*key)
        except _answers.StoreChanged as exc:
            raise _StoreProblem(str(exc)) from exc
        except (OSError, ValueError, RuntimeError, KeyError, TypeError) as exc:
            raise _StoreProblem(f"the stored answers of {key[0]} could not be read ({exc}); "
                                "reinstall the course package.") from exc
        if entry is None:
            raise _StoreProblem(f"no stored answers for {key[0]}.{key[1]}; reinstall the course package.")
        return entry

    def cases(self) -> list[Case]:
        """The inputs the check feeds the answer.

        A lesson's exercise uses the cases stored with its answers (:mod:`.answers`), the same
        bytes on every machine; one whose inputs cannot be stored (a function), an exercise
        defined elsewhere, and the unseen cases at autograde are built by ``make_cases()``.
        Raises :class:`_StoreProblem` when the store and the case builder disagree in shape
        or number (package files from two releases)."""
        if "_cases" in self.__dict__:  # the grader's very case objects (autograde._these_cases)
            return list(self.__dict__["_cases"])
        if "_expected" in self.__dict__:  # unseen cases at autograde: built under a salt
            return list(self.make_cases())
        entry = self._entry()
        if entry is not None and entry["cases"] is not None:
            return [_answers.decode_case(c) for c in entry["cases"]]
        built = self.make_cases()
        if not isinstance(built, (str, bytes, dict)) and hasattr(built, "__iter__"):
            built = list(built)  # a generator of cases too
        if not isinstance(built, list) or not all(isinstance(c, Case) for c in built):
            builder = getattr(self.make_cases, "__name__", "the case builder")
            raise _StoreProblem(f"this exercise's make_cases, {builder}, returned {describe_value(built)}, "
                                "not a list of Case, so it cannot check any answer.")
        cases = list(built)
        if not cases:  # no case at all would pass every answer
            raise _StoreProblem(f"this exercise has no test cases (its make_cases, "
                                f"{getattr(self.make_cases, '__name__', 'the case builder')}, returned "
                                f"{describe_value(cases)}), so it cannot check any answer.")
        if entry is not None and _answers.cases_signature(cases) != entry["signature"]:
            key = self._store_key()
            raise _StoreProblem(
                f"the stored answers of {key[0]}.{key[1]} belong to other test inputs (other shapes, "
                "labels or number of cases) than this package's case builder makes: its files come "
                "from two releases. Reinstall the course package at the release the lesson names.")
        return cases

    def _stored_case(self, index: int, case: Case) -> Case:
        """Case ``index`` decoded afresh from the store when the cases are stored, else ``case``:
        what the inputs the answer was given are compared with after it ran, so that an answer
        that also edited the check's own copy of the case (found through ``gc``) cannot hide an
        in-place edit of its input (battery 17)."""
        if "_cases" in self.__dict__ or "_expected" in self.__dict__:
            return case  # the grader's cases, or unseen ones built under a salt
        entry = self._entry()  # _StoreProblem when the stored answers changed while it ran
        if entry is None or entry["cases"] is None or index >= len(entry["cases"]):
            return case
        return _answers.decode_case(entry["cases"][index])

    def _uncomparable(self, case: Any, got: Any, found: Any, expected: Any, why: str, hint: str) -> Feedback:
        """The Feedback for an output (``found``, inside the answer's ``got``) that holds no values
        a comparison can read: what it is, where, why, and what was expected."""
        where = f" on {case.label}" if case.label else ""
        inside = "" if found is got else f" inside {describe_value(got)}"
        return Feedback(self.title, "wrong",
                        f"your function returned {describe_value(found)}{inside}{where}: {why}. "
                        f"Expected {describe_value(expected)}.", hint)

    def _expected_outputs(self, cases: Sequence[Case]) -> list[Any]:
        if "_expected" in self.__dict__:  # unseen cases at autograde: outputs computed apart
            return list(self.__dict__["_expected"])
        entry = self._entry()
        if entry is not None:
            return [_answers.decode(v) for v in entry["expected"]]
        if self.reference is None:
            raise _StoreProblem("this exercise has neither stored answers nor a reference.")
        return [_call(self.reference, c) for c in cases]

    def _mistake_outputs(self, mistake: Mistake, cases: Sequence[Case]) -> list[Any] | None:
        """What ``mistake`` gives on each case (a :class:`~.answers.Raised` where it raises),
        from the store, or by running its implementation; None when neither is there."""
        if "_expected" in self.__dict__:  # unseen cases: no stored slips to name
            return None
        entry = self._entry()
        if entry is not None:
            stored = entry["mistakes"].get(mistake.key)
            return None if stored is None else [_answers.decode(v) for v in stored]
        if mistake.implementation is None:
            return None
        return [outcome(mistake.implementation, c) for c in cases]

    def check_trusted(self, fn: Callable[..., Any]) -> Feedback:
        """Grade ``fn`` without the reference guard: for the course's own tests, which feed
        the reference and the known mistakes themselves."""
        self._guarded = False
        try:
            return self.check(fn)  # a subclass's check() still adds its own diagnoses
        finally:
            self._guarded = True

    def _check(self, fn: Callable[..., Any], forbidden: list[Callable[..., Any]]) -> Feedback:
        if not callable(fn):
            return Feedback(self.title, "error", f"expected a function, got {describe_value(fn)}",
                            "pass the function itself, without calling it: check(my_fn)")
        try:
            cases = self.cases()
        except _StoreProblem as exc:
            return Feedback(self.title, "error", str(exc))
        outputs = []
        edited: str | None = None
        check_key = self._check_key() if forbidden else None
        watch = _CallWatch(forbidden, first_is_reference=self.reference is not None,
                           twin_names=self._twin_names() if forbidden else (),
                           library_twins=[f for f in map(_resolve, LIBRARY_TWINS.get(check_key, ()))
                                          if f is not None] if check_key else ())
        called: list[str] = []  # the checks the answer called (not run: see _never_raises)
        for index, case in enumerate(cases):
            args, kwargs = case.fresh()
            feedback_exc: BaseException | None = None
            deadline = _Deadline()
            raised: list[BaseException] = []  # what the answer's own call raised: nothing else is its
            try:
                with watch, deadline, _AnswerRunning(called):
                    try:
                        outputs.append(fn(*args, **kwargs))
                    except BaseException as exc:
                        raised.append(exc)
                        raise
                # compared with the stored case decoded now, after the answer ran
                edited = edited or _edited_input(self._stored_case(index, case), args, kwargs)
            except _StoreProblem as exc:  # the stored answers changed while it ran
                return Feedback(self.title, "error", str(exc))
            except NotImplementedError as exc:
                if not (raised and raised[0] is exc):
                    return self._machinery_failed(exc)
                feedback_exc = exc
                if watch.used is None and _is_stub(fn, exc):
                    return Feedback(self.title, "not attempted",  # no hint: Run All must not answer it
                                    "not attempted yet: replace `raise NotImplementedError` with "
                                    "your code, then run this cell again.", "")
                feedback = self._examined(exc, lambda exc=exc, case=case: self._raised(exc, case))
            except (TimeLimitExceeded, KeyboardInterrupt) as exc:  # never run again after this
                if deadline.changed is not None:
                    return self._tampered(deadline.changed, deadline.threads)
                return self._stopped(exc, case)
            except BaseException as exc:  # noqa: BLE001 - any bug, sys.exit(): a message
                if not (raised and raised[0] is exc):  # the check's own code failed
                    return self._machinery_failed(exc)
                if called:  # it failed on what the check it called gave back
                    return self._called_a_check(called[0])
                feedback_exc = exc
                feedback = self._examined(exc, lambda exc=exc, case=case: self._raised(exc, case))
            else:
                if called:
                    return self._called_a_check(called[0])
                threads = _threads_the_answer_left()  # before any comparison: it may patch one
                if threads:
                    return self._left_threads(threads)
                if watch.used is None and watch.tampered is None and deadline.changed is None:
                    continue
                feedback = None
            if deadline.changed is not None:
                return self._tampered(deadline.changed, deadline.threads)
            if watch.tampered is not None and not isinstance(feedback_exc, RecursionError):
                return self._tampered(watch.tampered)  # (a RecursionError drops the profiler itself)
            if watch.used is not None:  # the call explains the error, or the right answer
                return self._used_reference(watch.used)
            return feedback
        if watch.tampered is not None:
            return self._tampered(watch.tampered)
        try:
            expected = self._expected_outputs(cases)
        except _StoreProblem as exc:
            return Feedback(self.title, "error", str(exc))
        return self._examined(outputs, lambda: self._compared(fn, cases, outputs, expected, edited))

    def _examined(self, got: Any, examine: Callable[[], Feedback]) -> Feedback:
        """``examine()``, the check's look at what the answer returned or raised (``got``), under
        the time limit of one call when ``got`` is (or holds) an object of a class that is not a
        built-in, torch or NumPy one: its own methods (``__class__``, ``__len__``,
        ``__array_finalize__``, ``__getattribute__``, ...) run whenever the check looks, and one
        that never returns held the check forever (battery 24 probe). The answer's own limits
        have ended by then, so this one is never nested in another."""
        if _plain(got, whole=True) or _plain_exception(got):
            return examine()
        deadline = _Deadline()
        try:
            with deadline:
                feedback = examine()
        except TimeLimitExceeded:
            feedback = Feedback(
                self.title, "wrong",
                f"your function {'raised' if issubclass(type(got), BaseException) else 'returned'} an object "
                f"of its own class ({_own_class_name(got)}) whose methods ran for more than "
                f"{deadline.seconds:g} s while the check looked at it (its type, length, items or "
                "message), so it was stopped and is not graded as right.",
                "return a plain tensor or array (or the type the exercise asks for), computed from the "
                "inputs, without a class of your own around it.")
        if deadline.changed is not None:
            return self._tampered(deadline.changed, deadline.threads)
        return feedback

    def _compared(self, fn: Callable[..., Any], cases: list[Case], outputs: list[Any], expected: list[Any],
                  edited: str | None) -> Feedback:
        """The feedback for ``outputs``, the answer's return values on ``cases``, against
        ``expected``; ``edited`` names an input the answer changed in place (None: none)."""
        for case, got, exp in zip(cases, outputs, expected, strict=False):
            subclass = _own_subclass(got)  # first: its own methods could answer every test below
            if subclass is not None:
                return self._subclass_returned(case, got, subclass)
            nested = _nested(got)
            if nested is not None:
                return self._uncomparable(case, got, nested, exp,
                                          "a nested tensor (torch.nested) holds several tensors of their own "
                                          "shapes and has no one shape to compare",
                                          "return one ordinary tensor: compute with the input tensors "
                                          "directly, or torch.stack a list of rows of one shape.")
            meta = _without_values(got)
            if meta is not None:  # nothing to compare: say so, not the comparison's error
                return self._uncomparable(case, got, meta, exp,
                                          "a tensor on the 'meta' device has a shape but no values, so it "
                                          "cannot be checked",
                                          "compute the result from the inputs (it then lives on their "
                                          "device); do not create it with device='meta'.")
        try:
            feedback = self._grade(cases, outputs, expected)
            slip = feedback.mistake
            if edited is not None and slip is not None and not slip.endswith("_in_place"):
                # named first: an edit made before computing explains the output that looks like a
                # known slip (battery 9: zeroed reference_heads was called "zero ablation"). A
                # lesson's own in-place slip (edited_pattern_in_place) already says so, and a
                # plain wrong answer is left to the lessons' own in-place diagnoses (3.1, 5.1)
                name = _parameter_name(fn, edited)
                return Feedback(self.title, "mistake",
                                f"your function changed its input {name} in place, and its output is "
                                f"wrong too. An edit made before computing changes what the function "
                                f"computes from, so fix the edit first; then, if the output is still "
                                f"wrong, the check says: {feedback.message}",
                                "work on a copy and change only the copy: x.clone() for a tensor, "
                                "x.copy() for a NumPy array or a pandas table (and no +=, [...] = or "
                                "*_() methods on the input itself).",
                                mistake="edited_input_in_place")
            if feedback.passed and edited is not None:
                name = _parameter_name(fn, edited)
                return Feedback(self.title, "mistake",
                                f"the values are right, but your function changed its input {name} "
                                "in place: whoever called it now holds different values too, so the "
                                "next cell (or the next use of that input) sees your edit.",
                                "work on a copy and change only the copy: x.clone() for a tensor, "
                                "x.copy() for a NumPy array (and no +=, [...] = or *_() methods on "
                                "the input itself).",
                                mistake="edited_input_in_place")
            return feedback
        except TimeLimitExceeded:  # its own methods ran too long: _examined says so
            raise
        except BaseException as exc:  # noqa: BLE001 - an answer too odd to compare (sparse, meta, ...)
            return Feedback(self.title, "wrong",
                            f"could not compare your answer with the expected one: you returned "
                            f"{describe_value(outputs[0])} ({type(exc).__name__}: {_safe_str(exc)}).",
                            self.hint)

    def _subclass_returned(self, case: Case, got: Any, subclass: torch.Tensor | np.ndarray) -> Feedback:
        """Feedback for an output that is (or holds) a tensor or array of a subclass: its own
        methods can change what any comparison says, so it is never compared (never right)."""
        where = f" on {case.label}" if case.label else ""
        inside = "" if subclass is got else f" inside the {type(got).__name__} it returned"
        tensor = isinstance(subclass, torch.Tensor)
        base, plain = ("torch.Tensor", "an ordinary torch.Tensor") if tensor else \
            ("numpy.ndarray", "an ordinary numpy.ndarray")
        return Feedback(self.title, "wrong",
                        f"your function returned {'a tensor' if tensor else 'an array'} of class "
                        f"{type(subclass).__qualname__}, a subclass of {base}"
                        f"{inside}{where}: a subclass's own methods can change what any comparison "
                        f"says, so the check compares only plain {'tensors' if tensor else 'arrays'} "
                        "and this output is not graded as right.",
                        f"return {plain}, computed from the inputs " + (
                            "(no .as_subclass(...) and no Tensor subclass of your own)." if tensor else
                            "(no .view(...) to a class of your own, no np.matrix or masked array)."))

    def _stopped(self, exc: BaseException, case: Case | None) -> Feedback:
        """Feedback for an answer that was interrupted or ran out of time (on ``case``; None: a
        stop that reached the check after the call): the check does not run it again (no
        diagnosis reruns it), so one interrupt is enough."""
        where = f" on {case.label}" if case is not None and case.label else ""
        if isinstance(exc, TimeLimitExceeded):
            note = _limit_setting_note(exc.args[0])  # a COURSE_CHECK_TIMEOUT that was not used
            message = (f"your function ran for more than {exc.args[0]:g} s{note}{where} and "
                       "was stopped. The test inputs are tiny, so a right answer takes milliseconds: look "
                       "for a loop that never ends (a while loop whose condition never changes) or one over "
                       "far more items than the input has.")
        else:
            message = (f"your function was interrupted{where} (KeyboardInterrupt: Kernel > Interrupt) "
                       "before it returned, so it was not graded; the check did not run it again.")
        return Feedback(self.title, "error", message, self.hint, stopped=True)

    def _machinery_failed(self, exc: BaseException) -> Feedback:
        """Feedback for an error of the check's own code around the answer's call (its guard's
        setting up or taking down, say a copy of a dict another thread of the kernel changed
        meanwhile): never reported as the answer's, which may well be right."""
        return Feedback(self.title, "error",
                        f"the check could not grade this answer ({type(exc).__name__}: {_safe_str(exc)}). "
                        "This is an error of the check, not of your function: run this cell again.",
                        self.hint)

    def _raised(self, exc: BaseException, case: Case) -> Feedback:
        where = f" on {case.label}" if case.label else ""
        text = _safe_str(exc)
        detail = f": {text}" if text else ""
        if isinstance(exc, SystemExit):
            what = f"your function called sys.exit() / exit(){where}; return a value instead"
            return Feedback(self.title, "error", what + ".", self.hint)
        missing = _undefined_name(exc)
        if missing is not None:  # the hint says what defines it, not the exercise's general hint
            return Feedback(self.title, "error", f"your function raised NameError{where}{detail}",
                            _undefined_name_hint(missing))
        origin = ""
        if isinstance(exc, NotImplementedError):  # not the stub's own raise: say where it came from
            tb = exc.__traceback__
            while tb is not None and tb.tb_next is not None:
                tb = tb.tb_next
            if tb is not None:
                origin = f" (raised inside `{tb.tb_frame.f_code.co_name}`, not by your function's stub)"
        return Feedback(self.title, "error",
                        f"your function raised {type(exc).__name__}{where}{detail}{origin}", self.hint)

    def _tampered(self, what: str, threads: Sequence[str] = ()) -> Feedback:
        if threads:  # a thread an earlier cell started may have done it: not the answer's doing
            what = what.replace(" while it ran", " while your function ran", 1)
            return Feedback(self.title, "error",
                            f"something in this kernel {what}. "
                            f"A thread started before this check is still running code of this "
                            f"notebook ({', '.join(threads[:3])}): it may have made that change, so "
                            "the check does not blame your function and does not grade it. Restart the "
                            "kernel (Kernel > Restart), run the cells your function needs, and check again.",
                            self.hint)
        return Feedback(self.title, "mistake",
                        f"your function {what}: the check cannot grade an answer that interferes "
                        "with it, so it counts as not passed.",
                        "remove the code that touches the profiler, NumPy, torch, the built-ins or "
                        "the course's functions, and write the computation itself.",
                        mistake="tampered_with_check")

    def _left_threads(self, threads: Sequence[str]) -> Feedback:
        return Feedback(self.title, "mistake",
                        f"your function left a thread of its own running after it returned "
                        f"({', '.join(threads[:3])}): such a thread could change the check while it "
                        "compares, so the check does not grade this answer and it counts as not "
                        "passed (the autograder, which runs answers without threads, gives it 0 points).",
                        "compute the result in the function itself, without starting threads or timers.",
                        mistake="left_a_thread")

    def _called_a_check(self, title: str) -> Feedback:
        return Feedback(self.title, "mistake",
                        f"your function calls a check ({title}) inside itself: a check runs your "
                        "function and grades what it returns, so it cannot be part of the answer "
                        "(it gave back a Feedback, not a result).",
                        "remove the check call from the function and write the computation; call the "
                        "check in the test cell, on your function.", mistake="called_a_check")

    def _used_reference(self, name: str) -> Feedback:
        return Feedback(self.title, "mistake",
                        f"you called the reference: your function uses {name}, a ready-made "
                        "implementation of what this exercise asks you to write.",
                        "write the computation yourself from the operations the exercise allows "
                        "(see its 'Library use' line).", mistake="called_reference")

    def _forbidden(self) -> list[Callable[..., Any]]:
        """The reference, the mistakes, its lesson module's private functions, and the
        package's twins of it (:data:`LIBRARY_TWINS`, ``forbidden``)."""
        written = (self.reference, *(m.implementation for m in self.mistakes))
        found: list[Callable[..., Any]] = [f for f in written if f is not None]
        found += self.forbidden
        found += [_answers.stored, _answers.decode]  # the stored answers' readers (torch.load is not
        # watched: unpickling any tensor calls it; reading the store shows in the autograde history)
        key = self._store_key()
        module = sys.modules.get(f"{__package__}.{key[0]}") if key else None
        if module is not None:
            found += [v for k, v in vars(module).copy().items()  # its private helpers, not public ones
                      if k.startswith("_") and isinstance(v, types.FunctionType)
                      and v.__module__ == module.__name__]
            check_key = self._check_key()
            if check_key is not None:
                found += [f for f in map(_resolve, LIBRARY_TWINS.get(check_key, ())) if f is not None]
                found += [f for dotted in LIBRARY_TWINS.get(check_key, ()) for copy in OTHER_COPIES
                          if (f := _resolve_in(copy, dotted)) is not None]
        return found

    def _grade(self, cases, outputs, expected) -> Feedback:
        wrong_kind = self._wrong_kind(outputs)
        if wrong_kind is not None:
            return wrong_kind
        tensor = self._returned_tensor(outputs, expected)
        if tensor is not None:
            return tensor
        numpy_answer = self._returned_numpy(outputs, expected)
        if numpy_answer is not None:
            return numpy_answer
        precision = self._precision_slip(cases, outputs, expected)
        if precision is not None:
            return precision
        if all(self._close(g, e) for g, e in zip(outputs, expected, strict=True)):
            n = len(cases)
            return Feedback(self.title, "correct",
                            "correct on the test case." if n == 1 else f"correct on all {n} test cases.")
        oversized = self._oversized_answer(cases, outputs, expected)
        for mistake in self.mistakes:
            wrong = self._mistake_outputs(mistake, cases)
            if wrong is None or any(isinstance(w, _answers.Raised) for w in wrong):
                continue  # a mistake that raises on these inputs cannot match an output
            if all(self._close(g, w) for g, w in zip(outputs, wrong, strict=True)):
                return Feedback(self.title, "mistake", mistake.message, mistake.hint,
                                mistake=mistake.key)
        whole = self._whole_number_slip(cases, outputs, expected)
        if whole is not None:
            return whole
        if oversized is not None:
            return oversized
        unmatched = self._unmatched_slip(cases, outputs, expected)
        if unmatched is not None:
            return unmatched
        return self._generic_feedback(cases, outputs, expected)

    def _precision_slip(self, cases, outputs, expected) -> Feedback | None:
        """A float tensor answer whose values are right once cast to the expected dtype, but in
        another precision: half precision (float16, bfloat16) where float32 or float64 is
        expected, or float64 where float32 is expected (a model in float32 refuses it).
        float32 where float64 is expected is accepted (as close as the tolerance asks)."""
        halves = (torch.float16, torch.bfloat16)
        for case, got, exp in zip(cases, outputs, expected, strict=False):
            if not (isinstance(got, torch.Tensor) and isinstance(exp, torch.Tensor)
                    and got.dtype.is_floating_point and exp.dtype.is_floating_point
                    and got.shape == exp.shape and got.device.type != "meta"):
                continue
            label = f" on {case.label}" if case.label else ""
            if got.dtype in halves and exp.dtype not in halves:
                cast = got.detach().to(exp.dtype)
                if torch.allclose(cast, exp, rtol=1e-2, atol=1e-3, equal_nan=True):
                    return Feedback(self.title, "mistake",
                                    f"your values are right to about three digits{label}, but they come "
                                    f"back in {got.dtype} (half precision), which keeps only about three "
                                    f"significant digits; the answer is {exp.dtype}.",
                                    "keep the inputs' dtype: drop the .half() / .to(torch.float16) / "
                                    "autocast, and return the result as it comes out.",
                                    mistake="half_precision")
            elif got.dtype == torch.float64 and exp.dtype == torch.float32:
                if self._close(got.detach().to(exp.dtype), exp):
                    return Feedback(self.title, "mistake",
                                    f"the values are right{label}, but your result is torch.float64 and "
                                    f"the inputs and the answer are torch.float32: a .double(), a float64 "
                                    f"constant tensor or a NumPy round trip widened it, and a float32 model "
                                    f"refuses (or silently converts) such a tensor.",
                                    "keep the inputs' dtype: build any new tensor with dtype=x.dtype "
                                    "(or torch.*_like(x)) and drop the .double().",
                                    mistake="widened_to_float64")
        return None

    def _whole_number_slip(self, cases, outputs, expected) -> Feedback | None:
        """A Mistake that an integer answer reproduces once its whole numbers are read as floats
        (counts from ``.sum()`` of a comparison where the slip's implementation returns them as
        floats): the exercise's own name for the slip wins over the core's dtype message, which
        :meth:`_describe_difference` gives when no Mistake matches. Bool answers are left out
        (True/False read as 1/0 would match too much)."""
        widened = [_ints_as_floats(g, e) for g, e in zip(outputs, expected, strict=True)]
        if all(w is g for w, g in zip(widened, outputs, strict=True)):
            return None  # no integer output where a floating one is expected
        if all(self._close(w, e) for w, e in zip(widened, expected, strict=True)):
            return None  # right numbers in the wrong dtype: the dtype message says so
        for mistake in self.mistakes:
            wrong = self._mistake_outputs(mistake, cases)
            if wrong is None or any(isinstance(w, _answers.Raised) for w in wrong):
                continue
            if all(self._close(g, w) for g, w in zip(widened, wrong, strict=True)):
                dtype = next(g.dtype for g, w in zip(outputs, widened, strict=True) if w is not g)
                return Feedback(self.title, "mistake",
                                f"{mistake.message} (Your result also comes back as whole numbers, "
                                f"dtype {dtype}; the answer is floating point.)", mistake.hint,
                                mistake=mistake.key)
        return None

    def _oversized_answer(self, cases, outputs, expected) -> Feedback | None:
        """A wrong-shape message for an answer with more entries than the expected output, read
        from its shape alone: no later step copies or compares its data (an expanded view of
        2**31 entries would take 16 GB as float64)."""
        for case, got, exp in zip(cases, outputs, expected, strict=False):
            if _larger_than(got, exp):
                label = f" on {case.label}" if case.label else ""
                return Feedback(self.title, "wrong",
                                f"wrong shape{label}: expected {describe_value(exp)}, got "
                                f"{describe_value(got)}, which has more entries than the answer "
                                "(no values were compared).", self.hint)
        return None

    def _wrong_kind(self, outputs) -> Feedback | None:
        """Hook, run before any comparison: name an answer of the wrong kind whose values would
        still compare equal (a NumPy array for a tensor, a pandas Index for a str)."""
        return None

    # what an int answer counts, for the message of :meth:`_returned_tensor` ("a number of bytes")
    int_answer = "a whole number"

    def _returned_tensor(self, outputs, expected) -> Feedback | None:
        """The one rule of every exercise whose answer is an int (3.3, 3.4, 7.2: battery 10): a
        tensor or an array returned there is named (``returned_tensor``), right value or not,
        before any comparison (a 0-d tensor compares equal to the right int). A NumPy int is an
        int."""
        if not expected or not all(type(e) is int for e in expected):
            return None
        got = next((g for g in outputs if isinstance(g, (torch.Tensor, np.ndarray))), None)
        if got is None:
            return None
        right = all(type(n) in (int, float) and n == e
                    for n, e in zip(map(as_scalar, outputs), expected, strict=True))
        return Feedback(self.title, "mistake",
                        ("the value is right but " if right else "") + "you returned a "
                        f"{type(got).__module__.split('.')[0]} {type(got).__name__}, not an int: the "
                        f"exercise asks for a Python int ({self.int_answer}).",
                        "Compute with plain Python ints (the arguments are ints already), or turn a "
                        "one-element tensor into a number with int(x) or x.item().",
                        mistake="returned_tensor")

    def _returned_numpy(self, outputs, expected) -> Feedback | None:
        """Name a NumPy array returned where the answer is a torch tensor, even with the right
        numbers (the code the lesson runs next needs a tensor): with the exercise's own
        ``returned_numpy`` Mistake when it has one, else with :meth:`_numpy_advice`."""
        if not any(_array_for_tensor(g, e) for g, e in zip(outputs, expected, strict=True)):
            return None
        if any(m.key == "returned_numpy" for m in self.mistakes):
            named = self._mistake_feedback("returned_numpy")
        else:
            named = Feedback(self.title, "mistake", *self._numpy_advice(), mistake="returned_numpy")
        try:
            right = all(self._close(g, e) for g, e in zip(outputs, expected, strict=True))
        except Exception:  # noqa: BLE001 - values that cannot be compared are not right
            right = False
        if right:
            named.message = "the numbers are right, but " + named.message
        else:
            named.message += " Its numbers do not match the answer either."
        return named

    def _numpy_advice(self) -> tuple[str, str]:
        """Message and hint for an answer that returned NumPy arrays (a subclass may say why its
        answer must be a tensor)."""
        return _RETURNED_NUMPY

    def _unmatched_slip(self, cases, outputs, expected) -> Feedback | None:
        """Hook, run when the answer is wrong and no Mistake reproduced it: name a slip by a
        property of the output (what it sums to, which cache lacks a token) rather than by
        its exact values."""
        return None

    def _mistake_feedback(self, key: str) -> Feedback:
        """The feedback of the Mistake called ``key``."""
        m = next(m for m in self.mistakes if m.key == key)
        return Feedback(self.title, "mistake", m.message, m.hint, mistake=m.key)

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
        if isinstance(exp, tuple) and isinstance(got, (torch.Tensor, np.ndarray)):
            size = got.numel() if isinstance(got, torch.Tensor) else got.size
            if size == len(exp) and outputs_close(tuple(got.reshape(-1).tolist()), exp,
                                                  rtol=self.rtol, atol=self.atol):
                return wrong(f"the values are right{label}, but you returned a {type(got).__name__}: "
                             f"return a tuple, e.g. tuple(x.tolist()), which gives {exp!r}.")
        if (isinstance(exp, (tuple, list)) and isinstance(got, (tuple, list))
                and len(got) == len(exp)):
            for i, (g, e) in enumerate(zip(got, exp, strict=True)):
                if not outputs_close(g, e, rtol=self.rtol, atol=self.atol):
                    inner = self._describe_difference(g, e, f"{label}, in element {i} of the "
                                                      f"{type(got).__name__} you returned")
                    if inner is not None:
                        return inner
        if (isinstance(got, (torch.Tensor, np.ndarray)) and _is_complex(got.dtype)
                and not _is_complex(getattr(exp, "dtype", None))):
            return wrong(f"your output{label} is complex ({got.dtype}), and the expected result is real: "
                         "a complex number crept in (a 1j, a complex tensor, or np.sqrt/np.log of a "
                         "complex array). Keep every step real.")
        if isinstance(got, np.ndarray) and not _is_numeric(got.dtype):
            return wrong(f"you returned {describe_value(got)}{label}: an array of "
                         f"{'Python objects' if got.dtype.kind == 'O' else 'text or other non-numbers'}, "
                         f"not of numbers (np.asarray of something that is not numbers makes one). "
                         f"Expected {describe_value(exp)}.")
        exp_arr, got_arr = _as_array(exp), _as_array(got)
        if exp_arr is not None and isinstance(got, (tuple, list)) and len(got) > 0:
            try:
                with warnings.catch_warnings():  # torch's advice on lists of arrays is not for the learner
                    warnings.simplefilter("ignore")
                    as_tensor = torch.as_tensor(got, dtype=torch.float64)
            except (TypeError, ValueError, RuntimeError):
                as_tensor = None
            if as_tensor is not None and outputs_close(as_tensor, exp, rtol=self.rtol, atol=self.atol):
                return wrong(f"the values are right{label}, but you returned a {type(got).__name__}: "
                             f"return a tensor, e.g. torch.tensor(...).")
            if any(outputs_close(g, exp, rtol=self.rtol, atol=self.atol) for g in got):
                return wrong(f"you returned {describe_value(got)}{label}; one of them is right: "
                             "return only that one.")
            return wrong(f"expected {describe_value(exp)}{label}, but you returned "
                         f"{describe_value(got)}.")
        if exp_arr is not None and got_arr is not None and got_arr.shape == exp_arr.shape:
            got_dtype, exp_dtype = getattr(got, "dtype", None), getattr(exp, "dtype", None)
            if _is_integral(got_dtype) and not _is_integral(exp_dtype):
                same = _arrays_close(got_arr, exp_arr, self.rtol, self.atol)
                values = ("the values are right" if same else
                          "whole numbers cannot hold the expected values (an integer result drops "
                          "every fraction)")
                kind = ("True/False values" if str(got_dtype).removeprefix("torch.") == "bool"
                        else "whole numbers")
                return wrong(f"your output{label} has the right shape {exp_arr.shape}, but you "
                             f"returned {kind} (dtype {got_dtype}) where the answer is "
                             f"{exp_dtype}: {values}. Make the result floating point before the "
                             "last step: .float() on a comparison or a count before .mean() or a "
                             "division with / (not //), no .long() or .int() on the result, a "
                             "float torch.zeros(...) buffer. Integer // that decodes indices is fine.")
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


Exercise.check = _never_raises(Exercise.check)  # type: ignore[method-assign]


class ListCopyCase(Case):
    """A case whose ``fresh()`` also hands the answer new lists of cloned tensors (the plain
    :class:`Case` copies only tensors given directly, so a list would reach the answer as the
    case's own) and remembers what it handed over in ``given``, so a check can tell whether
    the answer changed a list (items added, removed, replaced or edited)."""

    def fresh(self) -> tuple[tuple, dict]:
        given = tuple([t.clone() if isinstance(t, torch.Tensor) else t for t in a] if isinstance(a, list)
                      else a.clone() if isinstance(a, torch.Tensor) else a for a in self.args)
        self.__dict__["given"] = given
        # the items each list held when handed over: an item that is still there but holds other
        # values was edited in place, one that is gone was replaced or removed
        self.__dict__["handed"] = tuple(list(a) if isinstance(a, list) else None for a in given)
        return given, dict(self.kwargs)


class WatchesGivenLists:
    """Mixin for an :class:`Exercise` whose inputs include lists of tensors, which the core's
    in-place test does not look into: its cases become :class:`ListCopyCase`, and after a
    right answer :meth:`_list_edit` compares what each call was given with the case's own."""

    def cases(self) -> list[Case]:
        made = [ListCopyCase(c.args, c.kwargs, c.label) for c in super().cases()]  # type: ignore[misc]
        self.__dict__["_last_cases"] = made  # the very cases the answer is about to be given
        return made

    def _check(self, fn: Callable[..., Any], forbidden: list[Callable[..., Any]]) -> Feedback:
        self.__dict__["_last_cases"] = []
        feedback = super()._check(fn, forbidden)  # type: ignore[misc]
        ran = self.__dict__.pop("_last_cases", [])
        if not feedback.passed:
            return feedback
        for index, case in enumerate(ran):
            try:  # the case as stored, not the check's copy that the answer could reach
                original = self._stored_case(index, case).args  # type: ignore[attr-defined]
            except _StoreProblem as exc:
                return Feedback(feedback.exercise, "error", str(exc))
            edited = self._list_edit(original, case.__dict__.get("given"), case.__dict__.get("handed"))
            if edited is not None:
                return edited
        return feedback

    def _list_edit(self, original: tuple, given: tuple | None,
                   handed: tuple | None = None) -> Feedback | None:
        """The feedback for an answer that changed a list it was given, or None. ``handed`` holds,
        for each list argument, the items it held when handed over (None for other arguments)."""
        raise NotImplementedError

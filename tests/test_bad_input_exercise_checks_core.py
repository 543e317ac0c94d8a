"""Bad input to the exercise-check machinery: course_utils.exercises.core (Exercise, Mistake,
outputs_close, time limits, the state a check puts back), answers (the stored reference outputs),
cases, raising (DiagnosingExercise) and your_attention (causal_attention_with). Answers that
return subclasses, NaN or the wrong type, change interpreter settings or leave threads running,
and malformed stored answers.

Moved here from the QA batteries' files (issue 38 and later batteries), grouped by the code under test;
a `# -- battery N` line marks where each battery's cases begin. Helpers shared with other bad-input
files live in tests/bad_input_cases.py."""

from __future__ import annotations

import gc
import importlib
import math
import os
import re
import subprocess
import sys
import textwrap
import types
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from bad_input_cases import ROOT, BadRepr, Case, LyingStr, assert_named, raises_naming

from course_utils.attention.mha import MultiHeadAttention
from course_utils.exercises import all_exercises, answers, core, outputs_close
from course_utils.exercises import cases as CASES
from course_utils.exercises.core import Exercise, Mistake
from course_utils.exercises.raising import DiagnosingExercise, RaisingMistake
from course_utils.exercises.your_attention import causal_attention_with, run_with_your_attention
from course_utils.model.checkpoint import load_checkpoint

# -- battery 7 (ex) ----------------------------------------------------------------------------------

CHECKS = ["lesson01.check_attend", "lesson02.check_softmax_rows", "lesson07.check_cache_bytes"]


def _run(code: str, timeout: float = 120) -> dict[str, str]:
    """Run ``code`` in a fresh interpreter; its ``KEY value`` lines as a dict."""
    env = {**os.environ, "MPLBACKEND": "Agg", "COURSE_CHECK_TIMEOUT": "1"}
    try:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                              text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("the check did not return: the answer was never stopped")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)


# -- rows 28-33, 37: the time limit after an answer that blocked SIGALRM ---------------------
MASK_DRIVER = """
import signal, time
from course_utils.exercises import {module}

def blocker(*a, **k):
    signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGALRM}})
    while True:
        pass

def sleeper(*a, **k):
    while True:
        try:
            time.sleep(30)
        except BaseException:
            pass

fb = {module}.{check}(blocker)
print("FIRST", fb.status, fb.stopped)
print("BLOCKED", signal.SIGALRM in signal.pthread_sigmask(signal.SIG_BLOCK, set()))
fb = {module}.{check}(sleeper)
print("SECOND", fb.status, fb.stopped)
print("MESSAGE", fb.message)
# a learner who blocked SIGALRM themselves gets their mask back after a check
signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGALRM}})
fb = {module}.{check}(lambda *a, **k: time.sleep(30))
print("THIRD", fb.status, fb.stopped)
print("KEPT", signal.SIGALRM in signal.pthread_sigmask(signal.SIG_BLOCK, set()))
"""


@pytest.mark.skipif(not hasattr(__import__("signal"), "pthread_sigmask"), reason="no signal masks here")
@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.slow
def test_an_answer_that_blocks_sigalrm_leaves_the_next_check_its_time_limit(check):
    module, name = check.split(".")
    out = _run(MASK_DRIVER.format(module=module, check=name))
    assert out["FIRST"] == "error True"
    assert out["BLOCKED"] == "False"  # the answer's mask did not outlive its check
    assert out["SECOND"] == "error True", out  # a sleep in a swallowing loop is still stopped
    assert "ran for more than 1 s" in out["MESSAGE"]
    assert out["THIRD"] == "error True"  # unblocked while the answer ran ...
    assert out["KEPT"] == "True"  # ... and the learner's own mask back afterwards


# -- rows 29, 31, 33: a recursion that catches every stop and starts again ------------------
RECURSION_DRIVER = """
import signal, sys
from course_utils.exercises import {module}

def inner(*a, **k):  # the battery's answer: a closure that calls itself from its except
    def r():
        try:
            r()
        except BaseException:
            r()
    r()

def ping(n):  # a module-level pair that recurse into each other the same way
    try:
        pong(n + 1)
    except BaseException:
        pong(n + 1)

def pong(n):
    try:
        ping(n + 1)
    except BaseException:
        ping(n + 1)

def mutual(*a, **k):
    ping(0)

codes = (ping.__code__, pong.__code__)
def mine(signum, frame):
    pass
signal.signal(signal.SIGALRM, mine)
for label, answer in (("INNER", inner), ("MUTUAL", mutual)):
    fb = {module}.{check}(answer)
    print(label, fb.status, fb.stopped)
    print(label + "_MESSAGE", fb.message)
print("CODES", (ping.__code__, pong.__code__) == codes)  # the answer's functions as they were
print("STATE", signal.getsignal(signal.SIGALRM) is mine, sys.gettrace() is None,
      signal.getitimer(signal.ITIMER_REAL)[0] == 0)
def count(n):
    return 0 if n == 0 else 1 + count(n - 1)
print("DEPTH", count(500))  # deep recursion still works in this interpreter
"""


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.slow
def test_a_recursion_that_swallows_the_stop_is_stopped_without_killing_the_kernel(check):
    module, name = check.split(".")
    out = _run(RECURSION_DRIVER.format(module=module, check=name))
    for label in ("INNER", "MUTUAL"):
        assert out[label] == "error True", out
        assert "ran for more than 1 s" in out[label + "_MESSAGE"]
    assert out["CODES"] == "True"
    assert out["STATE"] == "True True True"
    assert out["DEPTH"] == "500"


# -- row 16: an answer that replaces what the comparison uses ---------------------------------
def _patching_answers():
    """Wrong answers (they return their input) that first replace a comparison the check could
    use, each with the (owner, name) pairs it replaces."""
    import builtins

    import numpy
    import torch

    def allclose(x, *a, **k):
        numpy.allclose = lambda *a, **k: True
        numpy.testing.assert_allclose = lambda *a, **k: None
        return x

    def torch_close(x, *a, **k):
        torch.allclose = lambda *a, **k: True
        torch.testing.assert_close = lambda *a, **k: None
        return x

    def built_ins(x, *a, **k):
        builtins.abs = lambda v: 0
        builtins.isinstance = lambda *a: True
        return x

    return {"numpy.allclose": (allclose, [(numpy, "allclose"), (numpy.testing, "assert_allclose")]),
            "torch.allclose": (torch_close, [(torch, "allclose"), (torch.testing, "assert_close")]),
            "builtins": (built_ins, [(builtins, "abs"), (builtins, "isinstance")])}


@pytest.mark.parametrize("check", ["lesson02.check_softmax_rows", "lesson02.check_attention_weights",
                                   "lesson01.check_attend"])
@pytest.mark.parametrize("kind", ["numpy.allclose", "torch.allclose", "builtins"])
def test_replacing_the_comparison_inside_the_answer_does_not_pass(check, kind):
    import importlib

    import numpy.testing  # noqa: F401 - loaded, so that its attribute is there to put back
    import torch.testing  # noqa: F401

    module, name = check.split(".")
    run_check = getattr(importlib.import_module(f"course_utils.exercises.{module}"), name)
    answer, replaced = _patching_answers()[kind]
    originals = [(owner, attr, getattr(owner, attr)) for owner, attr in replaced]
    try:
        feedback = run_check(answer)
        now = [getattr(owner, attr) is value for owner, attr, value in originals]
    finally:
        for owner, attr, value in originals:
            setattr(owner, attr, value)
    assert now == [True] * len(originals)  # put back by the check itself
    assert not feedback.passed
    assert feedback.mistake == "tampered_with_check", feedback
    assert f"replaced {replaced[0][0].__name__}.{replaced[0][1]}" in feedback.message


def test_outputs_close_on_huge_ints_and_a_list_that_holds_itself():
    from course_utils.exercises.core import outputs_close

    assert outputs_close(10**400, 10**400) and not outputs_close(10**400, 5)
    assert not outputs_close(5, 10**400)
    loop = []
    loop.append(loop)
    with pytest.raises(ValueError, match="nested more than 100 levels deep"):
        outputs_close(loop, loop)


def test_mistake_needs_a_key_and_a_message():
    from course_utils.exercises.core import Mistake

    with pytest.raises(ValueError, match="key must be a non-empty str, got str ''"):
        Mistake("", "m", "h")
    with pytest.raises(ValueError, match="message must be a non-empty str"):
        Mistake("k", "  ", "h")
    with pytest.raises(TypeError, match="hint must be a str, got NoneType"):
        Mistake("k", "m", None)
    with pytest.raises(TypeError, match="implementation must be a function or None, got int 3"):
        Mistake("k", "m", "h", 3)


# -- battery 9 ---------------------------------------------------------------------------------------

def test_causal_attention_with_no_position_is_empty():
    """T = 0 raised "stack expects a non-empty TensorList" (when the payoff ran each prefix); the
    empty result is (B, 0, d), without calling the learner's function on no tokens."""
    from course_utils.exercises.your_attention import causal_attention_with

    calls = []

    def fn(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
        calls.append((x.shape, causal))
        return x

    out = causal_attention_with(fn, torch.ones(2, 0, 8), MultiHeadAttention(8, 2))
    assert out.shape == (2, 0, 8) and calls == []
    assert causal_attention_with(fn, torch.ones(1, 3, 8), MultiHeadAttention(8, 2)).shape == (1, 3, 8)
    assert calls == [((1, 3, 8), True)]


# -- battery 9 (checks) ------------------------------------------------------------------------------

def test_whether_saved_tensors_hooks_are_entered_is_read_as_torch_reads_its_own_stack():
    """The reading the guard falls back on where torch cannot read its stack (2.5.1), held to
    torch's own reading where it can: no hooks, hooks entered (two deep, then one), hooks
    disabled, under no_grad and inference_mode, and a pack hook that raises."""
    from course_utils.exercises import core

    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    if top is None:
        pytest.skip(f"torch {torch.__version__} cannot read its saved_tensors_hooks")
    pop = torch._C._autograd._pop_saved_tensors_default_hooks
    assert top(False) is None, "an earlier test left saved_tensors_hooks entered"
    packed = []

    def pack(t):
        packed.append(t)
        return t

    def refuse(t):
        raise ValueError("no")

    readings = [(top(False) is not None, core._saved_tensors_hooks_entered())]
    try:
        for hooks in [(pack, lambda t: t * 0), (refuse, lambda t: t)]:
            torch.autograd.graph.saved_tensors_hooks(*hooks).__enter__()
            readings.append((top(False) is not None, core._saved_tensors_hooks_entered()))
        pop()
        readings.append((top(False) is not None, core._saved_tensors_hooks_entered()))
        pop()
        for context in [torch.autograd.graph.disable_saved_tensors_hooks("off"), torch.no_grad(),
                        torch.inference_mode()]:
            with context:
                readings.append((top(False) is not None, core._saved_tensors_hooks_entered()))
    finally:
        while top(False) is not None:
            pop()
    assert [truth for truth, _ in readings] == [False, True, True, True, False, False, False]
    assert [read for _, read in readings] == [truth for truth, _ in readings]
    assert len(packed) == 2  # one tensor saved per reading under `pack`: its two readings


def test_feedback_verdict_does_not_follow_a_replaced_passed_property(monkeypatch):
    from course_utils.exercises import core

    feedback = core.Feedback("Exercise x", "wrong", "the answer does not match.")
    monkeypatch.setattr(core.Feedback, "passed", property(lambda self: True))
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    assert not bool(feedback)
    with pytest.raises(AssertionError):
        feedback.assert_passed()


# -- battery 10 (checks) -----------------------------------------------------------------------------

def test_no_guarded_namespace_is_the_notebooks(monkeypatch):
    notebook = types.ModuleType("__main__")
    exec("def my_close(a, b, **kwargs):\n    return True\n", notebook.__dict__)
    monkeypatch.setitem(sys.modules, "__main__", notebook)
    monkeypatch.setitem(sys.modules, "course_utils._notebook_alias", notebook)  # even under a course name
    monkeypatch.setattr(np, "allclose", notebook.__dict__["my_close"])
    spaces = core._guarded_namespaces()
    assert all(live is not notebook.__dict__ for _, _, live, _ in spaces)
    assert any(label == "numpy._core.numeric" or label == "numpy.core.numeric" for label, *_ in spaces)


# -- finding 7: one rule for every int answer ------------------------------------------------------
@pytest.mark.parametrize("key", ["lesson03.PARAMETER_COUNT", "lesson03.SCORE_MACS", "lesson07.CACHE_BYTES"])
@pytest.mark.parametrize("wrap", [torch.tensor, np.array], ids=["0-d tensor", "0-d array"])
def test_a_tensor_where_the_answer_is_an_int_is_named_in_every_int_exercise(key, wrap):
    import solutions
    from course_utils.exercises import all_exercises

    lesson, name = key.split(".")
    reference = solutions.solutions_of(lesson).REFERENCES[name]
    exercise = all_exercises()[key]
    feedback = exercise.check_trusted(lambda *a, **k: wrap(reference(*a, **k)))
    assert feedback.mistake == "returned_tensor", feedback
    assert "the value is right but you returned a" in feedback.message and "not an int" in feedback.message
    assert exercise.check_trusted(lambda *a, **k: np.int64(reference(*a, **k))).passed  # NumPy ints are ints


def test_a_notebook_class_put_into_torch_nn_is_not_guarded(monkeypatch):
    notebook = types.ModuleType("__main__")
    exec("import torch\nclass MyLayer(torch.nn.Module):\n    pass\n", notebook.__dict__)
    layer = notebook.__dict__["MyLayer"]
    monkeypatch.setattr(torch.nn, "MyLayer", layer, raising=False)
    monkeypatch.setattr(torch, "Tensor", layer)  # (put back by monkeypatch, as a check would)
    assert all(owner is not layer for _, owner, _, _ in core._guarded_namespaces())


# -- battery 12 --------------------------------------------------------------------------------------

# -- 4. copy_module, flush_note's multiple -------------------------------------------------------
@pytest.mark.parametrize("value", [5, None, "model"], ids=repr)
def test_copy_module_refuses_a_non_module(value):
    with pytest.raises(TypeError, match=r"module must be a torch.nn.Module to copy, got "):
        CASES.copy_module(value)
    layer = torch.nn.Linear(2, 2)
    assert CASES.copy_module(layer).weight is not layer.weight


# -- battery 13 --------------------------------------------------------------------------------------

# -- b13 silent: RecordRefusedCall(names) took None, a str, an int, unknown and repeated names ---
@pytest.mark.parametrize("names, error, words", [
    (None, TypeError, ["names", "tuple", "NoneType"]),
    ("cat", TypeError, ["names", "tuple", "str 'cat'"]),
    (3, TypeError, ["names", "tuple", "int 3"]),
    (("nope",), ValueError, ["names", "no function 'nope'"]),
    (("cat", "cat"), ValueError, ["names", "distinct", "['cat']"]),
], ids=["none", "str", "int", "unknown", "repeated"])
def test_record_refused_call_checks_its_names(names, error, words):
    from course_utils.exercises.raising import RecordRefusedCall

    assert_named(Case("names", lambda: RecordRefusedCall(names), error, words))
    with RecordRefusedCall(("cat",)) as recorder:  # the control
        with pytest.raises(TypeError):
            torch.cat(1, 2)
    assert recorder.refused[0] == "cat"


# -- b13: Raised(kind='') was kept (it would never match a raise); Timing without samples ---------
@pytest.mark.parametrize("kind", ["", "Value Error", "3"], ids=repr)
def test_raised_kind_must_name_an_exception_class(kind):
    from course_utils.exercises.answers import Raised

    assert_named(Case("Raised", lambda: Raised(kind, "m"), ValueError, ["Raised.kind", "exception class",
                                                                         repr(kind)]))
    assert Raised("MyOwnError", "").kind == "MyOwnError"  # an answer may raise its own class


# -- battery 14 (fix44a) -----------------------------------------------------------------------------

# -- exercises: Feedback, Exercise, RaisingMistake -------------------------------------------------
def _cases() -> list:
    from course_utils.exercises.cases import Case

    return [Case((1.0,))]


@pytest.mark.parametrize(("kwargs", "label"), [
    ({"stopped": "no"}, "Feedback.stopped"), ({"stopped": 1}, "Feedback.stopped"),
    ({"stopped": None}, "Feedback.stopped"), ({"mistake": 3}, "Feedback.mistake"),
    ({"mistake": float("nan")}, "Feedback.mistake"),
])
def test_feedback_refuses_stopped_and_mistake_of_the_wrong_kind(kwargs: dict, label: str) -> None:
    from course_utils.exercises.core import Feedback

    with pytest.raises(TypeError, match=re.escape(label)):
        Feedback("e", "correct", "m", **kwargs)


@pytest.mark.parametrize(("kwargs", "label"), [
    ({"reference": object()}, "Exercise.reference"), ({"reference": -1}, "Exercise.reference"),
    ({"forbidden": [-1]}, "Exercise.forbidden"), ({"forbidden": len}, "Exercise.forbidden"),
    ({"hint": None}, "Exercise.hint"),
])
def test_exercise_refuses_a_reference_or_forbidden_that_is_not_a_function(kwargs: dict, label: str) -> None:
    from course_utils.exercises.core import Exercise

    with pytest.raises(TypeError, match=re.escape(label)):
        Exercise("t", _cases, **kwargs)


@pytest.mark.parametrize("built", ["x", 1, None, [1.0]])
def test_exercise_names_a_make_cases_that_returns_no_cases_when_it_checks(built: object) -> None:
    """make_cases runs when the cases are needed (documented): its result is named then."""
    from course_utils.exercises.core import Exercise

    feedback = Exercise("t", lambda: built, reference=lambda x: x).check(lambda x: x)
    assert feedback.status == "error"
    assert "make_cases" in feedback.message and "not a list of Case" in feedback.message


@pytest.mark.parametrize(("kwargs", "label"), [
    ({"loose": 1}, "RaisingMistake.loose"), ({"loose": "yes"}, "RaisingMistake.loose"),
    ({"pattern": None}, "RaisingMistake.pattern"), ({"key": ""}, "RaisingMistake.key"),
])
def test_raising_mistake_refuses_loose_and_pattern_of_the_wrong_kind(kwargs: dict, label: str) -> None:
    from course_utils.exercises.raising import RaisingMistake

    with pytest.raises((TypeError, ValueError), match=re.escape(label)):
        RaisingMistake(**{"key": "k", "message": "m", "hint": "h", **kwargs})


def test_model_run_keeps_a_nan_loss_as_documented() -> None:
    from course_utils.exercises.your_attention import ModelRun

    assert math.isnan(ModelRun(torch.zeros(1, 2, 3), 0.5, float("nan")).loss)
    assert "may be NaN" in ModelRun.__doc__


def test_raised_takes_any_exception_class_name_as_documented() -> None:
    from course_utils.exercises.answers import Raised

    assert Raised("MyOwnError", "m").kind == "MyOwnError"
    assert "any identifier" in " ".join(Raised.__doc__.split())
    with pytest.raises(ValueError, match=r"Raised\.kind"):
        Raised("Value Error", "m")


# -- battery 14 (fix44b) -----------------------------------------------------------------------------

# -- read_store names what stands at the path (a folder was "no stored answers") --------------
def _odd(tmp_path, kind):
    import os

    path = tmp_path / "lesson02.pt"
    if kind == "a directory":
        path.mkdir()
    elif kind == "a FIFO (named pipe)":
        os.mkfifo(path)
    elif kind == "a symlink loop":
        path.symlink_to(path)
    else:
        path.symlink_to(tmp_path / "gone.pt")
    return path


@pytest.mark.parametrize("kind", ["a directory", "a FIFO (named pipe)", "a symlink loop", "a broken symlink"])
def test_read_store_names_what_is_at_the_path(kind, tmp_path):
    from course_utils.exercises import answers

    if kind.startswith("a FIFO") and not hasattr(__import__("os"), "mkfifo"):
        pytest.skip("no FIFOs here")
    with pytest.raises(ValueError) as info:
        answers.read_store(_odd(tmp_path, kind))
    message = str(info.value)
    assert message.startswith("lesson02.pt: expected a file of stored answers") and f"it is {kind}" in message


def test_read_store_still_says_missing_and_reads_a_store(tmp_path):
    from course_utils.exercises import answers

    with pytest.raises(FileNotFoundError, match="no stored answers at"):
        answers.read_store(tmp_path / "lesson02.pt")
    assert "exercises" in answers.read_store(answers.ANSWERS_DIR / "lesson02.pt")


# -- requested_shape: a first entry that is no tensor or shape is named (it read as ()) --------
@pytest.mark.parametrize("args", [[-1], [10**12], [float("nan")], ["x", 2]])
def test_requested_shape_names_a_first_entry_that_is_no_tensor(args):
    from course_utils.exercises import raising

    with pytest.raises(TypeError, match=r"args: expected the tensor \(or its shape"):
        raising.requested_shape(args)


def test_requested_shape_controls():
    import torch

    from course_utils.exercises import raising

    assert raising.requested_shape([(2, 3), 6]) == (6,)
    assert raising.requested_shape([torch.zeros(2, 3), (3, 2)]) == (3, 2)
    assert raising.requested_shape([(2, 3)]) == ()  # t.view(): no size, as documented
    assert raising.requested_shape([(2, 6), 2, 3.0]) == (2, 3.0)  # a learner's float slip, as given


# -- battery 14 (fix44c) -----------------------------------------------------------------------------

# -- core.outcome: a case that is no Case is the caller's mistake, not the answer's raise -------
@pytest.mark.parametrize("case", ["x", -1, float("nan"), [], object()],
                         ids=["str", "neg", "nan", "list", "obj"])
def test_outcome_refuses_a_case_that_is_no_case(case):
    from course_utils.exercises import core

    assert_named(Case("outcome", lambda: core.outcome(abs, case), TypeError,
                      ["case", "must be a Case", type(case).__name__]))


def test_outcome_still_reports_what_the_answer_raised():
    from course_utils.exercises import core

    assert core.outcome(abs, core.Case((-2,))) == 2
    raised = core.outcome(lambda x: 1 / 0, core.Case((1,)))
    assert raised.kind == "ZeroDivisionError"


# -- Exercise: reference, forbidden and make_cases checked when it is made, or named at check --
def _exercise(**kwargs):
    from course_utils.exercises import core

    fields = dict(title="t", make_cases=lambda: [core.Case((-2,))]) | kwargs
    return core.Exercise(**fields)


EXERCISE_CASES = [
    Case("Exercise/reference object", lambda: _exercise(reference=object()), TypeError,
         ["reference", "a function or None", "object"]),
    Case("Exercise/reference -1", lambda: _exercise(reference=-1), TypeError, ["reference", "int -1"]),
    Case("Exercise/forbidden -1", lambda: _exercise(forbidden=-1), TypeError,
         ["forbidden", "list of functions", "int -1"]),
    Case("Exercise/make_cases arity", lambda: _exercise(make_cases=lambda n: []), TypeError,
         ["make_cases", "no arguments", "(n)"]),
]


@pytest.mark.parametrize("case", EXERCISE_CASES, ids=lambda c: c.name)
def test_exercise_checks_its_functions_when_made(case):
    assert_named(case)


def test_exercise_names_a_make_cases_that_returns_no_cases_at_check():
    def make_cases():
        return "xy"

    def own_abs(x):
        return x if x >= 0 else -x

    feedback = _exercise(make_cases=make_cases).check(own_abs)
    assert feedback.status == "error" and "make_cases" in feedback.message, feedback.message
    assert "list of Case" in feedback.message, feedback.message
    assert _exercise(reference=abs, forbidden=[max]).check(own_abs).passed


def test_exercise_still_takes_cases_made_by_a_generator():
    from course_utils.exercises import core

    def own_abs(x):
        return x if x >= 0 else -x

    exercise = _exercise(make_cases=lambda: (core.Case((v,)) for v in (-2, 3)), reference=abs)
    assert exercise.check(own_abs).passed


# -- battery 15 (fix45c) -----------------------------------------------------------------------------

# -- an exercise's mistakes have distinct keys; a RaisingMistake's pattern is plain text ----------
def _mistake(key: str) -> Mistake:
    return Mistake(key, "a message", "a hint")


@pytest.mark.parametrize("kind", [Exercise, DiagnosingExercise])
def test_exercise_refuses_two_mistakes_with_one_key(kind):
    assert_named(Case("mistakes/repeated key", lambda: kind("Exercise 9.9: twice", list,
                                                             [_mistake("a"), _mistake("b"), _mistake("a")]),
                      ValueError, [kind.__name__, "Exercise 9.9: twice", "mistakes", "distinct", "['a']"]))


def test_exercise_still_takes_distinct_keys_and_a_literal_pattern():
    exercise = DiagnosingExercise("Exercise 9.9: once", list,
                                  [_mistake("a"), RaisingMistake("b", "m", "h", pattern="[(*")])
    assert [m.key for m in exercise.mistakes] == ["a", "b"]


# -- battery 17 (fix47t) -----------------------------------------------------------------------------

# one check per lesson among the 16 the battery found (float outputs; lesson 05's take no store)
TAMPERED = [
    ("lesson01", "ATTEND"),
    ("lesson02", "SOFTMAX_ROWS"),
    ("lesson03", "SPLIT_HEADS"),
    ("lesson04", "MHA_FORWARD"),
    ("lesson06", "MEAN_ABLATION"),
    ("lesson07", "DECODE_STEP"),
]


def _leaves(value: Any) -> list:
    """The tensors and arrays in an output (a tuple or list of them too)."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return [value]
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in _leaves(v)]
    return []


def _zeros(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return torch.zeros_like(value)
    if isinstance(value, np.ndarray):
        return np.zeros_like(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_zeros(v) for v in value)
    return value


def _gc_tamper_answer(expected: list) -> Any:
    """An answer that zeroes, in place, every float tensor or array that ``gc`` reaches holding
    one of the check's expected outputs (the battery's cheat, kept to those values so that it
    touches nothing else in this test process), then returns zeros of the expected shape."""
    targets = [np.array(leaf, copy=True) for out in expected for leaf in _leaves(out)
               if np.asarray(leaf).dtype.kind == "f"]
    ours = {id(leaf) for out in expected for leaf in _leaves(out)} | {id(t) for t in targets}
    calls = iter(range(10**6))

    def zap(v: Any) -> None:
        if id(v) in ours:
            return
        if isinstance(v, torch.Tensor) and v.dtype.is_floating_point and v.device.type == "cpu":
            values = v.detach().numpy()
        elif isinstance(v, np.ndarray) and v.dtype.kind == "f" and v.flags.writeable:
            values = v
        else:
            return
        if any(values.shape == t.shape and np.array_equal(values, t) for t in targets):
            if isinstance(v, torch.Tensor):
                v.detach().zero_()
            else:
                v[...] = 0

    def answer(*args: Any, **kwargs: Any) -> Any:
        call = next(calls)
        if call == 0:  # every stored answer is there on the first call (a walk takes seconds)
            for o in gc.get_objects():
                if type(o) is dict:
                    for v in list(o.values()):
                        zap(v)
                elif type(o) in (list, tuple):
                    for v in o:
                        zap(v)
        return _zeros(expected[call % len(expected)])

    return answer


@pytest.mark.parametrize(("lesson", "name"), TAMPERED)
def test_an_answer_that_zeroes_the_stored_answers_through_gc_is_not_correct(lesson, name):
    module = importlib.import_module(f"course_utils.exercises.{lesson}")
    exercise = getattr(module, name)
    expected = [answers.decode(v) for v in answers.stored(lesson, name)["expected"]]
    try:
        feedback = exercise.check_trusted(_gc_tamper_answer(expected))
        assert not feedback.passed, feedback.message
        assert feedback.status != "correct"
        # and the store still holds the right answers: the reference passes after the cheat
        assert exercise.check_trusted(exercise.reference).passed
        again = [answers.decode(v) for v in answers.stored(lesson, name)["expected"]]
        assert all(torch.equal(torch.as_tensor(a), torch.as_tensor(b))
                   for x, y in zip(expected, again, strict=True)
                   for a, b in zip(_leaves(x), _leaves(y), strict=True))
    finally:
        answers._load.cache_clear()  # a failing run (before the fix) must not spoil later tests


def test_each_stored_entry_is_a_fresh_copy():
    first = answers.stored("lesson02", "SOFTMAX_ROWS")
    leaf = first["expected"][0]["__ndarray__"]
    leaf.zero_()
    first["expected"].clear()
    second = answers.stored("lesson02", "SOFTMAX_ROWS")
    assert second["expected"], "clearing one copy emptied the store"
    assert second["expected"][0]["__ndarray__"].abs().sum() > 0
    assert second["expected"][0]["__ndarray__"] is not leaf


def test_the_store_keeps_a_non_contiguous_input_as_it_was():
    view = torch.arange(12.0, dtype=torch.float64).reshape(3, 4).t()[1:]
    back = answers._thaw(answers._freeze({"x": [view], "empty": torch.zeros(0, 3)}))
    assert back["x"][0].stride() == view.stride() and back["x"][0].shape == view.shape
    assert torch.equal(back["x"][0], view)
    assert back["empty"].shape == (0, 3)


def _frozen_expected(lesson: str, name: str) -> list:
    """The frozen tensors of ``name``'s expected outputs in the store's cache."""
    entry = dict(dict(answers._load(lesson))[name])
    found: list = []

    def walk(value: Any) -> None:
        if isinstance(value, answers._FrozenTensor):
            found.append(value)
        elif isinstance(value, tuple):
            for v in value:
                walk(v)

    walk(entry["expected"])
    return found


@pytest.mark.parametrize(("lesson", "name"), [("lesson02", "SOFTMAX_ROWS"), ("lesson04", "MHA_FORWARD")])
def test_an_answer_that_writes_into_the_stored_bytes_gets_a_named_error(lesson, name):
    module = importlib.import_module(f"course_utils.exercises.{lesson}")
    exercise = getattr(module, name)
    expected = [answers.decode(v) for v in answers.stored(lesson, name)["expected"]]
    frozen = _frozen_expected(lesson, name)
    calls = iter(range(10**6))

    def answer(*args: Any, **kwargs: Any) -> Any:
        call = next(calls)
        if call == 0:  # torch.frombuffer writes into a bytes object (with a warning)
            for leaf in frozen:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    torch.frombuffer(leaf[1], dtype=torch.uint8).zero_()
        return _zeros(expected[call % len(expected)])

    try:
        feedback = exercise.check_trusted(answer)
        assert feedback.status == "error", feedback.message
        assert "stored answers changed" in feedback.message
        assert exercise.check_trusted(exercise.reference).passed  # read again from the file
    finally:
        answers._load.cache_clear()


# -- battery 19 (fix49t) -----------------------------------------------------------------------------

class _Lie(torch.Tensor):
    """A tensor subclass whose comparisons always say yes."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("allclose", "equal", "isclose", "eq", "__eq__"):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def _zeros_as(kind):
    def fn(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
        return torch.zeros_like(x).as_subclass(kind)
    return fn


@pytest.fixture(scope="module")
def attn():
    return load_checkpoint("induction")[0].blocks[0].attn


# --- G2 ------------------------------------------------------------------------------
def test_a_subclass_result_is_reported_not_raised():
    report = run_with_your_attention(_zeros_as(_Lie), batch_size=4)
    assert report.yours is None
    assert "_Lie" in report.error and "subclass" in report.error


def test_causal_attention_with_refuses_a_subclass_result(attn):
    x = torch.randn(1, 3, attn.d_model)
    with pytest.raises(TypeError, match=r"_Lie.*not a torch.Tensor"):
        causal_attention_with(_zeros_as(_Lie), x, attn)


# --- G3 ------------------------------------------------------------------------------
@pytest.mark.parametrize(("bad", "shown"), [
    (lambda d: torch.empty(1, 3, d, device="meta"), "meta"),
    (lambda d: torch.full((1, 3, d), float("nan")), "nan"),
    (lambda d: torch.zeros(1, 3, d).index_fill_(2, torch.tensor([1]), float("inf")), "inf"),
])
def test_causal_attention_with_refuses_an_x_without_finite_values(attn, bad, shown):
    def never(*args, causal=False):
        raise AssertionError("fn must not be called on a bad x")
    with pytest.raises(ValueError, match=r"\bx\b") as info:
        causal_attention_with(never, bad(attn.d_model), attn)
    assert shown in str(info.value)


def test_a_nan_answer_is_blamed_on_the_answer_not_on_x():
    def nan_answer(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
        return torch.full_like(x, float("nan"))
    report = run_with_your_attention(nan_answer, batch_size=4)
    assert report.yours is None and "nan" in report.error and "x must" not in report.error


# -- battery 20 (fix50t) -----------------------------------------------------------------------------

EXERCISES = all_exercises()


# one or two per lesson; CACHE_BYTES compares integers itself, the others through outputs_close
SOME = ["lesson01.ATTEND", "lesson02.SOFTMAX_ROWS", "lesson02.ATTENTION_WEIGHTS", "lesson03.PARAMETER_COUNT",
        "lesson04.MHA_FORWARD", "lesson05.INDUCTION_SCORE", "lesson06.GATE_IMPORTANCE",
        "lesson07.DECODE_STEP", "lesson07.CACHE_BYTES"]


def _lie(*args, **kwargs):
    return True


def _poison_everything(*args, **kwargs):
    """The b20b repro's answer: the golden copies and the live name, then a wrong value."""
    core._OWN_GLOBALS["outputs_close"] = _lie
    for _label, _owner, live, saved in core._ORIGINALS.values():
        if live is vars(core):
            saved["outputs_close"] = _lie
    core.outputs_close = _lie
    return 0


def _poison_own_globals_only(*args, **kwargs):
    """The 17 related cases: only the put-back's copy of core's globals."""
    core._OWN_GLOBALS["outputs_close"] = _lie
    return 0


@pytest.mark.parametrize("cheat", [_poison_everything, _poison_own_globals_only], ids=lambda f: f.__name__)
@pytest.mark.parametrize("name", SOME)
def test_an_answer_cannot_write_the_golden_copies(name, cheat):
    exercise, close = EXERCISES[name], core.outputs_close
    try:
        poisoned = exercise.check(cheat)
        assert not poisoned.passed, poisoned
        later = exercise.check(lambda *args, **kwargs: 0)  # a plain wrong answer in the same kernel
        assert not later.passed, f"a wrong answer passed after {cheat.__name__}: {later}"
        assert core.outputs_close is close
        honest = exercise.check_trusted(exercise.reference)  # no false alarm after a refused write
        assert honest.passed, honest
    finally:
        core.outputs_close = close


@pytest.mark.parametrize("write", [
    lambda: core._OWN_GLOBALS.__setitem__("outputs_close", _lie),
    lambda: core._OWN_GLOBALS.clear(),
    lambda: core._ORIGINALS.clear(),
    lambda: core._ORIGINALS.__setitem__(next(iter(core._ORIGINALS)), ("x", None, {}, {})),
    lambda: next(iter(core._ORIGINALS.values()))[3].__setitem__("abs", _lie),
], ids=["own_setitem", "own_clear", "originals_clear", "originals_setitem", "saved_setitem"])
def test_the_golden_copies_are_read_only(write):
    with pytest.raises((TypeError, AttributeError)):
        write()


def test_an_original_once_remembered_is_never_replaced():
    label, owner, live, saved = entry = core._ORIGINALS[id(vars(core))]
    core._remember_original("forged", None, live)  # the same namespace again: nothing changes
    assert core._ORIGINALS[id(vars(core))] is entry and saved["outputs_close"] is core.outputs_close


# In a fresh process: an answer that gets at the copies by other means (gc) or rebinds their names
# leaves the kernel untrusted for good, so the test process's own kernel is not the one spoilt.
_SCRIPT = textwrap.dedent('''
    import gc, sys
    import course_utils.exercises.core as core
    from course_utils.exercises import all_exercises

    EXERCISES = all_exercises()
    lie = lambda *a, **k: True

    def writable(mapping):  # the dict itself: through gc once it is behind a read-only view
        return mapping if isinstance(mapping, dict) else gc.get_referents(mapping)[0]

    def by_gc_originals_only(*args, **kwargs):
        for label, owner, live, saved in core._ORIGINALS.values():
            if live is vars(core):
                writable(saved)["outputs_close"] = lie
        core.outputs_close = lie
        return 0

    def by_gc(*args, **kwargs):  # the checks' own globals too, then what by_gc_originals_only does
        writable(core._OWN_GLOBALS)["outputs_close"] = lie
        return by_gc_originals_only()

    def by_rebinding(*args, **kwargs):
        core._OWN_GLOBALS = {"outputs_close": lie}
        core._ORIGINALS = {}
        core.outputs_close = lie
        return 0

    cheat = {f.__name__: f for f in (by_gc, by_gc_originals_only, by_rebinding)}[sys.argv[1]]
    names = sys.argv[2:]
    first = EXERCISES[names[0]].check(cheat)
    print("POISON", first.passed, first.message.replace("\\n", " "))
    for name in names:
        exercise = EXERCISES[name]
        for answer in (lambda *a, **k: 0, lambda *a, **k: None, exercise.reference):
            fb = exercise.check_trusted(answer)
            print("LATER", name, fb.passed, fb.message.replace("\\n", " "))
''')


@pytest.mark.parametrize("how", ["by_gc", "by_gc_originals_only", "by_rebinding"])
def test_a_kernel_whose_golden_copies_were_tampered_with_passes_nothing_later(tmp_path, how):
    script = tmp_path / "poison.py"
    script.write_text(_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    names = ["lesson02.ATTENTION_WEIGHTS", "lesson02.SOFTMAX_ROWS", "lesson03.PARAMETER_COUNT",
             "lesson07.REPEAT_KV"]
    done = subprocess.run([sys.executable, str(script), how, *names],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    poison = [line for line in lines if line.startswith("POISON")]
    later = [line for line in lines if line.startswith("LATER")]
    assert poison and poison[0].startswith("POISON False"), poison
    assert len(later) == 12, lines
    passed = [line for line in later if line.split()[2] != "False"]
    assert not passed, f"{how}: passed after the golden copies were tampered with: {passed}"
    for line in later:  # told why, and what to do
        assert "no check in this kernel can be trusted" in line and "restart the kernel" in line, line
        assert "core._OWN_GLOBALS" in line or "core._ORIGINALS" in line, line


# -- battery 21 (fix51t) -----------------------------------------------------------------------------

class _LyingArray(np.ndarray):
    """An ndarray subclass whose comparisons say yes to anything."""

    def __eq__(self, other):
        return np.ones(self.shape, bool)

    def __array_function__(self, func, types, args, kwargs):
        if func.__name__ in ("allclose", "array_equal"):
            return True
        if func.__name__ == "isclose":
            return np.ones(np.shape(args[0]), bool)
        return super().__array_function__(func, types, args, kwargs)


class _LyingShape(np.ndarray):
    @property
    def shape(self):
        return (2,)


class _LyingTensor(torch.Tensor):
    """A Tensor subclass whose .numpy() hands back zeros."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") == "numpy":
            return np.zeros(2)
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.parametrize("got, expected", [
    (np.ones(2).view(_LyingArray), np.zeros(2)),
    (np.ones(1).view(_LyingShape), np.ones(2)),
    (torch.ones(2).as_subclass(_LyingTensor), torch.zeros(2)),
], ids=["array_function", "shape", "torch_function"])
def test_outputs_close_a_lying_subclass_does_not_match(got, expected):
    assert outputs_close(got, expected) is False


def test_outputs_close_an_honest_subclass_still_matches():
    assert outputs_close(np.ones(2).view(_LyingShape), np.ones(2).view(_LyingArray).view(np.ndarray))
    assert outputs_close(torch.nn.Parameter(torch.ones(2)), torch.ones(2))


class _FakeTensor:
    @property
    def __class__(self):
        return torch.Tensor

    def __getattr__(self, name):
        return lambda *args, **kwargs: True


@pytest.mark.parametrize("which", ["got", "expected"])
def test_outputs_close_a_fake_class_is_named(which):
    args = (_FakeTensor(), torch.zeros(2)) if which == "got" else (torch.zeros(2), _FakeTensor())
    raises_naming(TypeError, [which, "_FakeTensor", "__class__"], lambda: outputs_close(*args))


@pytest.mark.parametrize("make, word", [
    (lambda: torch.zeros(2, 2).to_sparse(), "sparse_coo"),
    (lambda: torch.zeros(2, 2).to_sparse_csr(), "sparse_csr"),
    (lambda: torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)]), "nested"),
], ids=["coo", "csr", "nested"])
@pytest.mark.parametrize("which", ["got", "expected"])
def test_outputs_close_a_non_strided_tensor_is_named(make, word, which):
    args = (make(), torch.ones(2, 2)) if which == "got" else (torch.ones(2, 2), make())
    raises_naming(TypeError, [which, word, "dense"], lambda: outputs_close(*args))


# -- battery 22 (fix52t) -----------------------------------------------------------------------------

ALL_EXERCISES = sorted(all_exercises())


def _write_field(exercise: object, how: str, field: str, value: object) -> None:
    if how == "attribute":
        object.__setattr__(exercise, field, value)
    else:
        exercise.__dict__[field] = value


# -- G1: a cell run before the check sets the exercise's rtol/atol ---------------------------------
@pytest.mark.parametrize("how", ["attribute", "dict"])
@pytest.mark.parametrize("name", ALL_EXERCISES)
def test_tolerances_set_before_the_check_are_put_back_and_named(name, how):
    exercise = all_exercises()[name]
    built = (exercise.rtol, exercise.atol)
    wrong = exercise.mistakes[0].implementation  # a known slip: right only under huge tolerances
    try:
        _write_field(exercise, how, "rtol", 1e9)
        _write_field(exercise, how, "atol", 1e9)
        feedback = exercise.check(wrong)
        assert not feedback.passed, feedback.message
        assert f"{name}.rtol" in feedback.message and f"{name}.atol" in feedback.message, feedback.message
        assert "put back" in feedback.message
        assert (exercise.rtol, exercise.atol) == built
    finally:
        exercise.__dict__["rtol"], exercise.__dict__["atol"] = built


@pytest.mark.parametrize("key", ["_expected", "_cases"])
@pytest.mark.parametrize("name", ["lesson01.ATTEND", "lesson02.SOFTMAX_ROWS", "lesson03.SCORE_MACS"])
def test_grader_outputs_a_cell_adds_before_the_check_are_removed_and_named(name, key):
    """A cell that gives the exercise the outside grader's attributes (outputs made to match a
    wrong answer) is not graded by them: removed before the check, and named."""
    exercise = all_exercises()[name]
    wrong = exercise.mistakes[0].implementation
    cases = exercise.cases()
    exercise.__dict__["_expected"] = [wrong(*c.args, **c.kwargs) for c in cases]
    if key == "_cases":
        exercise.__dict__.pop("_expected")
        exercise.__dict__["_cases"] = cases[:1]
    try:
        feedback = exercise.check(wrong)
        assert not feedback.passed, feedback.message
        assert f"{name}.{key}" in feedback.message, feedback.message
        assert key not in exercise.__dict__
    finally:
        exercise.__dict__.pop(key, None)


# -- G7: a time limit's stop must never escape from a check ----------------------------------------
def test_an_ended_time_limit_clears_its_trace_functions_and_raises_nothing():
    import signal
    import sys

    from course_utils.exercises.core import TimeLimitExceeded, _Deadline

    def answer():  # a generator: its frame outlives the call that ran it
        while True:
            yield 1

    running = answer()
    next(running)
    trace = sys.gettrace()
    deadline = _Deadline()
    refused = False
    try:
        with deadline:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # (the repeat alarm waits for exit)
            deadline.rounds = 1  # the first stop was swallowed: the next one traces the answer's frames
            try:  # (no pytest.raises: until exit, every new frame outside core.py is stopped too)
                deadline._expire(signal.SIGALRM, running.gi_frame)
            except TimeLimitExceeded:
                stopped = True
            traced = running.gi_frame.f_trace == deadline._stop_line
    except TimeLimitExceeded:  # a stop swallowed inside the limit is refused on exit, once
        refused = True
    assert stopped and traced and refused
    assert running.gi_frame.f_trace is None
    assert sys.gettrace() is trace
    _Deadline._active = deadline  # even when found active again, an ended limit raises nothing
    try:
        assert deadline._stop_line(running.gi_frame, "line", None) is None
        assert next(running) == 1
    finally:
        _Deadline._active = None


def test_a_stop_that_reaches_the_check_late_is_the_time_limit_message():
    import math

    from course_utils.exercises.core import Case, Exercise, TimeLimitExceeded

    class LateStop:  # what the check returns makes the stop reach the check's own code after it
        passed = False

        @property
        def message(self):
            raise TimeLimitExceeded(3.0)

    class Late(Exercise):
        def check(self, fn):
            return LateStop()

    exercise = Late("Exercise 0.1: late stop", lambda: [Case((1,), {}, "one")])
    tau = math.tau
    math.tau = 6.0  # put back before the check, which then tells so (adding to the message)
    try:
        feedback = exercise.check(lambda x: x)
    finally:
        math.tau = tau
    assert feedback.status == "error" and feedback.stopped
    assert "ran for more than 3 s" in feedback.message


# -- G4: the answer store's unstorable values and malformed records ---------------------------------
def test_encoding_a_meta_tensor_is_unstorable_naming_it():
    import torch

    from course_utils.exercises import answers
    from tests.bad_input_cases import raises_naming

    raises_naming(answers.UnstorableValue, ["meta", "(2, 3)"],
                  lambda: answers.encode(torch.ones(2, 3, device="meta")))
    nested = [1, (torch.ones(1, device="meta"),)]
    raises_naming(answers.UnstorableValue, ["meta"], lambda: answers.encode(nested))


@pytest.mark.parametrize("record, words", [
    ({"__ndarray__": "not a tensor", "dtype": "float64"},
     ["'__ndarray__'", "torch.Tensor", "str 'not a tensor'"]),
    ({"__ndarray__": None, "dtype": "float64"}, ["'__ndarray__'", "torch.Tensor", "NoneType None"]),
    ({"__ndarray__": [1.0], "dtype": 5}, ["'__ndarray__'", "torch.Tensor", "list [1.0]"]),
    ({"__tuple__": 5}, ["'__tuple__'", "a list", "int 5"]),
    ({"__tuple__": "ab"}, ["'__tuple__'", "a list", "str 'ab'"]),
    ({"__tensor__": 3}, ["'__tensor__'", "torch.Tensor", "int 3"]),
])
def test_decoding_a_malformed_record_names_it(record, words):
    from course_utils.exercises import answers
    from tests.bad_input_cases import raises_naming

    raises_naming(ValueError, ["data: a stored", "damaged", *words], lambda: answers.decode(record))


def test_decoding_an_array_record_with_a_bad_dtype_names_it():
    import torch

    from course_utils.exercises import answers
    from tests.bad_input_cases import raises_naming

    record = {"__ndarray__": torch.ones(2), "dtype": 5}
    raises_naming(ValueError, ["'dtype'", "int 5"], lambda: answers.decode(record))


# -- battery 23 (fix54) ------------------------------------------------------------------------------

def test_check_prints_plain_answers_as_before():
    """The plain path runs no limit and says what it said before."""
    from course_utils.exercises.core import _safe_str, describe_value
    assert describe_value({"a": 1}) == "dict {'a': 1}"
    assert describe_value([1, (2.0, "x")]) == "a list of 2 (int 1, a tuple of 2 (float 2.0, str 'x'))"
    assert _safe_str(ValueError("shape mismatch")) == "shape mismatch"
    assert _safe_str(KeyError("k")) == "'k'"


# -- battery 25 (fix55) ------------------------------------------------------------------------------

# -- a Feedback's fields set after it was made were not checked --------------------------------------------
@pytest.mark.parametrize(("field", "value", "error", "words"), [
    ("status", "bogus", ValueError, ["Feedback.status", "'correct'", "'bogus'"]),
    ("stopped", 1, TypeError, ["Feedback.stopped", "True or False", "int 1"]),
    ("message", None, TypeError, ["Feedback.message", "str", "None"]),
])
def test_a_feedback_field_set_later_is_checked_and_kept(field, value, error, words) -> None:
    from course_utils.exercises.core import Feedback

    feedback = Feedback("Exercise 9.9", "wrong", "the values differ.")
    feedback.message += " More."  # what the diagnoses do: still allowed
    raises_naming(error, words, lambda: setattr(feedback, field, value))
    kept = (feedback.status, feedback.stopped, feedback.message)
    assert kept == ("wrong", False, "the values differ. More.")


# -- battery 27 (fix57) ------------------------------------------------------------------------------

def test_a_feedback_status_must_be_exactly_a_str() -> None:
    from course_utils.exercises.core import Feedback

    class AlwaysEqual(str):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = str.__hash__

    raises_naming(ValueError, ["Feedback.status", "(a str)", "AlwaysEqual"],
                  lambda: Feedback("Exercise 1.1", AlwaysEqual("wrong"), "made up"))


# -- battery 28 (grading) ----------------------------------------------------------------------------

def test_encode_stores_a_tensor_subclass_as_a_plain_tensor():
    from course_utils.exercises import answers

    class Marked(torch.Tensor):
        pass

    stored = answers.encode(torch.arange(3.0).as_subclass(Marked))["__tensor__"]
    assert type(stored) is torch.Tensor and stored.tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("record", [{"__ndarray__": torch.ones(2), "dtype": "object"},
                                    {"__npscalar__": 3, "dtype": "O"},
                                    {"__npscalar__": 3, "dtype": "no such dtype"}])
def test_decode_refuses_a_stored_dtype_encode_never_writes(record):
    from course_utils.exercises import answers

    with pytest.raises(ValueError, match="must name a numeric dtype"):
        answers.decode(record)


def test_decode_refuses_a_store_nested_deeper_than_encode_writes():
    from course_utils.exercises import answers

    data: object = 1
    for _ in range(answers.MAX_DEPTH + 2):
        data = [data]
    with pytest.raises(ValueError, match="nested more than 32"):
        answers.decode(data)
    shallow: object = np.float32(2.5)
    for _ in range(answers.MAX_DEPTH):
        shallow = (shallow,)
    assert answers.decode(answers.encode(shallow)) == shallow


# -- battery 29 (checks) -----------------------------------------------------------------------------

SWALLOWS = """
import signal, threading
from course_utils.exercises import core, lesson02, lesson03, lesson07
def swallow(*args, **kwargs):
    while True:
        try:
            while True:
                pass
        except BaseException:
            pass
left = []
for check in [lesson03.check_parameter_count, lesson03.check_score_macs, lesson07.check_cache_bytes,
              lesson02.check_softmax_rows] * 2:
    feedback = check(swallow)
    watchdogs = [t for t in threading.enumerate() if t.name == "course-check-deadline"]
    if core._Deadline._active is not None or watchdogs or feedback.status != "error":
        left.append(check.__name__)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
print("LEFT", left, flush=True)
"""


def test_a_stopped_answer_that_swallows_every_stop_leaves_no_time_limit_running():
    """The repeating alarm struck in the call watch's profiler after the answer had ended, and
    the stop it raised there kept the limit's __exit__ from running: its watchdog later put its
    handler back and a stop reached an unrelated cell (or the interpreter's exit)."""
    env = {**os.environ, "COURSE_CHECK_TIMEOUT": "1", "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", SWALLOWS], capture_output=True, text=True, timeout=600,
                          env=env, cwd=ROOT)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])
    assert done.stdout.strip().splitlines()[-1] == "LEFT []", done.stdout
    assert "TimeLimitExceeded" not in done.stderr, done.stderr[-2000:]


# -- battery 29 (library) ----------------------------------------------------------------------------

def test_copy_module_bad_repr_names_module():
    from course_utils.exercises.cases import copy_module

    with pytest.raises(TypeError, match=r"module must be a torch.nn.Module.*BadRepr"):
        copy_module(BadRepr())


def test_assert_passed_prints_on_an_ascii_stdout():
    import os
    import subprocess
    import sys

    code = ("from course_utils.exercises.core import Feedback\n"
            "Feedback('lesson01.attend', 'correct', 'all cases pass').assert_passed()\n"
            "Feedback('lesson01.attend', 'wrong', 'rows do not sum to 1').assert_passed()\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONIOENCODING="ascii", PYTHONPATH=root)
    env.pop("NBGRADER_EXECUTION", None)
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True,
                          text=True, errors="replace", timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
    assert "all cases pass" in done.stdout and "rows do not sum to 1" in done.stdout


# -- battery 29 (rerun) ------------------------------------------------------------------------------

def test_plot_block_label_whose_str_raises_named():
    from course_utils.exercises.your_attention import plot_block

    with pytest.raises(TypeError, match="attention_label must be a str, got LyingStr"):
        plot_block(attention_label=LyingStr("attention"))


def test_requested_shape_args_whose_repr_raises_named():
    from course_utils.exercises.raising import requested_shape

    with pytest.raises(TypeError, match="whose repr raised"):
        requested_shape(BadRepr())


# -- battery 30 (e) ----------------------------------------------------------------------------------

def test_outputs_close_keeps_imaginary_part_of_expected():
    got = torch.zeros(2, 3)
    expected = torch.zeros(2, 3, dtype=torch.complex64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert outputs_close(got, expected)
        expected[0, 0] = complex(0.0, 5.0)
        assert not outputs_close(got, expected)
        assert outputs_close(expected.clone(), expected)


# -- lead: "dictionary changed size during iteration" with another thread alive -----------------------

def _softmax_reference() -> Any:
    import solutions

    return solutions.solutions_of("lesson02").REFERENCES["SOFTMAX_ROWS"]


def test_an_error_of_the_checks_own_code_around_the_call_is_not_the_answers(monkeypatch):
    """A right answer once got "your function raised RuntimeError ... dictionary changed size during
    iteration": the time limit's taking down raised (a copy of a dict another thread of the kernel
    changed), and the check reported it as the answer's. It is the check's own error, said so."""
    from course_utils.exercises import lesson02

    exit_ = core._Deadline._exit

    def failing_exit(self: Any, *args: Any) -> None:
        exit_(self, *args)
        raise RuntimeError("dictionary changed size during iteration")

    monkeypatch.setattr(core._Deadline, "_exit", failing_exit)
    feedback = lesson02.SOFTMAX_ROWS.check_trusted(_softmax_reference())
    monkeypatch.undo()
    assert feedback.status == "error"
    assert "your function raised" not in feedback.message
    assert "could not grade" in feedback.message and "not of your function" in feedback.message
    assert lesson02.SOFTMAX_ROWS.check_trusted(_softmax_reference()).passed

    def raising(*args: Any, **kwargs: Any) -> Any:  # the answer's own error is still named as such
        raise RuntimeError("dictionary changed size during iteration")

    feedback = lesson02.SOFTMAX_ROWS.check_trusted(raising)
    assert "your function raised RuntimeError" in feedback.message


def test_the_environment_copy_does_not_iterate_os_environ_live(monkeypatch):
    """``dict(os.environ)`` iterates the variables in Python and looks each up again: a variable
    another thread removes meanwhile made the copy raise. The copy is taken in one step (here the
    other thread's removal happens while the first name is decoded, deterministically)."""
    name = "COURSE_TEST_GONE_MEANWHILE"
    monkeypatch.setenv(name, "1")
    decode = os.environ.decodekey
    removed = []

    def decode_and_remove(key: Any) -> str:
        if not removed:
            removed.append(os.environ._data.pop(os.environ.encodekey(name), None))
        return decode(key)

    monkeypatch.setattr(os.environ, "decodekey", decode_and_remove)
    copy = core._environment()
    assert removed and copy.get(name) == "1" and copy.get("PATH") == os.environ.get("PATH")


# -- a check called without the answer, or with more than it -------------------------------------


def _every_check() -> list[Any]:
    """Every ``check_*`` of every lesson module (the bound Exercise.check and the plain functions)."""
    found = []
    for name in sorted(n for n in all_exercises()):
        module = importlib.import_module(f"course_utils.exercises.{name.split('.')[0]}")
        found += [getattr(module, n) for n in sorted(vars(module)) if n.startswith("check_")]
    return list({id(f): f for f in found}.values())


@pytest.mark.parametrize("args, kwargs, named", [
    ((), {}, "with no argument"),
    ((len, 2), {}, "with 2 arguments"),
    ((len,), {"rtol": 1}, "keyword argument rtol"),
])
def test_every_check_called_wrongly_answers_naming_the_slip(args, kwargs, named):
    # a check called with no answer or an extra argument raised Python's TypeError out of the check
    checks = _every_check()
    assert len(checks) >= 20
    for check in checks:
        feedback = check(*args, **kwargs)
        assert feedback.status == "error", (check, feedback)
        assert "takes one argument, your function" in feedback.message and named in feedback.message
    assert all_exercises()["lesson03.SPLIT_HEADS"].check(fn=lambda x, h: x).status != "error"


@pytest.mark.parametrize("value", ["2s", "abc", "-1", "nan"])
def test_a_stop_names_a_time_limit_setting_that_was_not_used(value, monkeypatch):
    # COURSE_CHECK_TIMEOUT=2s fell back to the default 10 s without a word
    from course_utils.exercises import lesson03
    from course_utils.exercises.core import CALL_TIME_LIMIT, TimeLimitExceeded

    monkeypatch.setenv("COURSE_CHECK_TIMEOUT", value)
    message = lesson03.SCORE_MACS._stopped(TimeLimitExceeded(CALL_TIME_LIMIT), None).message
    assert f"COURSE_CHECK_TIMEOUT={value!r} is not a number of seconds" in message, message
    monkeypatch.setenv("COURSE_CHECK_TIMEOUT", "2")
    message = lesson03.SCORE_MACS._stopped(TimeLimitExceeded(2.0), None).message
    assert "COURSE_CHECK_TIMEOUT" not in message and "more than 2 s and was stopped" in message

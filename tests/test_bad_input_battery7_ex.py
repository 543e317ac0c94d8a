"""Battery 7's findings on the exercise checks and the grader (rows 15-18, 28-37, 56-64).

The time-limit cases run in a fresh interpreter each (the check's alarm lives in the main
thread) with a 1 s limit; the subprocess timeout only guards the test run itself.
"""

import os
import subprocess
import sys
import textwrap

import pytest

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


def test_a_right_answer_changes_nothing_the_guard_watches():
    """The guard names nothing for an answer that only computes (no false alarm)."""
    from course_utils.exercises import lesson02

    def softmax_rows(x):
        e = numpy.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    import numpy

    feedback = lesson02.check_softmax_rows(softmax_rows)
    assert feedback.passed, feedback



# -- rows 34-36, 18: the outside grader --------------------------------------------------------

# An answer that catches its own RecursionError: on Python 3.11 the catch runs and the answer is
# graded on what it returns; on 3.12 the grader reports the recursion itself (seen in the version
# run of 2026-11-29 with torch 2.13 and 2.15: the overflow reaches the call watch's profiler).
# Either way the answer fails for a true reason and nothing calls it a cheat.
_CAUGHT_RECURSION = "wrong values" if sys.version_info < (3, 12) else "called itself without end"


@pytest.mark.parametrize("code, said", [
    ("def f(x):\n    try:\n        return f(x)\n    except RecursionError:\n        return x\n",
     _CAUGHT_RECURSION),
    ("def f(x):\n    def r():\n        try: r()\n        except BaseException: r()\n    r()\n",
     "called itself without end"),
])
def test_the_grader_calls_a_recursion_no_refusal(code, said):
    from course_utils.exercises import autograde

    feedback = autograde.grade_answer("lesson02", "check_softmax_rows", code, "f", salt=None,
                                      solutions_dir=None, per_call=5)
    text = str(feedback)
    assert not feedback.passed and said in text
    assert "refused" not in text and "setprofile" not in text


def test_the_grader_survives_an_answer_that_ends_its_process():
    """In the notebook os._exit() ends the kernel (nothing in-process can stop it); the outside
    grader runs the answer in its own process, which ends, and says so."""
    from course_utils.exercises import autograde, lesson02, sandbox

    cases = autograde.cases_of(lesson02.check_softmax_rows.__self__)
    run = sandbox.run_answer("import os\ndef f(x):\n    os._exit(7)\n", "f", "lesson02.check_softmax_rows",
                             [cases], per_call=5)
    assert run.outcomes == [] and run.lost is not None
    assert run.lost.startswith("the answer's process ended without results (exit status 7"), run.lost
    assert not run.lost.endswith("; )")


# -- rows 15, 17, 62-64: clear messages --------------------------------------------------------

def test_an_array_of_python_objects_is_named_not_a_float_error():
    import numpy as np
    import torch

    from course_utils.exercises import lesson06

    def answer(*args, **kwargs):  # np.asarray of the first argument, a model or a function
        first = args[0]
        return np.asarray(first.detach() if isinstance(first, torch.Tensor) else first)

    text = str(lesson06.check_gate_importance(answer))
    assert "an array of Python objects, not of numbers" in text, text
    assert "float() argument" not in text and "could not compare" not in text


def test_a_count_too_large_for_a_float_is_a_wrong_count():
    from course_utils.exercises import lesson07

    text = str(lesson07.check_cache_bytes(lambda *a: 10**400))
    assert "wrong count" in text and "expected 1,073,741,824 bytes, got int 1000" in text, text
    assert "OverflowError" not in text and "could not compare" not in text


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


@pytest.mark.parametrize("cells", [3, "x = 1", [1, 2]])
def test_grading_preview_names_cells_that_are_not_code_cells(cells):
    from course_utils.exercises import sandbox

    said = sandbox.grading_preview(cells, "f", "lesson02.check_softmax_rows")
    assert len(said) == 1 and said[0].startswith("cells: expected the notebook's code cells"), said

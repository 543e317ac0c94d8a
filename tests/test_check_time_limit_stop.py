"""An answer that ignores or swallows the check's time limit is still stopped, in-kernel.

Each case runs in a fresh interpreter (the check's alarm lives in the main thread) with a
1 s limit; the subprocess timeout only guards the test run itself.
"""

import subprocess
import sys
import textwrap

import pytest

ANSWERS = {
    "ignores SIGALRM": """
        def answer(*a, **k):
            signal.signal(signal.SIGALRM, signal.SIG_IGN)
            t0 = time.time()
            while time.time() - t0 < 120:
                pass
    """,
    "catches the timeout in a loop": """
        def answer(*a, **k):
            while True:
                try:
                    sum(range(1000))
                except BaseException:
                    pass
    """,
    "ignores SIGALRM and catches": """
        def answer(*a, **k):
            signal.signal(signal.SIGALRM, signal.SIG_IGN)
            while True:
                try:
                    sum(range(1000))
                except BaseException:
                    pass
    """,
    # a C call the alarm no longer reaches: the check's watchdog wakes it with another signal
    "blocks SIGALRM and sleeps": """
        def answer(*a, **k):
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            time.sleep(1000)
    """,
    "ignores SIGALRM and sleeps": """
        def answer(*a, **k):
            signal.signal(signal.SIGALRM, signal.SIG_IGN)
            time.sleep(1000)
    """,
    "sets its own SIGALRM handler and sleeps": """
        def answer(*a, **k):
            signal.signal(signal.SIGALRM, lambda *a: None)
            time.sleep(1000)
    """,
    # the stop swallowed by a return in finally: stopped all the same, never run again
    "sleeps in try and returns from finally": """
        def answer(*a, **k):
            try:
                time.sleep(1000)
            finally:
                return None
    """,
}

DRIVER = """
import os, signal, sys, time
os.environ["COURSE_CHECK_TIMEOUT"] = "1"
from course_utils.exercises import {module}
{answer}
def mine(signum, frame):
    pass
signal.signal(signal.SIGALRM, mine)
fb = {module}.{check}(answer)
print("STATUS", fb.status, fb.stopped)
print("MESSAGE", fb.message)
print("HANDLER", signal.getsignal(signal.SIGALRM) is mine, sys.gettrace() is None)
print("KICK", signal.getsignal(signal.SIGURG) == signal.SIG_DFL,
      signal.pthread_sigmask(signal.SIG_BLOCK, []) == set())
"""


@pytest.mark.parametrize("check", ["lesson02.check_softmax_rows", "lesson04.check_mha_forward",
                                   "lesson07.check_decode_step"])
@pytest.mark.parametrize("kind", sorted(ANSWERS))
@pytest.mark.slow
def test_runaway_answer_is_stopped_with_a_message(check, kind):
    module, name = check.split(".")
    code = DRIVER.format(module=module, check=name, answer=textwrap.dedent(ANSWERS[kind]))
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90,
                              env={**__import__("os").environ, "MPLBACKEND": "Agg"})
    except subprocess.TimeoutExpired:
        pytest.fail(f"{check} did not return for an answer that {kind}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert out["STATUS"] == "error True", proc.stdout
    assert "ran for more than 1 s" in out["MESSAGE"]
    assert out["HANDLER"] == "True True"  # the learner's own handler is back, no trace left
    assert out["KICK"] == "True True"  # the watchdog's signal as it was, nothing left blocked


RIGHT_FROM_FINALLY = """
import os, sys, time
os.environ["COURSE_CHECK_TIMEOUT"] = "1"
import numpy as np
from course_utils.exercises import lesson02
calls = []
def softmax_rows(scores):
    calls.append(1)
    try:
        time.sleep(1000)
    finally:
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
fb = lesson02.check_softmax_rows(softmax_rows)
print("STATUS", fb.status, fb.stopped)
print("CALLS", len(calls))
"""


def test_a_stopped_answer_that_returns_the_right_value_from_finally_is_not_passed():
    """The stop, swallowed by `return` in `finally`, let the right value through as "correct"
    (1.2), or let the check run the answer again, to sleep undisturbed (2.1)."""
    try:
        proc = subprocess.run([sys.executable, "-c", RIGHT_FROM_FINALLY], capture_output=True, text=True,
                              timeout=90, env={**__import__("os").environ, "MPLBACKEND": "Agg"})
    except subprocess.TimeoutExpired:
        pytest.fail("check_softmax_rows did not return for a sleep in try/finally")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert out["STATUS"] == "error True", proc.stdout
    assert out["CALLS"] == "1", proc.stdout  # stopped once, never run again

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


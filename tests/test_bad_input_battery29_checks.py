"""Battery 29's development run, the checks: what an answer changes is put back, and a stopped
answer's time limit never outlives its check."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

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


def test_a_check_puts_back_the_interpreter_settings_and_rng_an_answer_changed():
    import decimal
    import gc
    import random
    import socket
    import types

    import numpy as np
    import torch

    from course_utils.exercises import lesson02

    def read():
        mask = os.umask(0o022)
        os.umask(mask)
        return (gc.isenabled(), gc.get_threshold(), mask, sys.excepthook, sys.displayhook,
                decimal.getcontext().prec, socket.getdefaulttimeout(), sys.getswitchinterval(),
                torch.is_warn_always_enabled(), torch.backends.opt_einsum.enabled, sys.modules["math"],
                (torch.tensor([1e-39]) * 1).item() != 0, torch.get_rng_state().tolist(),
                np.random.get_state()[1].tolist(), random.getstate())

    def softmax_rows(s):
        gc.disable()
        gc.set_threshold(1)
        os.umask(0o777)
        sys.excepthook = sys.displayhook = lambda *a: None
        decimal.getcontext().prec = 2
        socket.setdefaulttimeout(0.001)
        sys.setswitchinterval(1.0)
        torch.set_warn_always(True)
        torch.backends.opt_einsum.enabled = False
        torch.set_flush_denormal(True)
        sys.modules["math"] = types.ModuleType("math")
        torch.manual_seed(1234)
        np.random.seed(1234)
        random.seed(1234)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    before = read()
    feedback = lesson02.check_softmax_rows(softmax_rows)
    after = read()
    assert feedback.status == "correct", feedback.message
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert changed == [], changed


def test_one_interpreter_setting_that_cannot_be_put_back_does_not_keep_the_others():
    """The nine interpreter settings were put back in one go: one that raised (here a replaced
    socket.setdefaulttimeout) skipped every one after it, the switch interval among them."""
    import socket

    from course_utils.exercises import lesson02

    interval, real = sys.getswitchinterval(), socket.setdefaulttimeout

    def refuses(timeout):
        raise OSError("no")

    def softmax_rows(s):
        import numpy as np
        socket.setdefaulttimeout = refuses
        sys.setswitchinterval(1.0)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    try:
        feedback = lesson02.check_softmax_rows(softmax_rows)
        assert feedback.status == "correct", feedback.message
        assert sys.getswitchinterval() == interval
    finally:
        socket.setdefaulttimeout = real
        sys.setswitchinterval(interval)

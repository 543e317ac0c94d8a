"""A local exercise check puts back the process state a right answer changed (battery 31): each
test runs lesson 03's parameter count with an answer that is right but changes one kind of state,
and reads that state before and after the check (course_utils/exercises/core.py, ``_SETTINGS``)."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
import types
import warnings

import numpy as np
import pytest
import torch

from course_utils.exercises import lesson03
from tests.bad_input_cases import LyingStr


def _right(d_model, num_heads, bias=True):
    return 4 * d_model * d_model + (4 * d_model if bias else 0)


def _check(change):
    def parameter_count(d_model, num_heads, bias=True):
        change()
        return _right(d_model, num_heads, bias)

    return lesson03.check_parameter_count(parameter_count)


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="no interval timers")
def test_a_cpu_time_interval_timer_the_answer_armed_is_disarmed_and_named():
    """ITIMER_PROF left armed: its SIGPROF would have ended the learner's kernel later."""
    try:
        feedback = _check(lambda: signal.setitimer(signal.ITIMER_PROF, 1000))
        assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)
        assert signal.getitimer(signal.ITIMER_VIRTUAL) == (0.0, 0.0)
        assert "interval timer" in feedback.message, feedback.message
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)


def test_a_faulthandler_dump_the_answer_armed_is_cancelled(tmp_path):
    import faulthandler

    with open(tmp_path / "dump.txt", "w") as out:
        try:
            feedback = _check(lambda: faulthandler.dump_traceback_later(0.3, file=out))
            time.sleep(0.8)
        finally:
            faulthandler.cancel_dump_traceback_later()
    assert (tmp_path / "dump.txt").read_text() == ""
    assert "faulthandler.dump_traceback_later" in feedback.message, feedback.message


def test_a_faulthandler_dump_armed_before_the_check_is_kept(tmp_path):
    """The learner's own dump, armed before the check, is not cancelled by it."""
    import faulthandler

    with open(tmp_path / "dump.txt", "w") as out:
        try:
            faulthandler.dump_traceback_later(0.6, file=out)
            feedback = lesson03.check_parameter_count(_right)
            time.sleep(1.2)
        finally:
            faulthandler.cancel_dump_traceback_later()
    assert feedback.status == "correct", feedback.message
    assert "Timeout" in (tmp_path / "dump.txt").read_text()


def test_a_forward_ad_level_the_answer_entered_is_left():
    import torch.autograd.forward_ad as fw

    try:
        feedback = _check(lambda: fw.dual_level().__enter__())
        assert fw._current_level == -1
        with fw.dual_level():  # raised "Nested forward mode AD is not supported"
            pass
        assert "forward-mode AD" in feedback.message, feedback.message
    finally:
        while fw._current_level >= 0:
            fw.exit_dual_level()


def test_hooks_the_answer_replaced_are_put_back():
    """np.seterrcall's callback, warnings.showwarning, sys.unraisablehook, threading.excepthook."""
    def read():
        return (np.geterrcall(), warnings.showwarning, sys.unraisablehook, threading.excepthook)

    def change():
        np.seterrcall(lambda *a: None)
        warnings.showwarning = lambda *a, **k: None
        sys.unraisablehook = lambda *a: None
        threading.excepthook = lambda *a: None

    before = read()
    try:
        feedback = _check(change)
        after = read()
    finally:
        np.seterrcall(before[0])
        warnings.showwarning, sys.unraisablehook, threading.excepthook = before[1:]
    assert feedback.status == "correct", feedback.message
    assert [a is b for a, b in zip(before, after, strict=True)] == [True] * 4


def test_the_import_state_the_answer_changed_is_put_back():
    """sys.path, sys.meta_path, sys.path_hooks and a replaced sys.modules entry of torch's."""
    functional = sys.modules["torch.nn.functional"]
    path, meta_path, path_hooks = list(sys.path), list(sys.meta_path), list(sys.path_hooks)

    def change():
        sys.path.insert(0, "/tmp/not-a-course-folder")
        sys.meta_path.insert(0, type("Finder", (), {"find_spec": staticmethod(lambda *a, **k: None)})())
        sys.path_hooks.insert(0, lambda entry: None)
        sys.modules["torch.nn.functional"] = types.ModuleType("fake")

    try:
        feedback = _check(change)
        assert (sys.path, sys.meta_path, sys.path_hooks) == (path, meta_path, path_hooks)
        assert sys.modules["torch.nn.functional"] is functional
    finally:
        sys.path[:], sys.meta_path[:], sys.path_hooks[:] = path, meta_path, path_hooks
        sys.modules["torch.nn.functional"] = functional
    assert feedback.status == "correct", feedback.message


def test_a_pandas_display_option_the_answer_changed_is_put_back_and_named():
    pd = pytest.importorskip("pandas")
    before = pd.get_option("display.max_rows")
    try:
        feedback = _check(lambda: pd.set_option("display.max_rows", 1))
        assert pd.get_option("display.max_rows") == before
        assert "pandas' display options" in feedback.message, feedback.message
    finally:
        pd.set_option("display.max_rows", before)


def test_an_answer_that_imports_pandas_is_not_blamed_for_its_options():
    """pandas imported for the first time by the answer: its options are new, not changed."""
    from course_utils.exercises import core

    real, core._pandas_options = core._pandas_options, lambda: None  # (as before pandas is imported)
    try:
        read = core._SETTINGS[[row[1] for row in core._SETTINGS].index(real)]
        assert read[0](None, real()) == ""
    finally:
        core._pandas_options = real


@pytest.mark.skipif(not hasattr(os, "getpid") or sys.platform == "win32", reason="no resource module")
def test_a_soft_resource_limit_the_answer_lowered_is_put_back():
    import resource

    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = min(before[0], 4096) - 1
    try:
        feedback = _check(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, before[1])))
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == before
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, before)
    assert feedback.status == "correct", feedback.message


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="no SIGUSR1")
def test_any_signal_handler_and_the_threads_trace_function_are_put_back():
    usr1, child = signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGCHLD)

    def change():
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        threading.settrace(print)

    try:
        feedback = _check(change)
        assert (signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGCHLD)) == (usr1, child)
        assert threading.gettrace() is None
        assert "SIGUSR1" in feedback.message and "SIGCHLD" in feedback.message, feedback.message
    finally:
        signal.signal(signal.SIGUSR1, usr1)
        signal.signal(signal.SIGCHLD, child)
        threading.settrace(None)


def test_a_torch_library_kernel_the_answer_registered_is_removed_and_named():
    """An override of aten::exp's CPU kernel kept alive by the answer made torch.exp return 7."""
    kept: list = []

    def change():
        if not kept:
            library = torch.library.Library("aten", "IMPL")
            library.impl("exp", lambda t: t * 0 + 7, "CPU")
            kept.append(library)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            feedback = _check(change)
        assert float(torch.exp(torch.tensor(0.0))) == 1.0
        assert "torch.library" in feedback.message and "aten/exp/CPU" in feedback.message, feedback.message
    finally:
        for library in kept:
            library._destroy()


# -- battery 31: values the exercises' records and the grader's rules are given ----------------------

@pytest.mark.parametrize("key", [3, b"lesson02.check_softmax_rows", "lesson02.check_no_such_check"])
def test_twin_names_refuses_a_key_that_names_no_check(key):
    """Read as a check with no twins, an unknown key let every answer through the twin rule."""
    from course_utils.exercises import sandbox

    with pytest.raises(ValueError, match="check_key must name an exercise check"):
        sandbox.twin_names(key)
    assert "softmax" in sandbox.twin_names("lesson02.check_softmax_rows")


def test_records_keep_a_str_subclass_as_the_plain_str_it_holds():
    """Case.label, Mistake.key and RaisingMistake.key given a str whose repr raises made the record
    unprintable; each is now the plain str it holds."""
    from course_utils.exercises import Case, Mistake
    from course_utils.exercises.raising import RaisingMistake

    records = [Case((1,), label=LyingStr("label")),
               Mistake(LyingStr("key"), LyingStr("message"), LyingStr("hint")),
               RaisingMistake(LyingStr("key"), "message", "hint", pattern=LyingStr("values to unpack"))]
    for record in records:
        assert "raises" not in repr(record)
    assert type(records[0].label) is str and records[0].label == "label"
    assert [type(records[1].key), records[1].key] == [str, "key"]
    assert [type(records[2].key), records[2].pattern] == [str, "values to unpack"]


@pytest.mark.skipif(not hasattr(signal, "SIGVTALRM"), reason="no CPU-time timer")
def test_the_grader_stops_an_answer_whose_definition_loops_inside_one_c_call():
    """A default argument ``max(iter(int, 1))`` never returns to Python, where the per-call alarm
    raises: it held the grader for grace + per_call x calls (11 minutes per exercise by default)."""
    from course_utils.exercises import all_exercises, sandbox

    exercise = all_exercises()["lesson03.SCORE_MACS"]
    answer = ("def score_macs(seq_len, d_model, num_heads, _=max(iter(int, 1))):\n"
              "    return num_heads * seq_len * seq_len * (d_model // num_heads)\n")
    run = sandbox.run_answer(answer, "score_macs", "lesson03.check_score_macs", [exercise.make_cases()],
                             per_call=2, grace=20)
    # (ended by the CPU-time timer after about 3 CPU seconds, not at the wall-clock limit of 32 s)
    assert "time limit of 2 s per call without being stopped" in run.lost, run.lost


def test_answer_source_names_a_missing_function_given_as_a_str_subclass():
    """A name the cells do not define, as a str whose __str__ raises: the message printed it."""
    from course_utils.exercises import sandbox

    with pytest.raises(sandbox.AnswerProblem, match="no function `g` is defined"):
        sandbox.answer_source(["def f():\n    return 1\n"], LyingStr("g"))


def test_the_profiler_an_answer_installs_is_put_back_by_4_4():
    """4.4 looks at an answer again under a time limit alone (no call watch around it): the
    answer's sys.setprofile stayed installed after the check."""
    from course_utils.exercises import lesson04

    def masks_for_torch(attn_mask, key_padding_mask):
        sys.setprofile(lambda *a: None)
        return ~attn_mask, ~key_padding_mask

    try:
        feedback = lesson04.check_masks_for_torch(masks_for_torch)
        left = sys.getprofile()
    finally:
        sys.setprofile(None)
    assert left is None, left
    assert feedback.mistake == "tampered_with_check", feedback

"""Battery 20 (b20b) F1 in course_utils/exercises/core: an answer that rewrites the checks' golden
copies (``core._OWN_GLOBALS``, the ``saved`` copy of ``core._ORIGINALS``, ``core.outputs_close``)
made every later check in the kernel pass any answer. Each test fails before the fix."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import course_utils.exercises.core as core
from course_utils.exercises import all_exercises

EXERCISES = all_exercises()
# one or two per lesson; CACHE_BYTES compares integers itself, the others through outputs_close
SOME = ["lesson01.ATTEND", "lesson02.SOFTMAX_ROWS", "lesson02.ATTENTION_WEIGHTS", "lesson03.PARAMETER_COUNT",
        "lesson04.MHA_FORWARD", "lesson05.INDUCTION_SCORE", "lesson06.GATE_IMPORTANCE",
        "lesson07.DECODE_STEP", "lesson07.CACHE_BYTES"]
REPO = Path(__file__).resolve().parents[1]


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
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
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

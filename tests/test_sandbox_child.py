"""The answer's process itself (hardening of issue 34): its audit hook, its limits, its bounded
output, and the check that no module or class changed before the grader's own code runs again.
The answers here are run without the static rules (which refuse most of them before any
process starts), to show that the process stops each one on its own: every cheat scores 0, and
honest answers, with a dataclass or a namedtuple, keep full points."""

from __future__ import annotations

from pathlib import Path

import pytest

from course_utils.exercises import autograde, lesson03, sandbox

HONEST = ("def score_macs(seq_len, d_model, num_heads):\n"
          "    return num_heads * seq_len * seq_len * (d_model // num_heads)\n")
SHAPED = ("def score_macs(seq_len, d_model, num_heads):\n    s = {make}(seq_len, d_model // num_heads)\n"
          "    return num_heads * s.seq_len * s.seq_len * s.d_k\n")


def _graded(code: str, **kwargs):
    """The Feedback of ``code`` on exercise 3.x's score_macs cases, run apart without the static
    rules, and the Run."""
    cases = autograde.cases_of(lesson03.SCORE_MACS)
    run = sandbox.run_answer(code, "score_macs", "lesson03.check_score_macs", [cases], **kwargs)
    return autograde.feedback_from("lesson03", "check_score_macs", "score_macs", run, cases), run


@pytest.mark.parametrize("code", [
    HONEST,
    "from dataclasses import dataclass\n@dataclass\nclass Shape:\n    seq_len: int\n    d_k: int\n"
    + SHAPED.format(make="Shape"),
    "from collections import namedtuple\n" + SHAPED.format(make="namedtuple('Shape', 'seq_len d_k')"),
], ids=["plain", "dataclass", "namedtuple"])
def test_honest_answers_keep_full_points_under_the_audit_hook(code):
    feedback, run = _graded(code)
    assert feedback.passed, (feedback, run.lost)


CHEAT = "def score_macs(seq_len, d_model, num_heads):\n{body}\n    return 0\n"
REFUSED = {  # what the answer does: the event its process is ended for
    "unpickle": ("    import pickle\n    pickle.loads(b'cos\\nsystem\\n.')", "pickle.find_class"),
    "exec": ("    exec('x = 1')", "compile"),
    "compile": ("    compile('1', 'x', 'eval')", "compile"),
    "fork": ("    import os\n    os.fork()", "os.fork"),
    "system": ("    import os\n    os.system('true')", "os.system"),
    "posix_spawn": ("    import os\n    os.posix_spawn('/bin/true', ['true'], {})", "os.posix_spawn"),
    "popen": ("    import subprocess\n    subprocess.run(['true'])", "subprocess.Popen"),
    "ctypes": ("    import ctypes\n    ctypes.CDLL(None)", "ctypes."),
    "getframe": ("    import sys\n    sys._getframe(1).f_locals", "sys._getframe"),
    "settrace": ("    import sys\n    sys.settrace(None)", "sys.settrace"),
    "setprofile": ("    import sys\n    sys.setprofile(None)", "sys.setprofile"),
    "tb_frame": ("    try:\n        raise KeyError\n    except KeyError as e:\n"
                 "        e.__traceback__.tb_frame", "object.__getattr__ tb_frame"),
    "gi_frame": ("    (i for i in ()).gi_frame", "object.__getattr__ gi_frame"),
    "code": ("    score_macs.__code__", "object.__getattr__ __code__"),
    "socket": ("    import socket\n    socket.socket()", "socket"),
    "new module": ("    import smtplib", "import smtplib"),
    "lazy submodule": ("    import numpy as np\n    np.f2py", "import numpy.f2py"),
    "gc": ("    import gc\n    gc.get_objects()", "gc.get_objects"),
    "write outside": ("    open('/tmp/planted-by-an-answer', 'w')", "open for writing"),
    "write a descriptor": ("    open(1, 'w')", "open of a file descriptor for writing"),
}


@pytest.mark.parametrize("what", sorted(REFUSED))
@pytest.mark.slow
def test_the_audit_hook_ends_the_answer_that_does_it_and_names_the_event(what):
    body, event = REFUSED[what]
    feedback, run = _graded(CHEAT.format(body=body))
    assert not feedback.passed and run.lost is not None, run
    assert run.lost.startswith(f"refused: {event}"), run.lost
    assert f"refused: {event}" in feedback.message, feedback


def test_the_answer_starts_no_thread():
    start = "    import threading\n    threading.Thread(target=print).start()"
    feedback, run = _graded(CHEAT.format(body=start))
    assert not feedback.passed and run.outcomes[0][0].kind == "raised", run
    assert "without threads" in run.outcomes[0][0].error[1], run


def test_the_audit_hook_also_watches_the_answers_definition():
    """A default argument runs while the answer is defined, before any call (C19's fetch)."""
    feedback, run = _graded("import sys\n"
                            "def score_macs(seq_len, d_model, num_heads, f=sys._getframe(0)):\n"
                            "    return 0\n")
    assert not feedback.passed and run.lost.startswith("refused: sys._getframe"), run


@pytest.mark.parametrize(("body", "changed"), [
    # C7: a method of the answer's own class called with torch.Tensor as `self`
    ("    class Hook:\n        def install(self, f):\n            self.clone = f\n"
     "    Hook.install(torch.Tensor, lambda t, *a, **k: t)", "torch.Tensor.clone"),
    # C8: the same on the numpy module, which the grader uses to copy an array output
    ("    class Hook:\n        def install(self, f):\n            self.ascontiguousarray = f\n"
     "    Hook.install(np, lambda a, *x, **k: a)", "numpy.ascontiguousarray"),
    # N14: the result writer
    ("    torch.save = print", "torch.save"),
    # a reducer table the result's pickling reads, changed in place
    ("    import copyreg\n    copyreg.dispatch_table[torch.Tensor] = print", "copyreg.dispatch_table"),
    # while the answer is defined: a default argument
    (None, "numpy.ascontiguousarray"),
])
def test_a_module_or_class_changed_by_the_answer_ends_the_run_as_tampering(body, changed):
    at_definition = "def score_macs(*a, f=setattr(np, 'ascontiguousarray', list)):\n    return 0\n"
    code = "import numpy as np\nimport torch\n" + (CHEAT.format(body=body) if body else at_definition)
    feedback, run = _graded(code)
    assert not feedback.passed, feedback
    tampered = [o.tampered for o in run.outcomes[0] if o.tampered]
    assert tampered and changed in tampered[0], run


@pytest.mark.slow
def test_the_wall_clock_limit_holds_and_a_forged_result_is_not_read():
    """The answer ignores the per-call alarm, writes a result of its own on every descriptor it
    can find by number, then never returns: the grader kills it at its wall-clock limit and reads
    results only from a process that ended by itself."""
    import time

    code = ("import os\nimport signal\ndef score_macs(seq_len, d_model, num_heads):\n"
            "    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
            "    for fd in range(3, 12):\n"
            "        try:\n            os.write(fd, b'forged')\n        except OSError:\n            pass\n"
            "    while True:\n        pass\n")
    start = time.monotonic()
    feedback, run = _graded(code, per_call=1, grace=3)
    assert time.monotonic() - start < 60, "the parent did not end the process at its limit"
    # ended by the wall clock, or since fix61c by the CPU-time limit that comes with each call's alarm
    assert not feedback.passed and "forged" not in str(run) and "it ran longer than" in (run.lost or ""), run


def test_stdout_goes_nowhere_and_stderr_is_capped_and_read_from_its_end():
    code = ("import sys\ndef score_macs(seq_len, d_model, num_heads):\n"
            "    print('x' * 50_000_000)\n    sys.stderr.write('e' * 5_000_000)\n    return 0\n")
    feedback, run = _graded(code, max_result_bytes=2**20)
    assert not feedback.passed, feedback
    outcome = run.outcomes[0][0] if run.outcomes else None
    assert outcome is not None and outcome.kind == "raised" and "File too large" in outcome.error[1], run


def test_the_process_runs_under_cpu_memory_file_and_process_limits():
    code = ("def score_macs(seq_len, d_model, num_heads):\n"
            "    with open('/proc/self/limits') as f:\n        return f.read()\n")
    cases = autograde.cases_of(lesson03.SCORE_MACS)[:1]
    # not the default 4 GiB, and not under 3.2 GiB: PyPI's CUDA torch maps that much on import
    memory = 6 * 2**30
    run = sandbox.run_answer(code, "score_macs", "lesson03.check_score_macs", [cases], memory=memory)
    limits = {line[:26].strip(): line[26:].split()[0] for line in run.outcomes[0][0].value.splitlines()[1:]}
    assert limits["Max address space"] == str(memory), limits
    for name in ("Max cpu time", "Max file size", "Max processes"):
        assert limits[name].isdigit(), (name, limits)


@pytest.mark.skipif(sandbox.isolation() != "bubblewrap", reason="bubblewrap cannot make a sandbox here")
def test_the_work_folder_is_a_memory_file_system_of_bounded_size():
    code = ("def score_macs(seq_len, d_model, num_heads):\n"
            "    for i in range(100):\n"
            "        with open(f'f{i}', 'wb') as f:\n            f.write(b'x' * 2**20)\n    return 0\n")
    feedback, run = _graded(code, max_result_bytes=4 * 2**20)
    assert not feedback.passed and run.outcomes[0][0].kind == "raised", run
    assert "No space left" in run.outcomes[0][0].error[1], run
    assert sandbox.WORK_SIZE < 100 * 2**20


def test_nothing_the_answer_writes_outside_its_work_folder_reaches_the_disk():
    planted = Path("/tmp/planted-by-an-answer")
    planted.unlink(missing_ok=True)
    _graded(CHEAT.format(body="    open('/tmp/planted-by-an-answer', 'w').write('x')"), sandbox=False)
    assert not planted.exists()


def test_a_clone_on_the_answers_path_is_covered_and_the_package_shown_on_top(monkeypatch, tmp_path):
    """C10: with the clone itself among the shown folders (a path-based editable install), the
    clone is an empty folder in the sandbox, and course_utils/ inside it is bound again on top."""
    from pathlib import Path

    clone = Path("/srv/some-clone")
    package = clone / "course_utils"
    monkeypatch.setattr(sandbox, "visible_paths", lambda: (clone, package))
    argv = sandbox._bwrap_argv(tmp_path, [clone])
    assert ["--ro-bind", str(clone), str(clone)] not in [argv[i:i + 3] for i in range(len(argv))]
    cover = argv.index("--remount-ro")
    bound = max(i for i, a in enumerate(argv) if a == str(package))
    assert argv[cover - 2:cover] == ["--tmpfs", str(clone)] and cover < bound, argv

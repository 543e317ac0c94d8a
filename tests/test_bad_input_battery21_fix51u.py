"""Battery 21 (issue 38, b21b), fixes by fix51u: version_matrix.py, exercise_answers.py, course.py
and notebook_tools.py (release)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bad_input_cases import load_course

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(os.name == "nt", reason="POSIX signals and FIFOs")


# -- group 2: an interruption while the venv is made leaves no folder behind -------------------------

# A stand-in for the standard library's venv (first on PYTHONPATH, so `import venv` and `python -m
# venv` both find it): create() starts a grandchild, as ensurepip starts pip, that writes into the
# new folder for a few seconds, then sleeps. Nothing is installed.
FAKE_VENV = '''
import os, subprocess, sys, time
WRITER = """
import os, sys, time
folder, marker = sys.argv[1], sys.argv[2]
open(marker, "w").close()
end = time.monotonic() + 6
while time.monotonic() < end:
    os.makedirs(os.path.join(folder, "lib"), exist_ok=True)
    open(os.path.join(folder, "lib", "pip-%d" % time.monotonic_ns()), "w").close()
    time.sleep(0.02)
"""
class EnvBuilder:
    def __init__(self, **kwargs):
        pass
    def create(self, env_dir):
        os.makedirs(env_dir, exist_ok=True)
        subprocess.Popen([sys.executable, "-c", WRITER, str(env_dir), os.environ["FAKE_VENV_MARKER"]])
        time.sleep(30)
'''
FAKE_VENV_MAIN = "import sys, venv\nvenv.EnvBuilder(with_pip=True, clear=True).create(sys.argv[-1])\n"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_version_matrix_stopped_while_pip_writes_removes_the_new_venv(tmp_path, signum):
    fake = tmp_path / "fake" / "venv"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(FAKE_VENV)
    (fake / "__main__.py").write_text(FAKE_VENV_MAIN)
    marker, env_dir = tmp_path / "writing", tmp_path / "new-venv"
    env = dict(os.environ, PYTHONPATH=f"{fake.parent}{os.pathsep}{ROOT}", FAKE_VENV_MARKER=str(marker))
    run = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "version_matrix.py"), "floor", "--venv",
                            str(env_dir)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), run.communicate(timeout=30)
        time.sleep(0.3)  # the grandchild is writing into env_dir now
        run.send_signal(signum)
        _, err = run.communicate(timeout=60)
        assert run.returncode == 128 + signum, err
        assert f"{env_dir} was removed" in err, err
        time.sleep(1.0)  # a grandchild still running would have made the folder again by now
        assert not env_dir.exists(), f"{env_dir} holds {sorted(p.name for p in env_dir.rglob('*'))[:5]}"
    finally:
        try:
            os.killpg(run.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        time.sleep(0.1)


# -- group 3: exercise_answers.py build checks every store before it writes the first ------------------

def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _folder(path: Path) -> None:
    path.mkdir()


def _link_to_folder(path: Path) -> None:
    (path.parent / "elsewhere").mkdir()
    path.symlink_to(path.parent / "elsewhere")


@pytest.mark.parametrize("early", [True, False], ids=["early-check", "all-or-nothing-writer"])
@pytest.mark.parametrize("make, words", [(_fifo, "a FIFO"), (_folder, "a directory"),
                                         (_link_to_folder, "a directory")])
def test_exercise_answers_build_writes_nothing_when_a_later_store_is_no_file(make, words, early, tmp_path,
                                                                              monkeypatch, capsys):
    """The early check names it before the build; past it (``early`` False: it came after the
    check), the one all-or-nothing writer puts lesson01.pt and lesson02.pt back."""
    from bad_input_cases import import_script

    exercise_answers = import_script("exercise_answers")
    if not early:
        monkeypatch.setattr(exercise_answers, "_unwritable_store", lambda: None)
        words = "is a folder or a special file"
    lessons = sorted({key.split(".")[0] for key in exercise_answers.all_exercises()})
    assert len(lessons) >= 3
    store = tmp_path / "answers"
    store.mkdir()
    for lesson in lessons[:2]:
        (store / f"{lesson}.pt").write_bytes(b"old " + lesson.encode())
    bad = store / f"{lessons[2]}.pt"
    make(bad)
    monkeypatch.setattr(exercise_answers.answers, "ANSWERS_DIR", store)
    monkeypatch.setattr(exercise_answers, "_attached_solutions", lambda: None)
    monkeypatch.setattr(exercise_answers, "compute", lambda: {lesson: {"format": 1, "exercises": {}}
                                                              for lesson in lessons})
    assert exercise_answers.main(["build"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and bad.name in err and words in err and "no stored answer was written" in err
    for lesson in lessons[:2]:
        assert (store / f"{lesson}.pt").read_bytes() == b"old " + lesson.encode()


# -- group 1: course.py checks pyproject.toml and constraints.txt before it reads them -----------------


@pytest.mark.parametrize("name", ["pyproject.toml", "constraints.txt"])
@pytest.mark.parametrize("make, words", [(lambda p: None, "missing"), (_folder, "a directory"),
                                         (_fifo, "a FIFO")])
def test_course_names_an_input_that_is_no_file_before_reading_it(name, make, words, tmp_path,
                                                                 monkeypatch, capsys):
    course = load_course()
    for other in course.INPUTS:
        if other != name:
            (tmp_path / other).write_text("")
    make(tmp_path / name)
    monkeypatch.setattr(course, "ROOT", tmp_path)
    monkeypatch.setattr(course, "ensure_environment",
                        lambda: pytest.fail("went on to read the inputs and install"))
    assert course.main(["setup"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"course.py setup: {tmp_path / name} is {words}" in err and "nothing was installed" in err, err


# -- group 9: a read-only folder is the writer's one-line ToolError, not the clean-up's OSError -------

def test_a_write_into_a_read_only_folder_names_the_file(tmp_path, monkeypatch):
    import errno

    from bad_input_cases import import_script, raises_naming

    notebook_tools = import_script("notebook_tools")
    folder = tmp_path / "student"
    folder.mkdir()
    target = folder / "02_single_head_attention.ipynb"
    target.write_text("old")

    def read_only(*args, **kwargs):  # what a read-only mount answers, even for a name that is not there
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(args[0]))

    monkeypatch.setattr(notebook_tools, "_new_file", read_only)
    monkeypatch.setattr(Path, "unlink", read_only)
    raises_naming(notebook_tools.ToolError, [str(target), "cannot be written", "Read-only file system"],
                  lambda: notebook_tools.write_all_atomically({target: "new"}))
    monkeypatch.undo()
    assert target.read_text() == "old" and sorted(p.name for p in folder.iterdir()) == [target.name]

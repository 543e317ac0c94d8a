"""``cli.run_in_group``: the one way the course's installers run a child (venv's ensurepip, pip,
uv), in a process group of its own that is stopped whole when the tool is interrupted.

``course.py setup`` made its venv in-process (``venv.EnvBuilder(with_pip=True)``): SIGINT sent
to course.py alone stopped it with "left half-made", while ensurepip's pip went on writing into
the folder (battery 21's re-run, left open then). It now makes the venv without pip and runs
ensurepip, pip and uv through ``run_in_group``, as ``version_matrix.py`` does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from bad_input_cases import load_course, raises_naming

from course_utils import cli

ROOT = Path(__file__).resolve().parent.parent

# A child that starts a grandchild writing a file every 20 ms, says so, then waits.
WRITER = """
import os, subprocess, sys, time
folder, marker = sys.argv[1], sys.argv[2]
subprocess.Popen([sys.executable, "-c", "import os, sys, time\\n"
                  "while True:\\n"
                  "    open(os.path.join(sys.argv[1], 'pip-%d' % time.monotonic_ns()), 'w').close()\\n"
                  "    time.sleep(0.02)\\n", folder])
open(marker, "w").close()
time.sleep(30)
"""


def _files(folder: Path) -> int:
    return sum(1 for _ in folder.iterdir())


def _wait_for(path: Path, process: subprocess.Popen | None = None, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() and (process is None or process.poll() is None) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists(), process.communicate(timeout=30) if process else f"{path} never appeared"


def _assert_nothing_writes(folder: Path) -> None:
    before = _files(folder)
    time.sleep(0.5)  # a grandchild still running would have written ~25 files by now
    assert _files(folder) == before, f"{_files(folder) - before} files were written after the stop"


def test_an_interruption_stops_the_whole_group_grandchildren_included(tmp_path):
    marker = tmp_path / "started"
    main_thread = threading.main_thread().ident

    def interrupt_when_started() -> None:
        _wait_for(marker)
        time.sleep(0.2)
        signal.pthread_kill(main_thread, signal.SIGINT)  # Ctrl-C: KeyboardInterrupt in the wait

    poke = threading.Thread(target=interrupt_when_started)
    poke.start()
    with pytest.raises(KeyboardInterrupt):
        cli.run_in_group([sys.executable, "-c", WRITER, str(tmp_path), str(marker)])
    poke.join()
    _assert_nothing_writes(tmp_path)


def test_the_status_is_returned_or_raised_as_asked():
    fail = [sys.executable, "-c", "raise SystemExit(3)"]
    with pytest.raises(subprocess.CalledProcessError) as info:
        cli.run_in_group(fail)
    assert info.value.returncode == 3
    assert cli.run_in_group(fail, check=False) == 3
    assert cli.run_in_group([sys.executable, "-c", "pass"]) == 0


@pytest.mark.parametrize("kwargs, words", [
    ({"command": []}, ["command", "[]"]),
    ({"command": "python -V"}, ["command", "str"]),
    ({"command": [sys.executable, 3]}, ["command", "list of str"]),
    ({"command": [sys.executable, "-V"], "check": "no"}, ["check", "bool", "'no'"]),
    ({"command": [sys.executable, "-V"], "patience": -1}, ["patience", "-1"]),
    ({"command": [sys.executable, "-V"], "patience": float("nan")}, ["patience", "nan"]),
    ({"command": [sys.executable, "-V"], "patience": True}, ["patience", "bool"]),
])
def test_bad_arguments_are_named_before_anything_runs(kwargs, words):
    command = kwargs.pop("command")
    raises_naming((TypeError, ValueError), words, lambda: cli.run_in_group(command, **kwargs))


# course.py setup, stopped by SIGINT sent to course.py alone while "ensurepip" writes through a
# grandchild: the venv is made by a stand-in EnvBuilder whose bin/python is that writer (with_pip=True
# runs it inside create, as venv does: how course.py made its venv before).
SETUP_DRIVER = """
import runpy, subprocess, sys, venv
from pathlib import Path
writer, marker = sys.argv[1], sys.argv[2]

def create(self, env_dir):
    python = Path(env_dir) / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!{sys.executable}\\n" + writer.replace("sys.argv[1], sys.argv[2]",
                      repr((str(python.parent), marker))))
    python.chmod(0o755)
    if self.with_pip:  # as venv does it: ensurepip in a child of this process, its group
        subprocess.check_output([str(python), "-m", "ensurepip", "--upgrade", "--default-pip"])

venv.EnvBuilder.create = create
sys.argv = ["course.py", "setup"]
runpy.run_path(%r, run_name="__main__")
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_course_setup_stopped_while_ensurepip_writes_leaves_nothing_writing(tmp_path, signum):
    env_dir, marker = tmp_path / "env", tmp_path / "started"
    driver = SETUP_DRIVER % str(ROOT / "course.py")
    run = subprocess.Popen([sys.executable, "-c", driver, WRITER, str(marker)], cwd=ROOT,
                           env=dict(os.environ, COURSE_VENV=str(env_dir)),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for(marker, run)
        time.sleep(0.3)  # the grandchild is writing into env/bin now
        run.send_signal(signum)  # to course.py alone, not to its group: it must stop the rest itself
        _, err = run.communicate(timeout=60)
        assert run.returncode == 128 + signum, err
        assert err.count("\n") == 1 and "left half-made" in err, err
        _assert_nothing_writes(env_dir / "bin")
    finally:
        try:
            os.killpg(run.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _setup_exit(monkeypatch, venv: Path, usable: bool, create=None) -> str:
    """What course.ensure_environment exits with for a venv folder ``venv`` that is (``usable``)
    or is not made already; ``create`` stands in for venv.EnvBuilder.create."""
    course = load_course()
    monkeypatch.setattr(course, "VENV", venv)
    monkeypatch.setattr(course, "STAMP", venv.parent / "stamp")
    monkeypatch.setattr(course, "_venv_is_usable", lambda: usable)
    monkeypatch.delenv("COURSE_VENV", raising=False)
    monkeypatch.setattr(course.venv.EnvBuilder, "create", create)
    with pytest.raises(SystemExit) as exit_info:
        course.ensure_environment()
    assert not (venv.parent / "stamp").exists()
    return str(exit_info.value.code)


def test_a_failed_ensurepip_names_its_last_line_and_advises_python3_venv(tmp_path, monkeypatch):
    def no_ensurepip(self, env_dir):  # a venv whose python has no ensurepip (Debian without python3-venv)
        python = Path(env_dir) / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text(f"#!{sys.executable}\nimport sys\nprint('Traceback (most recent call last):')\n"
                          "sys.exit('No module named ensurepip')\n")
        python.chmod(0o755)

    message = _setup_exit(monkeypatch, tmp_path / ".venv", usable=False, create=no_ensurepip)
    assert "(CalledProcessError: No module named ensurepip)" in message, message
    assert "python3-venv" in message and "removed" in message and not (tmp_path / ".venv").exists()


def test_a_failed_pip_install_is_one_message_not_a_traceback(tmp_path, monkeypatch):
    def fails(cmd, **kwargs):
        raise subprocess.CalledProcessError(1, cmd)

    monkeypatch.setattr(cli, "run_in_group", fails)  # course.py's cli is this module (course_cli.load_cli)
    monkeypatch.setenv("COURSE_INSTALLER", "pip")
    message = _setup_exit(monkeypatch, tmp_path, usable=True)
    assert "Could not install the course's packages" in message and "python -m pip install" in message
    assert "status 1" in message and "installs them again" in message

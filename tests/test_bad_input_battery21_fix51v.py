"""Battery 21 (issue 38), fixes by fix51v: course_utils/cli.py, parallel.py and scripts/course_cli.py."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from bad_input_cases import raises_naming

from course_utils import cli, parallel

ROOT = Path(__file__).resolve().parent.parent


# -- group 8: parallel_map inside a parallel_map job runs the plain loop there ---------------------

def _nested(x: int) -> list[int]:
    return parallel.parallel_map(abs, [x, -x], workers=2)


@pytest.mark.skipif(not parallel._fork_available(), reason="needs forked workers (Linux, no CUDA GPU)")
@pytest.mark.parametrize("timeout", [None, 30.0])
def test_parallel_map_inside_a_worker_gives_the_plain_loops_results(timeout):
    items = [1, 2, 3]
    got = parallel.parallel_map(_nested, items, workers=2, timeout=timeout)
    assert got == [[abs(x), abs(-x)] for x in items]


def test_no_fork_inside_a_daemonic_process(monkeypatch):
    monkeypatch.setattr(multiprocessing.current_process(), "daemon", True, raising=False)
    assert parallel._fork_available() is False
    assert parallel.default_workers(4) == 1


# -- group 11: cli.words's none_reads_sys_argv must be a bool -------------------------------------

@pytest.mark.parametrize("flag", ["no", "", 0, 1, None, [False]])
def test_words_refuses_a_non_bool_flag_naming_it(flag):
    raises_naming(TypeError, ["none_reads_sys_argv", "bool", type(flag).__name__, repr(flag)[:20]],
                  lambda: cli.words(None, none_reads_sys_argv=flag))


# -- group 13: cli.check_label checks name and what before the value ------------------------------

@pytest.mark.parametrize("value, name, what, error, words", [
    ("", None, "w", TypeError, ["name", "NoneType", "None"]),
    ("x", 3, "w", TypeError, ["name", "int", "3"]),
    ("x", "  ", "w", ValueError, ["name", "'  '"]),
    ("x", "label", None, TypeError, ["what", "NoneType"]),
    ("x", "label", "", ValueError, ["what", "''"]),
])
def test_check_label_names_a_wrong_name_or_what(value, name, what, error, words):
    message = raises_naming(error, words, lambda: cli.check_label(value, name, what))
    assert message.startswith(("name must", "what must")), message


def test_check_label_still_names_the_argument_for_a_wrong_value():
    raises_naming(ValueError, ["label", "''"], lambda: cli.check_label("", "label", "a row"))


# -- group 10: a signal while course_cli.load_cli loads cli.py ------------------------------------

# The child sends itself the signal while cli.py's code runs (an audit hook on its exec), i.e.
# before any handler of the course's exists: deterministic, unlike a timed kill.
_LOADING = """
import os, signal, sys
sys.path.insert(0, {scripts!r})
def hook(event, args):
    if event == "exec" and getattr(args[0], "co_filename", "").endswith("course_utils/cli.py"):
        os.kill(os.getpid(), signal.{sig})
sys.addaudithook(hook)
"""


def _child(code: str, sig: str) -> subprocess.CompletedProcess:
    source = _LOADING.format(scripts=str(ROOT / "scripts"), sig=sig) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("sig, status", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_while_a_tool_loads_cli_gives_its_one_line(sig, status):
    done = _child("""
        from course_cli import load_cli
        load_cli().stop_at_once("demo_tool.py")
        print("went on")
    """, sig)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == f"demo_tool.py: interrupted by {sig} while starting; nothing was written"
    assert done.returncode == status and "went on" not in done.stdout


def test_a_signal_while_a_library_loads_cli_reaches_its_handler_afterwards():
    done = _child("""
        import signal, sys, types
        lib = types.ModuleType("lib")  # a caller that is no tool's __main__
        exec("def get():\\n    from course_cli import load_cli\\n    return load_cli()", lib.__dict__)
        try:
            lib.get()
        except KeyboardInterrupt:
            print("interrupted after loading:", hasattr(sys.modules["course_utils.cli"], "run"))
        print("handler put back:", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    """, "SIGINT")
    assert done.returncode == 0, done.stderr
    assert "interrupted after loading: True" in done.stdout
    assert "handler put back: True" in done.stdout

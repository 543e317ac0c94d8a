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


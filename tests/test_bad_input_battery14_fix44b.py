"""Battery 14's findings on the command lines, files and grading helpers (issue 38, fix44b): each
bad call now raises with the argument's (or option's) name, what was expected and what arrived,
or does what its docstring says; the valid call beside it still works."""

from __future__ import annotations

import signal
import sys

import pytest
from bad_input_cases import Case, assert_named

from course_utils import cli

# -- cli.call and cli.Interrupted name what they cannot use ---------------------------------
CLI_CASES = [
    Case("Interrupted str", lambda: cli.Interrupted("x"), TypeError, ["signum", "SIGINT (2)", "str 'x'"]),
    Case("Interrupted SIGHUP", lambda: cli.Interrupted(1), ValueError, ["signum", "SIGTERM (15)", "got 1"]),
    Case("Interrupted message int", lambda: cli.Interrupted(2, 5), TypeError, ["message", "str", "int 5"]),
    Case("call relay 999", lambda: cli.call(["true"], "p", relay=(999,)), ValueError,
         ["relay", "stop signal", "999"]),
    Case("call relay int", lambda: cli.call(["true"], "p", relay=2), TypeError, ["relay", "tuple", "int 2"]),
    Case("call a folder", lambda: cli.call(["/"], "p"), PermissionError, ["command[0]", "'/'", "a folder"]),
    Case("call a missing program", lambda: cli.call(["/nope/zz"], "p"), FileNotFoundError,
         ["command[0]", "'/nope/zz'", "not found"]),
]


@pytest.mark.parametrize("case", CLI_CASES, ids=lambda c: c.name)
def test_cli_call_and_interrupted_name_a_bad_argument(case):
    assert_named(case)


def test_cli_call_and_interrupted_controls():
    assert cli.Interrupted(signal.SIGTERM, "x").signum == 15
    assert cli.call([sys.executable, "-c", "pass"], "p", relay=(signal.SIGTERM,)) == 0
    assert cli.call([sys.executable, "-c", "raise SystemExit(3)"], "p", relay=[signal.SIGINT]) == 3



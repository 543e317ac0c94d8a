"""Battery 29's command and grading findings (fix59d). Each test failed before its fix."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _course():
    spec = importlib.util.spec_from_file_location("_course_b29", ROOT / "course.py")
    course = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(course)
    return course


# --- course.py lab: --port and --ip values are checked before anything starts -----------------

@pytest.mark.parametrize(("arg", "shown"), [
    ("--port=-5", "--port=-5 is out of range"),
    ("--port=99999", "--port=99999 is out of range"),
    ("--ServerApp.port=-1", "--ServerApp.port=-1 is out of range"),
    ("--port=eighty", "--port='eighty' is not a port number"),
    ("--ip=no such host", "--ip='no such host' is not an address"),
])
def test_course_lab_refuses_a_bad_port_or_address_before_starting(monkeypatch, capsys, arg, shown):
    """b29 lab_port_negative_traceback, lab_port_out_of_range_starts, lab_bad_ip_traceback: a
    socket.gaierror traceback from jupyter_server, or JupyterLab started on port 99999."""
    course = _course()

    def never(*args, **kwargs):
        raise AssertionError("the environment was set up: the option was not refused first")

    monkeypatch.setattr(course, "ensure_environment", never)
    monkeypatch.setattr(course.cli, "call", never)
    assert course._main(["lab", "--no-browser", arg]) == 2
    err = capsys.readouterr().err
    assert shown in err and "JupyterLab was not started" in err and "Traceback" not in err, err


def test_course_lab_takes_good_ports_and_addresses():
    course = _course()
    assert course.lab_value_problems(["--port=0", "--port", "8888", "--ServerApp.port=65535", "--ip=*",
                                      "--ip", "127.0.0.1", "--ServerApp.ip=localhost", "--ip="]) == []


# --- student-tree: a second run at once, and an OUT stdout cannot encode --------------------


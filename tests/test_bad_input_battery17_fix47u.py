"""Battery 17b's findings in the command-line helpers, parallel_map and the scripts (findings 2-7),
each failing before its fix."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import nbformat
import pytest

from course_utils import cli
from course_utils.parallel import parallel_map

ROOT = Path(__file__).resolve().parent.parent


def _notebook_tools():
    scripts = str(ROOT / "scripts")
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    import notebook_tools

    return notebook_tools


# -- 2: a parallel_map job that ignores SIGTERM is killed soon after its timeout -----------------

def _ignores_sigterm(x: int) -> int:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(60)
    return x


def test_parallel_map_timeout_kills_a_job_that_ignores_sigterm():
    started = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        parallel_map(_ignores_sigterm, [7], workers=1, timeout=1)
    took = time.monotonic() - started
    assert "items[0]" in str(info.value) and "timeout=1" in str(info.value)
    assert took < 15, f"the TimeoutError came after {took:.1f} s"


# -- 3: cli.run refuses an exit status of another type (a float read as 1 by sys.exit) ----------

@pytest.mark.parametrize("returned", [2.0, 0.0, [1], b"x"], ids=repr)
def test_run_refuses_a_status_that_is_not_an_int_none_or_str(returned):
    with pytest.raises(TypeError) as info:
        cli.run(lambda argv: returned, [], "p")
    message = str(info.value)
    assert "main(argv) returned" in message and repr(returned) in message
    assert type(returned).__name__ in message


# -- 4: notebook_tools.py build into a folder that cannot be written: one line naming OUT, exit 2 -

def test_build_into_an_unwritable_folder_names_out_on_one_line(tmp_path, capsys):
    draft = tmp_path / "draft.py"
    draft.write_text("# %%\nx = 1\n", encoding="utf-8")
    out = "/proc/fix47u_no_such.ipynb"
    assert _notebook_tools().main(["build", str(draft), out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"notebook_tools.py: {out}: cannot be written" in err and ".tmp" not in err, err


def test_write_atomically_names_the_file_it_cannot_write():
    tools = _notebook_tools()
    with pytest.raises(tools.ToolError) as info:
        tools.write_atomically(Path("/proc/fix47u_no_such.txt"), "text")
    assert "/proc/fix47u_no_such.txt: cannot be written" in str(info.value)


# -- 6: notebook_tools.py student interrupted at any moment leaves no new folder ----------------

@pytest.mark.parametrize("stage", ["student_version", "write_all_atomically"])
def test_an_interrupted_student_run_leaves_no_new_folder(stage, tmp_path, monkeypatch):
    tools = _notebook_tools()
    src = tmp_path / "src" / "01_x.ipynb"
    src.parent.mkdir()
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), src)
    new_top = tmp_path / "new"
    out_dir = new_top / "deeper" / "student"

    def interrupted(*args, **kwargs):
        raise tools.Interrupted(signal.SIGINT, "test")

    monkeypatch.setattr(tools, stage, interrupted)  # the signal arrives during that stage
    with pytest.raises(tools.Interrupted):
        tools._run("student", [str(out_dir), str(src)])
    assert not new_top.exists(), f"{stage}: left {sorted(p.name for p in new_top.rglob('*'))}"


# -- 5: safe_collect.py refuses a student id nbgrader collect would drop ('.', '..', hidden) ----

def _load_script(name: str):
    """scripts/NAME.py loaded as its own module (``NAME_fix47u``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{name}_fix47u", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("student", [".", "..", ".hidden"])
def test_safe_collect_refuses_a_student_nbgrader_would_drop(student, tmp_path):
    safe_collect = _load_script("safe_collect")
    inbound = tmp_path / "inbound"
    name = f"{student}+01_x+2026-11-29 10:00:00 UTC"
    (inbound / name).mkdir(parents=True)
    (inbound / name / "01_x.ipynb").write_text("{}")
    dest = tmp_path / "private"
    dest.mkdir()
    taken, refused = safe_collect.stage(inbound, "01_x", dest, owner_check="off", slack=1e12)
    assert taken == [] and len(refused) == 1
    record, why = refused[0]
    assert record == name and repr(student) in why and "starts with '.'" in why
    assert list(dest.iterdir()) == []


# -- 4 (sibling): nbgrader_tools.py table --write into a file that cannot be written -------------

def test_nbgrader_tools_table_write_failure_is_one_line(monkeypatch, capsys):
    tools = _load_script("nbgrader_tools")
    target = Path("/proc/fix47u_no_such/INSTRUCTORS.md")
    monkeypatch.setattr(tools, "INSTRUCTORS", target)
    monkeypatch.setattr(tools, "table_texts", lambda: ("old table", "new table"))
    assert tools.main(["table", "--write"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"table: {target}: cannot be written" in err, err

"""Before ``nbgrader collect``: records in the exchange's inbound folder that a student wrote by
hand to be collected with the instructor's rights (a cold trial's C11, C17, C20, C21) are named,
and collect is not to run; records as ``nbgrader submit`` writes them pass."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import nbgrader_tools as tools  # noqa: E402

LESSON = "02_single_head_attention"


def _record(inbound: Path, student: str, when: datetime.datetime, suffix: str = "abc") -> Path:
    stamp = when.strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    record = inbound / f"{student}+{LESSON}+{stamp}+{suffix}"
    record.mkdir(parents=True)
    (record / "timestamp.txt").write_text(stamp)
    return record


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


def test_records_as_submit_writes_them_pass(tmp_path):
    record = _record(tmp_path, "alice", _now())
    (record / f"{LESSON}.ipynb").write_text("{}")
    assert tools.inbound_problems(tmp_path) == []


def test_a_link_to_the_instructors_files_is_named(tmp_path):
    """C17: a notebook that is a link to the instructor's source: collect would copy the solutions."""
    secret = tmp_path / "source.ipynb"
    secret.write_text("{}")
    inbound = tmp_path / "inbound"
    record = _record(inbound, "alice", _now())
    (record / f"{LESSON}.ipynb").symlink_to(secret)
    problems = tools.inbound_problems(inbound)
    assert len(problems) == 1 and "is a link (symbolic or hard)" in problems[0], problems


def test_a_hard_link_to_the_instructors_files_is_named(tmp_path):
    """C23: a hard link is a plain file: it must have no other link."""
    secret = tmp_path / "source.ipynb"
    secret.write_text("{}")
    inbound = tmp_path / "inbound"
    record = _record(inbound, "alice", _now())
    os.link(secret, record / f"{LESSON}.ipynb")
    problems = tools.inbound_problems(inbound)
    assert len(problems) == 1 and "is a link (symbolic or hard)" in problems[0], problems


def test_a_name_collect_cannot_read_and_a_backdated_record_are_named(tmp_path):
    """C21: one bad name stops collect for the whole class; C20: a time days before the record
    was written makes late work look on time."""
    (tmp_path / f"mallory+{LESSON}+not-a-time+x").mkdir()
    _record(tmp_path, "bob", _now() - datetime.timedelta(minutes=20))
    problems = tools.inbound_problems(tmp_path)
    assert any("not a record name collect can read" in p for p in problems), problems
    assert any("bob" in p and "h later" in p for p in problems), problems


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_record_owned_by_someone_else_than_the_student_it_names_is_named(tmp_path):
    """C11: a classmate hands in as bob."""
    record = _record(tmp_path, "bob", _now())
    for path in (record, record / "timestamp.txt"):
        os.chown(path, 65534, 65534)
    problems = tools.inbound_problems(tmp_path, me="instructor")
    assert len(problems) == 1 and "but it names student bob" in problems[0], problems


def test_the_command_exits_1_and_names_the_problem(tmp_path):
    (tmp_path / "stray-file").write_text("x")
    script = str(ROOT / "scripts" / "nbgrader_tools.py")
    run = subprocess.run([sys.executable, script, "inbound", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and "stray-file: not a plain folder" in run.stdout, run

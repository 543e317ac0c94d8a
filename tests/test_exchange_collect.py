"""scripts/safe_collect.py refuses hostile inbound records and collects the rest (issue 34)."""
import datetime as dt
import getpass
import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("safe_collect", ROOT / "scripts" / "safe_collect.py")
safe_collect = importlib.util.module_from_spec(spec)
sys.modules["safe_collect"] = safe_collect
spec.loader.exec_module(safe_collect)

LESSON = "02_single_head_attention"
ME = getpass.getuser()


def _now():
    # read at each use: a module-level time went stale when xdist ran this file minutes after
    # importing it, and the collector then (rightly) moved the record's time up to its ctime
    return dt.datetime.now(dt.timezone.utc)


def _stamp(when):
    return when.strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def _record(inbound, student=ME, when=None, body=b'{"cells": []}', extra=""):
    when = _now() if when is None else when
    folder = inbound / f"{student}+{LESSON}+{_stamp(when)}{extra}"
    folder.mkdir(parents=True)
    (folder / "timestamp.txt").write_text(_stamp(when))
    (folder / f"{LESSON}.ipynb").write_bytes(body)
    return folder


def _stage(tmp_path, **checks):
    dest = tmp_path / "private"
    dest.mkdir()
    taken, refused = safe_collect.stage(tmp_path / "inbound", LESSON, dest, **checks)
    return taken, dict(refused), dest


def test_an_honest_record_is_copied_with_its_own_time(tmp_path):
    handed_in = _now() - dt.timedelta(seconds=5)
    _record(tmp_path / "inbound", when=handed_in)
    taken, refused, dest = _stage(tmp_path)
    assert refused == {} and [r.student for r in taken] == [ME]
    (copied,) = dest.iterdir()
    assert (copied / f"{LESSON}.ipynb").read_bytes() == b'{"cells": []}'
    assert (copied / "timestamp.txt").read_text() == _stamp(handed_in)


def test_a_link_to_the_instructors_solutions_is_refused_and_the_class_still_collected(tmp_path):
    secret = tmp_path / "source" / f"{LESSON}.ipynb"
    secret.parent.mkdir()
    secret.write_text("SOLUTIONS")
    _record(tmp_path / "inbound", extra="+honest")
    bad = tmp_path / "inbound" / f"{ME}+{LESSON}+{_stamp(_now())}+link"
    bad.mkdir()
    (bad / f"{LESSON}.ipynb").symlink_to(secret)
    hard = tmp_path / "inbound" / f"{ME}+{LESSON}+{_stamp(_now())}+hard"
    hard.mkdir()
    os.link(secret, hard / f"{LESSON}.ipynb")
    whole = tmp_path / "inbound" / f"{ME}+{LESSON}+{_stamp(_now())}+whole"
    whole.symlink_to(tmp_path / "source")
    taken, refused, dest = _stage(tmp_path)
    assert len(taken) == 1
    assert "symbolic link" in refused[bad.name]
    assert "hard links" in refused[hard.name]
    assert "not a folder" in refused[whole.name]
    assert not any(b"SOLUTIONS" in p.read_bytes() for p in dest.rglob("*") if p.is_file())


def test_a_fifo_or_a_malformed_name_is_refused_without_stopping_the_rest(tmp_path):
    inbound = tmp_path / "inbound"
    _record(inbound)
    fifo = _record(inbound, extra="+fifo")
    os.mkfifo(fifo / "pipe")
    (inbound / f"mallory+{LESSON}+not-a-time+x").mkdir()
    (inbound / f"mallory+{LESSON}+2026-13-45 99:00:00.000000 UTC").mkdir()
    taken, refused, _ = _stage(tmp_path)
    assert len(taken) == 1
    assert "not a regular file" in refused[fifo.name]
    assert "name is not" in refused[f"mallory+{LESSON}+not-a-time+x"]
    assert "not a date" in refused[f"mallory+{LESSON}+2026-13-45 99:00:00.000000 UTC"]


def test_a_record_naming_someone_else_is_refused_unless_owners_cannot_be_told(tmp_path):
    other = "not_" + ME
    _record(tmp_path / "inbound", student=other)
    taken, refused, _ = _stage(tmp_path)
    assert taken == [] and "is owned by" in next(iter(refused.values()))
    records, refused = safe_collect.stage(tmp_path / "inbound", LESSON, tmp_path / "p2", owner_check="off")
    assert refused == [] and [r.student for r in records] == [other] and "cannot tell" in records[0].notes[0]


def test_a_record_over_the_size_cap_or_with_a_mismatched_timestamp_is_refused(tmp_path):
    big = _record(tmp_path / "inbound", body=b"x" * 2048, extra="+big")
    odd = _record(tmp_path / "inbound", extra="+odd")
    (odd / "timestamp.txt").write_text(_stamp(_now() - dt.timedelta(days=3)))
    taken, refused, _ = _stage(tmp_path, max_bytes=1024 + 200)
    assert "size cap" in refused[big.name]
    assert "different times" in refused[odd.name]


def test_a_time_set_back_before_the_due_date_becomes_the_time_it_was_written(tmp_path):
    now = _now()
    back = now - dt.timedelta(days=2)
    folder = _record(tmp_path / "inbound", when=back)
    os.utime(folder / f"{LESSON}.ipynb", (back.timestamp(), back.timestamp()))  # mtime moves, ctime does not
    taken, refused, dest = _stage(tmp_path)
    (record,) = taken
    assert record.time > now - dt.timedelta(minutes=10)
    assert "claims" in record.notes[0]
    (copied,) = dest.iterdir()
    assert safe_collect._parse_time((copied / "timestamp.txt").read_text()) == record.time


def test_a_missing_exchange_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        safe_collect.main([LESSON, "--exchange", str(tmp_path / "none"), "--course", "c"])
    assert "--exchange/--course" in capsys.readouterr().err


def test_a_record_that_cannot_be_read_is_refused_and_the_rest_collected(tmp_path, monkeypatch):
    _record(tmp_path / "inbound", extra="+a")
    _record(tmp_path / "inbound", extra="+b")
    real = safe_collect.read_record

    def flaky(inbound, name, lesson, **checks):
        if name.endswith("+a"):
            raise FileNotFoundError(2, "vanished while it was read")
        return real(inbound, name, lesson, **checks)

    monkeypatch.setattr(safe_collect, "read_record", flaky)
    taken, refused, _ = _stage(tmp_path)
    assert len(taken) == 1 and "could not be read" in next(iter(refused.values()))


@pytest.mark.parametrize("argv, words", [
    (["../../etc"], ["argument lesson", "a lesson name", "'../../etc'"]),
    ([".hidden"], ["argument lesson", "not starting with '.'", "'.hidden'"]),
    ([LESSON, "--max-mb", "-1"], ["--max-mb", "finite number > 0", "'-1'"]),
    ([LESSON, "--max-mb", "nan"], ["--max-mb", "finite number > 0", "'nan'"]),
    ([LESSON, "--max-mb", "0"], ["--max-mb", "> 0", "'0'"]),
    ([LESSON, "--slack", "inf"], ["--slack", "finite number >= 0", "seconds", "'inf'"]),
    ([LESSON, "--slack", "-5"], ["--slack", ">= 0", "'-5'"]),
], ids=["lesson traversal", "lesson hidden", "max-mb neg", "max-mb nan", "max-mb 0", "slack inf",
        "slack neg"])
def test_a_bad_lesson_or_limit_is_refused_before_anything_runs(tmp_path, capsys, monkeypatch, argv, words):
    # battery 5: these ran nbgrader collect (exit 0) or ended in "cannot convert float NaN"
    (tmp_path / "ex" / "c" / "inbound").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    ran = []
    monkeypatch.setattr(safe_collect._cli(), "call", lambda *a, **k: ran.append(a))  # runs nbgrader
    with pytest.raises(SystemExit) as info:
        safe_collect.main([*argv, "--exchange", str(tmp_path / "ex"), "--course", "c"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and not ran and all(w in err for w in words), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ex"]  # no gradebook.db left behind


def test_a_course_id_with_a_slash_is_refused(tmp_path, capsys):
    (tmp_path / "c" / "inbound").mkdir(parents=True)
    with pytest.raises(SystemExit):
        safe_collect.main([LESSON, "--exchange", str(tmp_path), "--course", "c/../c"])
    assert "argument --course" in capsys.readouterr().err

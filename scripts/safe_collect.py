"""Collect one lesson's submissions from an nbgrader exchange whose inbound any student can write.

``nbgrader collect`` trusts every record in ``EXCHANGE/COURSE/inbound``: it follows a symbolic link
with the instructor's rights (a student "submits" the instructor's solutions), takes the time the
student wrote as the submission time, collects a record that names another student with only a log
line, and stops for the whole class on one record whose name it cannot parse. This script reads each
record of the lesson itself, refuses (skips and reports) the bad ones, copies the good ones into a
private inbound the instructor alone can reach, and runs ``nbgrader collect`` on that copy.

    python3 scripts/safe_collect.py LESSON --exchange /srv/nbgrader/exchange --course mha-course

Run it in the course folder, where ``nbgrader_config.py`` is (``nbgrader collect`` writes
``submitted/`` and ``gradebook.db`` there); anywhere else it collects nothing and exits 2.

What it can tell about a record (files are read through descriptors opened without following
links, and checked on the descriptor, so a swap after the check is caught too; an
``EXCHANGE/COURSE/inbound`` that is itself a symbolic link is refused, exit 2, nothing collected):
- a symbolic link, or anything but a regular file or a folder, anywhere in it: refused;
- a file with more than one hard link, or owned by anyone but the record's owner: refused (a hard
  link to the instructor's source notebook is a regular file, but it is the instructor's);
- an owner whose login name is not the student the record names: refused (``--owner name``, the
  default, for a server where each student is an operating-system user); with ``--owner off`` (one
  shared account, a container where everyone is root) the exchange cannot tell who wrote a record,
  and the report says so for every record;
- a name that is not ``STUDENT+LESSON+YYYY-mm-dd HH:MM:SS[.ffffff] UTC[+anything]`` (a STUDENT
  starting with ``.``, such as ``..``, included: ``nbgrader collect`` would drop it silently), a
  ``timestamp.txt`` that differs from the name, or more than ``--max-mb`` MB: refused;
- the submission time is the time the student wrote, but never earlier than the latest status change
  (``st_ctime``, which the owner cannot set back) of the record and its files less ``--slack`` seconds.

Interrupted (Ctrl-C, SIGINT, or SIGTERM) while it reads and copies the records, it says so on one
line, exits 130 or 143 and removes its private copy: nothing was written. Once ``nbgrader collect``
runs, the signal reaches nbgrader too, which stops as nbgrader does: the records it had already
collected stay in the course's ``submitted/`` folder (running this again collects the rest), and
this script's last line says that nbgrader was stopped.
"""
from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":  # first thing: a signal while it starts gets one line (course_utils/cli.py)
    sys.path.append(str(Path(__file__).resolve().parent))  # scripts/, for course_cli
    from course_cli import load_cli

    load_cli().stop_at_once("safe_collect.py")

import argparse  # noqa: E402
import datetime as dt  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import pwd  # noqa: E402
import re  # noqa: E402
import stat  # noqa: E402
import tempfile  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

NAME = re.compile(r"^(?P<student>[A-Za-z0-9_.@-]{1,64})\+(?P<lesson>[A-Za-z0-9_.-]{1,100})\+"
                  r"(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})? UTC)(?:\+[A-Za-z0-9_-]{0,64})?$")
TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"


class Refused(Exception):
    """A record that is not collected; the message says why."""


@dataclass
class Record:
    name: str
    student: str
    time: dt.datetime
    files: dict[str, bytes] = field(default_factory=dict)  # relative path -> content
    notes: list[str] = field(default_factory=list)


def _parse_time(text: str) -> dt.datetime:
    text = text.strip().removesuffix(" UTC")
    fmt = "%Y-%m-%d %H:%M:%S.%f" if "." in text else "%Y-%m-%d %H:%M:%S"
    return dt.datetime.strptime(text, fmt).replace(tzinfo=dt.timezone.utc)


def _owner_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def _read_tree(dir_fd: int, prefix: str, owner: int, budget: list[int], out: dict[str, bytes],
               ctimes: list[float]) -> None:
    for entry in sorted(os.listdir(dir_fd)):
        rel = f"{prefix}{entry}"
        st = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            raise Refused(f"{rel} is a symbolic link")
        if stat.S_ISDIR(st.st_mode):
            fd = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
            try:
                if os.fstat(fd).st_uid != owner:
                    raise Refused(f"{rel}/ has another owner than the record")
                ctimes.append(os.fstat(fd).st_ctime)
                _read_tree(fd, rel + "/", owner, budget, out, ctimes)
            finally:
                os.close(fd)
            continue
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"{rel} is not a regular file")
        try:
            fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        except OSError as exc:
            raise Refused(f"{rel} cannot be opened as a plain file ({exc.strerror})") from None
        try:
            fst = os.fstat(fd)  # what was opened, not what the name pointed at when listed
            if not stat.S_ISREG(fst.st_mode):
                raise Refused(f"{rel} is not a regular file")
            if fst.st_nlink != 1:
                raise Refused(f"{rel} has {fst.st_nlink} hard links (a link to someone else's file?)")
            if fst.st_uid != owner:
                raise Refused(f"{rel} is owned by uid {fst.st_uid}, not by the record's owner")
            budget[0] -= fst.st_size
            if budget[0] < 0:
                raise Refused("the record is over the size cap")
            with os.fdopen(os.dup(fd), "rb") as f:
                data = f.read(fst.st_size + 1)
            if len(data) != fst.st_size:
                raise Refused(f"{rel} changed while it was read")
            ctimes.append(os.fstat(fd).st_ctime)
            out[rel] = data
        finally:
            os.close(fd)


def open_inbound(inbound: Path) -> int:
    """A descriptor of the folder ``inbound``, opened without following a symbolic link (a link
    there led the collection to whatever folder it names, /etc included: battery 18); a link, or
    anything but a folder, is :class:`Refused` naming ``inbound`` and what it is."""
    try:
        return os.open(inbound, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        kind = ("a symbolic link (never followed: it could lead the collection to any folder)"
                if os.path.islink(inbound) else f"not a folder one can read ({exc.strerror or exc})")
        raise Refused(f"the inbound folder {inbound} is {kind}; expected the exchange's own "
                      "EXCHANGE/COURSE/inbound folder") from None


def read_record(inbound: Path, name: str, lesson: str, *, owner_check: str = "name",
                max_bytes: int = 50 * 2**20, slack: float = 300.0) -> Record:
    """The record ``inbound/name`` of ``lesson``, checked as the module docstring says; raises
    :class:`Refused` naming the first problem."""
    match = NAME.match(name)
    if match is None:
        raise Refused("the name is not STUDENT+LESSON+YYYY-mm-dd HH:MM:SS.ffffff UTC")
    if match["student"].startswith("."):  # '.', '..', '.x': nbgrader's glob('*+...') never sees it
        raise Refused(f"the student {_shown(match['student'])} starts with '.': nbgrader collect skips "
                      "such a hidden name without a word")
    if match["lesson"] != lesson:
        raise Refused(f"the record is for {_shown(match['lesson'])}, not {_shown(lesson)}")
    try:
        claimed = _parse_time(match["time"])
    except ValueError:
        raise Refused(f"the time {_shown(match['time'])} is not a date") from None
    parent = open_inbound(inbound)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    except OSError as exc:
        raise Refused(f"the record is not a folder ({exc.strerror})") from None
    finally:
        os.close(parent)
    record = Record(name, match["student"], claimed)
    try:
        st = os.fstat(fd)
        if owner_check == "name":
            who = _owner_name(st.st_uid)
            if who != record.student:
                raise Refused(f"the record names {_shown(record.student)} but is owned by "
                              f"{_shown(who or st.st_uid)}")
        else:
            record.notes.append("owner not checked (--owner off): the exchange cannot tell who wrote it")
        ctimes = [st.st_ctime]
        _read_tree(fd, "", st.st_uid, [max_bytes], record.files, ctimes)
    finally:
        os.close(fd)
    if "timestamp.txt" in record.files:
        try:
            written = _parse_time(record.files["timestamp.txt"].decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            raise Refused("timestamp.txt is not a time") from None
        if abs((written - claimed).total_seconds()) > 1:
            raise Refused("timestamp.txt and the record's name give different times")
    if not any(p.endswith(".ipynb") for p in record.files):
        raise Refused("the record holds no notebook")
    latest = dt.datetime.fromtimestamp(max(ctimes), dt.timezone.utc)
    if (latest - claimed).total_seconds() > slack:
        record.notes.append(f"claims {claimed:%Y-%m-%d %H:%M:%S} UTC but was last changed at "
                            f"{latest:%Y-%m-%d %H:%M:%S} UTC: that time is used")
        record.time = latest
    return record


def stage(inbound: Path, lesson: str, dest: Path, **checks) -> tuple[list[Record], list[tuple[str, str]]]:
    """Copy each good record of ``lesson`` in ``inbound`` into ``dest`` (a private inbound), with
    its checked time; returns (the records copied, (name, why) of each refused one). An
    ``inbound`` that is a symbolic link (or no folder) is :class:`Refused` as a whole
    (:func:`open_inbound`)."""
    taken: list[Record] = []
    refused: list[tuple[str, str]] = []
    folder = open_inbound(inbound)  # a link there: Refused, nothing copied
    try:
        names = sorted(os.listdir(folder))
    finally:
        os.close(folder)
    for name in names:
        if f"+{lesson}+" not in name:
            continue
        try:
            record = read_record(inbound, name, lesson, **checks)
        except Refused as exc:
            refused.append((name, str(exc)))
            continue
        except (OSError, RecursionError) as exc:  # changed while read, unreadable, nested too deep
            refused.append((name, f"it could not be read ({type(exc).__name__}: {exc})"))
            continue
        stamp = record.time.strftime(TIME_FORMAT)
        folder = dest / f"{record.student}+{lesson}+{stamp}+{len(taken)}"
        for rel, data in record.files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(data)
        (folder / "timestamp.txt").write_text(stamp)
        taken.append(record)
    return taken, refused


SIMPLE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}")


def _simple_name(what: str):
    """An argparse type: a lesson or course name as nbgrader's exchange spells it (letters,
    digits, ``_ . -``, not starting with a dot): no ``/``, ``..`` or hidden name that would lead
    the collection outside the exchange."""
    def parse(text: str) -> str:
        if not SIMPLE_NAME.fullmatch(text):
            raise argparse.ArgumentTypeError(
                f"expected {what}: 1 to 100 letters, digits, '_', '.', '-' (not starting with '.'), "
                f"got {_shown(text)}")
        return text
    return parse


def _number(least: float, *, above: bool, unit: str):
    """An argparse type: a finite number ``> least`` (``above``) or ``>= least``."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or (value <= least if above else value < least):
            raise argparse.ArgumentTypeError(
                f"expected a finite number {'>' if above else '>='} {least:g} ({unit}), got {_shown(text)}")
        return value
    return parse


def main(argv: list[str]) -> int:
    parser = _cli().ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lesson", type=_simple_name("a lesson name"))
    parser.add_argument("--exchange", required=True, type=_cli().path_type("the exchange root folder"),
                        help="the exchange root (c.Exchange.root)")
    parser.add_argument("--course", required=True, type=_simple_name("a course id"),
                        help="the course id (c.CourseDirectory.course_id)")
    parser.add_argument("--owner", choices=("name", "off"), default="name")
    parser.add_argument("--max-mb", type=_number(0, above=True, unit="MiB per record"), default=50.0)
    parser.add_argument("--slack", type=_number(0, above=False, unit="seconds"), default=300.0,
                        help="seconds a copy may take")
    args = parser.parse_args(argv)
    inbound = args.exchange / args.course / "inbound"
    if inbound.is_symlink():
        parser.error(f"--exchange/--course: expected the folder {inbound}, found a symbolic link (never "
                     "followed: it could lead the collection to any folder); nothing was collected")
    if not inbound.is_dir():
        parser.error(f"--exchange/--course: expected a folder {inbound}, found none")
    if not Path("nbgrader_config.py").is_file():  # nbgrader collect writes its gradebook here
        parser.error(f"run it in the course folder: expected nbgrader_config.py in {Path.cwd()}, found "
                     "none (nbgrader collect would write submitted/ and gradebook.db here); nothing was "
                     "collected")
    with tempfile.TemporaryDirectory(prefix="safe_collect_") as private:
        dest = Path(private) / args.course / "inbound"
        dest.mkdir(parents=True)
        try:
            taken, refused = stage(inbound, args.lesson, dest, owner_check=args.owner,
                                   max_bytes=int(args.max_mb * 2**20), slack=args.slack)
        except Refused as exc:  # the inbound folder became a link after the check above
            parser.error(f"--exchange/--course: {exc}; nothing was collected")
        for record in taken:
            for note in record.notes:
                print(f"note    {record.name}: {note}")
        for name, why in refused:
            print(f"REFUSED {name}: {why}")
        print(f"{len(taken)} records copied, {len(refused)} refused; running nbgrader collect on the copy")
        # the nbgrader of this interpreter, with its bin folder first on PATH (nbgrader runs
        # `alembic` by name): run as documented (`.venv/bin/python scripts/...`, the venv not
        # activated), neither is on PATH (battery 16)
        bin_dir = str(Path(sys.executable).parent)
        env = dict(os.environ, PATH=os.pathsep.join([bin_dir, os.environ.get("PATH", os.defpath)]))
        cli = _cli()
        cli.leaving("nbgrader collect was stopped: the records it had collected stay in submitted/, "
                    "run this again to collect the rest")
        try:
            code = cli.call([sys.executable, "-m", "nbgrader", "collect", args.lesson,
                             f"--Exchange.root={private}", f"--CourseDirectory.course_id={args.course}"],
                            "safe_collect.py", env=env)
        except OSError as exc:  # one line, not a traceback (the private copy is removed on the way out)
            print(f"safe_collect.py: {exc.strerror or exc}", file=sys.stderr)
            return 1
    return code or (1 if refused else 0)


def _shown(value: object, width: int | None = None) -> str:
    """cli.shown: a value for a message, even one whose repr raises."""
    return _cli().shown(value, width)


def _cli():
    """course_utils/cli.py (Ctrl-C and SIGTERM: one line), through scripts/course_cli.py: this
    script needs only the standard library."""
    scripts = str(Path(__file__).resolve().parent)
    if scripts not in sys.path:
        sys.path.append(scripts)
    from course_cli import load_cli

    return load_cli()


if __name__ == "__main__":
    _cli().leaving("nothing was written (the private copy of the records was removed)")
    sys.exit(_cli().run(main, sys.argv[1:], "safe_collect.py"))

"""One decoding step of grouped-query attention as a fused C kernel: one pass over the cache.

Why it exists: at small ``g`` the course's :func:`~course_utils.grouped_query_attention`
stops shrinking with its cache (``python -m course_utils.bench gqa --stages``): its two
matrix products of ``h/g`` query rows by a long K or V run below memory speed, and the
softmax costs the same at every ``g``. The kernel in ``fused_decode.c`` reads each group's
keys and values from memory once for up to 8 of its query heads, in blocks: scores, a
softmax kept running across blocks (the online softmax of FlashAttention) and the weighted
sum of values, with the next block requested from memory while the current one is computed.
The keys are split into one range per thread and the partial results merged (flash
decoding). Its time is then close to the time to read the cache, which is what GQA shrinks.
It computes no gradients: it is for inference.

How it is built and loaded (a shared library runs its code in this process the moment it is
loaded, so the only library ever loaded is one in this user's private directory whose bytes
match the sha256 record written there by this module after the library passed its self-test;
that guards against other users and against damaged files, not against this same user, who
can write both a library and its record: code of theirs planted with a record that says it
passed runs in the learner's process. A library whose record is in an older format, or from
an older self-test, is never loaded, not even in the self-test's separate process: it is
built again):

- with the system's C compiler (``cc``, ``gcc`` or ``clang``; the ``CC`` environment variable
  picks another, e.g. ``CC="ccache gcc"``) for this CPU (``-march=native``), stopped after
  ``COURSE_UTILS_CC_TIMEOUT`` seconds (default 120; the same limit holds for the self-test's
  process below). The compiler's output goes to a temporary file, not a pipe, so a child it
  leaves running (``setsid``, a compile server) cannot stretch the wait. A ``CC`` holding a
  flag that lets the compiler assume there is no NaN or infinity, or reorder float arithmetic
  (``-ffast-math``, ``-Ofast``, ``-ffinite-math-only``, ``-funsafe-math-optimizations``,
  ``-freciprocal-math``, ``-fassociative-math``, clang's ``-fno-honor-nans``,
  ``-fno-honor-infinities``, ``-fapprox-func``, ``-ffp-model=fast``) is refused before any
  build, naming the flag; ``-fno-math-errno``, ``-fno-signed-zeros`` and
  ``-fno-trapping-math`` alone are allowed (they change nothing the kernel relies on).
  ``CFLAGS`` is not read: the build's flags are its own. The compiler, and the ``as`` and
  ``ld`` it runs, are looked up only in the PATH folders that another user cannot plant a
  program in (the rule below for the private directory, except that a folder on PATH must
  not be writable by its group or others even with the sticky bit), and the compiler file
  must belong to you or root and be writable by no one else; the PATH entries skipped are
  named by :func:`fused_decode_build`;
- in a private directory: ``$XDG_CACHE_HOME/course_utils`` (``~/.cache/course_utils``; a
  relative ``XDG_CACHE_HOME`` is ignored), else ``course_utils-<uid>`` in the temp folder. It
  is created with mode 0700 (one of yours that others could only read is set to 0700); one
  that is a symbolic link, owned by another user, writable by group or others, or that you
  cannot write (a read-only filesystem is named as such), or on a filesystem mounted
  ``noexec`` (no library there could be loaded) is refused. So is one that another
  user could replace: every folder on the way to it from ``/`` (symbolic links followed as
  the system follows them) must belong to you or root (its owner could rename anything in
  it) and must not be writable by its group or others unless it has the sticky bit (as /tmp
  has), and every symbolic link followed must belong to you or root. A warning (or the
  status, if both folders are refused) names the folder and why. The temp folder is used
  only under the same checks: a folder of yours, mode 0700, that no one else can replace;
- into a temporary name in that directory, then moved into place with ``os.replace``; the
  sha256 of the library is recorded next to it (``<name>.so.sha256``, written atomically)
  and checked before every load. A library without a record, or whose bytes no longer match
  it (changed, truncated), is never loaded: it is built again. The check and the load see
  the same file: it is opened once (``O_NOFOLLOW``; a regular file of yours that no one else
  may write), hashed from that descriptor, and loaded through it (``/proc/self/fd/N``), so a
  file swapped in under the name between the two is never loaded; where there is no
  ``/proc/self/fd`` (macOS), the checked bytes are copied to a new file of yours in the
  private directory, loaded from there and the copy removed. Anything other than a regular
  file (or a symbolic link, replaced) under the library's, the record's or the failure
  marker's name, such as a directory or a FIFO, is refused at once, naming it (never opened
  in a way that waits on a FIFO), and no other build (without threads, say) is tried instead;
- each new build is self-tested in a separate Python process (``sys.executable -I``: no
  ``PYTHONPATH``, no user site, and run in the library's private folder, with this process's
  module path less the working directory and relative entries, so that a module someone
  planted in a shared working directory does not run), before this process loads it: it must
  agree with ``F.scaled_dot_product_attention`` on small cases (a block of keys scoring
  -inf, scores far from 0, a strided cache, NaN in q and in the cache, a score of +inf, a
  group whose every key is -inf: NaN exactly where PyTorch has NaN; and each of the kernel's
  paths: 1 to 8 query heads per group, 12 and 16 (two passes), g = 1 and g > 1, three
  sequences, several blocks per thread, every thread count from 1 to 32 and a sample of
  larger ones up to this machine's CPU count (each thread with a share; the kernel runs at
  most one thread per CPU, and a count outside the sample is not tested), a ``(B, T, g,
  dk)`` cache transposed and values at yet another time stride), and loading it must leave
  the floating-point mode alone (GCC links
  ``crtfastmath.o`` into a ``-ffast-math`` library, and its constructor turns on
  flush-to-zero for the whole process). So a library that crashes, hangs, miscompiles one
  path or changes its process never touches the learner's. The record then says ``self-test
  v5 passed``, and later processes load the library without a separate process. One that
  fails (a ``CC`` wrapper adding ``-ffast-math`` where ``CC`` does not show it) is not used
  or cached as good.

A compiler error, a self-test the library failed, or a crash in it is remembered for an hour
(``<name>.failed`` in the same directory; the name changes with the source, the compiler
command, its flags and the CPU), so later processes do not wait for the compiler again; a
timeout, a full disk (the compiler says so, or under 16 MiB is free where it writes), a
library the system would not map (a ``noexec`` filesystem) or a compiler that could not be
started is not remembered (it may not happen again).
When a weaker build is used because the better ones failed (the generic one after the
``-march=native`` ones failed their self-test), :func:`fused_decode_build` says which were
not used and why.
:func:`reset_fused_decode` forgets the remembered failures and tries again.
Where there is no kernel, :func:`fused_decode_status` says why and
:func:`fused_decode_attention` computes the same result with PyTorch
(:func:`~course_utils.grouped_query_attention`), with a warning.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import math
import os
import platform
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from .gqa import _check_gqa_inputs, grouped_query_attention
from .validation import MAX_THREADS, check_int
from .validation import shown as shown_value

__all__ = ["HEAD_WIDTH", "MAX_THREADS", "fused_decode_attention", "fused_decode_build", "fused_decode_status",
           "reset_fused_decode"]

HEAD_WIDTH = 64  # the kernel's head width (DK in fused_decode.c)
# The most threads fused_decode_attention accepts: OpenMP ends the process when it cannot start
# the threads asked for (3000 did at T = 400k), and the C side takes an int.
_SOURCE = Path(os.path.abspath(__file__)).with_name("fused_decode.c")
_FLAGS = ("-O3", "-shared", "-fPIC", "-Wno-psabi")
# Tried in order: for this CPU with threads (OpenMP), then without OpenMP (Apple's clang has
# none: the kernel then runs on one thread), then for a generic CPU of this architecture.
_OPTIONS = (("-march=native", "-fopenmp"), ("-march=native",), ())
TIMEOUT_ENV = "COURSE_UTILS_CC_TIMEOUT"  # seconds one compiler run may take
_DEFAULT_TIMEOUT_S = 120.0
_RETRY = "course_utils.attention.fused_decode.reset_fused_decode() forgets them and tries again"
_SELF_TEST_TOLERANCE = 1e-4  # outputs are averages of values of size ~1; a bad build is off by far more
# Written in a library's record once it passed the self-test in a separate process; a new
# version of the self-test (new cases) tests every cached library again.
_SELF_TEST_PASSED = "self-test v5 passed"  # v5: threads 1-32 and a sample to MAX_THREADS
# The self-test's shapes: (query heads per group, groups) for every path of the kernel, B, T
# and the largest thread count (see _self_test).
_SELF_TEST_SHAPES = ((1, 3), (2, 2), (3, 1), (4, 2), (5, 1), (6, 2), (7, 1), (8, 2), (8, 1), (12, 1),
                     (16, 1), (16, 2))
_SELF_TEST_B, _SELF_TEST_T, _SELF_TEST_THREADS = 3, 740, 8
# Beyond 8 threads: 12 at _SELF_TEST_T keys (12 shares of two 32-key blocks, the last of 36
# keys), and MAX_THREADS itself, with as many keys as give every thread a share of its own.
_SELF_TEST_MORE_THREADS = 12
_BLOCK = 32  # keys per block (BLOCK in fused_decode.c): a thread's share is whole blocks
_CHILD_PASSED, _CHILD_FAILED = "FUSED-DECODE-SELF-TEST: passed", "FUSED-DECODE-SELF-TEST: failed: "
_MAP_FAILED = "failed to map segment"  # glibc's dlopen on a filesystem mounted noexec
_FAILURE_MEMORY_S = 3600.0  # a remembered failed build is tried again after an hour
# Flags that let the compiler assume there is no NaN or infinity, or reorder and approximate
# float arithmetic; with GCC, -ffast-math, -Ofast and -funsafe-math-optimizations also link
# crtfastmath.o, whose constructor sets flush-to-zero for the whole process that loads the
# library. The kernel relies on IEEE -inf and NaN, so CC holding one is refused before any
# build. -fno-math-errno, -fno-signed-zeros and -fno-trapping-math alone change nothing the
# kernel relies on (it reads no errno; a zero's sign compares equal) and are allowed.
_UNSAFE_MATH_FLAGS = ("-ffast-math", "-Ofast", "-ffinite-math-only", "-funsafe-math-optimizations",
                      "-freciprocal-math", "-fassociative-math", "-fno-honor-infinities",
                      "-fno-honor-nans", "-fapprox-func", "-ffp-model=fast", "-ffp-model=aggressive")


class _Untrusted(Exception):
    """A file in the kernel's directory that must not be loaded (the message says why)."""


def _uid() -> int:
    """This process's user (a function, so tests can pretend to be someone else)."""
    return os.getuid()


def _trusted_path() -> tuple[str, list[str]]:
    """This process's PATH reduced to the folders that only you or root can write to: ``(the
    PATH to look up and run the compiler with, why each other folder was skipped)``.

    The compiler is found on PATH, and it runs ``as`` and ``ld`` (and ``ccache`` its compiler)
    from PATH, all in this process's user: a program planted in a folder someone else can write
    would run as you (and as root, if root builds the kernel). So a PATH folder is used only
    under the rule the kernel's private directory follows: it must belong to you or root and
    not be writable by its group or others (the sticky bit does not help here: in a sticky
    folder others cannot replace your files but can still add a new ``as``), and every folder
    on the way to it from ``/`` must belong to you or root and not be writable by its group or
    others unless it has the sticky bit, every symbolic link followed belonging to you or
    root. Relative entries (``.``, an empty entry, ``bin``) name the working directory and are
    skipped too; a folder that does not exist is left out without a word."""
    kept, skipped, seen = [], [], set()
    for entry in os.environ.get("PATH", os.defpath).split(os.pathsep):
        if entry in seen:
            continue
        seen.add(entry)
        if not entry or not os.path.isabs(entry):
            skipped.append(f"PATH entry {shown_value(entry)} skipped: it is relative (the working directory)")
            continue
        try:
            why = _unsafe_program_folder(Path(entry))
        except FileNotFoundError:  # nothing to run from it
            continue
        except OSError as exc:
            why = f"PATH entry {entry} skipped: cannot check it ({exc.strerror or exc})"
        if why is None:
            kept.append(entry)
        else:
            skipped.append(why)
    return os.pathsep.join(kept), skipped


def _unsafe_program_folder(folder: Path) -> str | None:
    """Why programs in ``folder`` (a PATH entry, absolute) could be someone else's, or None
    (see :func:`_trusted_path`); FileNotFoundError if it does not exist."""
    hint = f"remove {folder} from PATH to silence this"
    why = _unsafe_ancestor(folder, hint=hint)  # the folders on the way to it
    link = os.lstat(folder)
    if why is None and stat.S_ISLNK(link.st_mode):  # /bin -> usr/bin: the link, then where it leads
        if link.st_uid not in (_uid(), 0):
            why = (f"it is a symbolic link owned by {_owner(link.st_uid)}, not by you or root: its "
                   "owner could point it elsewhere")
        else:
            why = _unsafe_ancestor(Path(os.path.realpath(folder)), hint=hint)
    if why is not None:
        return f"PATH entry {folder} skipped: {why}"
    st = os.stat(folder)
    it = f"it leads to {os.path.realpath(folder)}, which" if stat.S_ISLNK(link.st_mode) else "it"
    if not stat.S_ISDIR(st.st_mode):
        return f"PATH entry {folder} skipped: {it} is {_kind(st.st_mode)}, not a directory"
    if st.st_uid not in (_uid(), 0):
        return (f"PATH entry {folder} skipped: {it} is owned by {_owner(st.st_uid)}, not by you or "
                "root, so a compiler, as or ld in it could be theirs")
    if st.st_mode & 0o022:
        who = "everyone" if st.st_mode & 0o002 else "its group"
        return (f"PATH entry {folder} skipped: {it} is writable by {who} (mode "
                f"{stat.S_IMODE(st.st_mode):04o}), so {who if who == 'everyone' else 'its members'} "
                f"could add a compiler, as or ld to it ({hint})")
    return None


def _unsafe_program(path: str) -> str | None:
    """Why the program file ``path`` (the compiler) could be someone else's, or None: the file
    it names (symbolic links followed) must belong to you or root and be writable by no one
    else, in a folder no one else could replace it in."""
    real = Path(os.path.realpath(path))
    try:
        st = os.stat(real)
        why = _unsafe_ancestor(real, hint=f"or use another compiler than {path}")
    except OSError as exc:
        return f"{path}: cannot check it ({exc.strerror or exc})"
    if why is not None:
        return f"{path} refused: {why}"
    shown = path if str(real) == path else f"{path} (that is, {real})"
    if st.st_uid not in (_uid(), 0):
        return f"{shown} is owned by {_owner(st.st_uid)}, not by you or root: refused as the compiler"
    if st.st_mode & 0o022:
        return (f"{shown} is writable by its group or by others (mode {stat.S_IMODE(st.st_mode):04o}): "
                "anyone could replace what it runs, so it is refused as the compiler")
    return None


def _compiler(path: str | None = None) -> list[str] | str:
    """The C compiler as a command (``CC`` may hold several words, e.g. ``ccache gcc``), or a
    sentence saying why there is none. Looked up on ``path`` (default: the folders of PATH that
    :func:`_trusted_path` keeps); the program found must not be writable by anyone but you or root."""
    if path is None:
        path = _trusted_path()[0]
    raw = os.environ.get("CC", "")
    try:
        chosen = shlex.split(raw)
    except ValueError as exc:  # e.g. CC='gcc "': No closing quotation
        return (f"CC={shown_value(raw)} is not a command line the shell could split ({exc}); "
                "set CC to a compiler command such as CC=gcc or CC='ccache gcc'")
    if chosen:
        first = chosen[0]
        if os.sep in first or (os.altsep and os.altsep in first):
            if not os.path.lexists(first):
                return f"CC={raw}: no such file" + ("" if first == raw.strip() else f" ({first})")
            if not (os.path.isfile(first) and os.access(first, os.X_OK)):
                return f"CC={raw}: {first} is not an executable file"
            found = os.path.abspath(first)  # the build runs in its own folder
        else:
            found = shutil.which(first, path=path)
            if found is None:
                return f"CC={raw}: no program {shown_value(first)} found on PATH"
        why = _unsafe_program(found)
        if why is not None:
            return f"CC={raw}: {why}"
        return [found, *chosen[1:]]
    refused = []
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name, path=path)
        if found is not None:
            why = _unsafe_program(found)
            if why is None:
                return [found]
            refused.append(why)
    return ("no C compiler found (looked for cc, gcc and clang on PATH, in the folders it trusts; "
            "set CC to choose one)" + "".join(f"; {why}" for why in refused))


def _unsafe_math(cc: list[str]) -> str | None:
    """Why ``cc`` (the CC command) is refused because of an unsafe-math flag, or None."""
    for word in cc[1:]:
        if word in _UNSAFE_MATH_FLAGS:
            return (f"CC={os.environ.get('CC', '')!r} holds {word}, which lets the "
                    "compiler assume there is no NaN or infinity (or reorder float arithmetic; with "
                    "GCC it can also set flush-to-zero for the whole process): the kernel relies on "
                    f"IEEE -inf and NaN, so it is not built with {word}; remove it from CC "
                    f"(refused: {', '.join(_UNSAFE_MATH_FLAGS)})")
    return None


def _timeout_s() -> float | str:
    """Seconds one compiler run may take (``COURSE_UTILS_CC_TIMEOUT``), or why that is unusable."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return _DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        return (f"{TIMEOUT_ENV}={shown_value(raw)}: expected a number of seconds > 0 (default "
                f"{_DEFAULT_TIMEOUT_S:g})")
    return value


def _cpu_fingerprint() -> str:
    """What -march=native compiles for: the CPU as Linux describes it (x86 and ARM fields)."""
    fields = ("model name", "flags", "Features", "CPU implementer", "CPU architecture", "CPU part")
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        described = "\n".join(sorted({line for line in lines if line.startswith(fields)}))
    except OSError:
        described = ""
    return f"{platform.machine()} {platform.processor()}\n{described}"


def _cache_dirs() -> list[Path]:
    """Where built kernels may go, in order: the user's cache, else a folder in the temp dir."""
    root = os.environ.get("XDG_CACHE_HOME")
    if not root or not os.path.isabs(root):  # a relative one is ignored, as the XDG spec says
        try:
            root = Path.home() / ".cache"
        except RuntimeError:  # no home directory known
            root = None
    dirs = [] if root is None else [Path(root) / "course_utils"]
    return [*dirs, Path(tempfile.gettempdir()) / f"course_utils-{_uid()}"]


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _private_dir(folder: Path) -> str | None:
    """Make ``folder`` this user's private directory (mode 0700): None when it is (or now is),
    else why it cannot be trusted to hold a library this process will load."""
    # Nothing is created inside a folder that another user could replace: the folders that
    # exist on the way are checked first (all of them again once the folder exists).
    first_missing = folder  # the top folder that mkdir would create
    while not os.path.lexists(first_missing.parent) and first_missing.parent != first_missing:
        first_missing = first_missing.parent
    if not os.path.lexists(first_missing) and os.path.isdir(first_missing.parent):  # else mkdir says why
        try:
            why = _unsafe_ancestor(first_missing)
        except OSError:  # e.g. a dangling link on the way: mkdir below says what is wrong
            why = None
        if why is not None:
            return why
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(folder)
    except OSError as exc:
        return f"{folder}: cannot create it ({exc})"
    if stat.S_ISLNK(st.st_mode):
        return f"{folder} is a symbolic link, not a directory of yours: refused"
    if not stat.S_ISDIR(st.st_mode):
        return f"{folder} is not a directory"
    if st.st_uid != _uid():
        return (f"{folder} is owned by {_owner(st.st_uid)}, not by you ({_owner(_uid())}): "
                "a library in it could be anyone's, so it is refused")
    if st.st_mode & 0o022:
        return (f"{folder} is writable by its group or by others (mode {stat.S_IMODE(st.st_mode):04o}, "
                "expected 0700): anyone who can write there could plant a library, so it is refused "
                f"(remove it, or chmod 700 it if you trust what is in it)")
    if not os.access(folder, os.W_OK | os.X_OK):
        return _unwritable(folder, st)
    try:
        noexec = bool(os.statvfs(folder).f_flag & getattr(os, "ST_NOEXEC", 0))
    except (OSError, AttributeError):  # no statvfs (Windows)
        noexec = False
    if noexec:
        return (f"{folder} is on a filesystem mounted noexec: a library built there could not be "
                "loaded (the system refuses to map its code)")
    try:
        why = _unsafe_ancestor(folder)
        if why is not None:
            return why
        if stat.S_IMODE(st.st_mode) != 0o700:  # ours, and only we can write: make it private
            os.chmod(folder, 0o700)
    except OSError as exc:
        return f"{folder}: cannot check or set its permissions ({exc.strerror or exc})"
    return None


def _unwritable(folder: Path, st: os.stat_result) -> str:
    """Why this user cannot write to ``folder``, a directory of theirs (its mode is not to blame
    when its filesystem is mounted read-only)."""
    mode = stat.S_IMODE(st.st_mode)
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs (Windows)
        read_only = False
    if read_only:
        return (f"{folder} is on a read-only filesystem: the kernel cannot be built or recorded "
                "there (its mode is not the cause)")
    if not st.st_mode & stat.S_IWUSR or not st.st_mode & stat.S_IXUSR:
        return (f"{folder} is yours but its mode {mode:04o} does not let you write to it "
                f"(chmod 700 {shlex.quote(str(folder))} to use it)")
    return (f"{folder}: the system does not let you write to it although its mode ({mode:04o}) "
            "would (an access control list or a security policy?)")


_CACHE_HINT = "set XDG_CACHE_HOME to a folder whose every parent only you or root can write"


def _unsafe_ancestor(folder: Path, hint: str = _CACHE_HINT) -> str | None:
    """Why a folder on the way to ``folder`` lets another user replace what lies below it (and
    so ``folder`` with one of theirs), or None.

    The path is followed as the system follows it, symbolic links included, from ``/`` to the
    folder that holds ``folder``: each folder passed through must belong to you or root (its
    owner can rename anything in it) and must not be writable by its group or by others unless
    it has the sticky bit (as /tmp has: then others cannot rename what is yours); each symbolic
    link followed must belong to you or root (its owner can point it elsewhere)."""
    pending = list(reversed((Path.cwd() / folder).parent.parts[1:]))  # '..' left as the system reads it
    current, checked, links = Path("/"), set(), 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            current = current.parent  # passed through (and checked) on the way here
            continue
        if current not in checked:
            why = _shared_folder(current, part, folder, hint)
            if why is not None:
                return why
            checked.add(current)
        path = current / part
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (_uid(), 0):
                return (f"{path} is a symbolic link owned by {_owner(st.st_uid)}, on the way to "
                        f"{folder}: its owner could point it elsewhere, so {folder} is refused")
            links += 1
            if links > 40:
                return f"{folder}: too many symbolic links on the way to it"
            target = Path(os.readlink(path))
            if target.is_absolute():
                current = Path("/")
            pending.extend(reversed(target.parts[1:] if target.is_absolute() else target.parts))
            continue
        if not stat.S_ISDIR(st.st_mode):
            return f"{path}, on the way to {folder}, is {_kind(st.st_mode)}, not a directory"
        current = path
    return _shared_folder(current, folder.name, folder, hint)


def _shared_folder(directory: Path, child: str, folder: Path, hint: str = _CACHE_HINT) -> str | None:
    """Why another user could replace ``child`` in ``directory`` (on the way to ``folder``), or None."""
    st = os.stat(directory)
    mode = stat.S_IMODE(st.st_mode)
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        who = "everyone" if st.st_mode & 0o002 else "its group"
        return (f"{directory} is writable by {who} without the sticky bit (mode {mode:04o}): others "
                f"could replace {child} in it, on the way to {folder}, so {folder} is refused "
                f"(chmod go-w {shlex.quote(str(directory))}, or {hint})")
    if st.st_uid not in (_uid(), 0):
        return (f"{directory} is owned by {_owner(st.st_uid)}, not by you or root: its owner could "
                f"replace {child} in it (whatever its mode), on the way to {folder}, so {folder} "
                "is refused")
    return None


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    for test, what in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISLNK, "a symbolic link"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return what
    return f"not a regular file (mode {mode:o})"


def _open_own_file(path: Path) -> tuple[int, os.stat_result]:
    """An open descriptor of ``path`` (read-only) and its status, if it is a regular file of
    this user's that no one else may write, not a symbolic link; FileNotFoundError if there is
    none; _Untrusted otherwise. Opened without blocking, so a FIFO in its place is refused at
    once instead of waiting for a writer forever. Whatever is checked afterwards (the bytes,
    their hash) is checked on this descriptor, never on the name again."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:  # ELOOP: a symbolic link
        raise _Untrusted(f"{path}: cannot open it without following links ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Untrusted(f"{path} is {_kind(st.st_mode)}, expected a regular file")
        if st.st_uid != _uid():
            raise _Untrusted(f"{path} is owned by {_owner(st.st_uid)}, not by you")
        if st.st_mode & 0o022:
            raise _Untrusted(f"{path} is writable by its group or by others (mode "
                             f"{stat.S_IMODE(st.st_mode):04o}): its bytes could change after they "
                             "were checked")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _read_fd(fd: int) -> bytes:
    """Every byte of the open file ``fd``, read from its start (its offset is left alone)."""
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _read_own_file(path: Path) -> bytes:
    """The bytes of ``path`` if it is a regular file of this user's (see _open_own_file)."""
    fd, _ = _open_own_file(path)
    try:
        return _read_fd(fd)
    finally:
        os.close(fd)


def _write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that no reader ever sees part of it (temp file, os.replace)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        _remove(Path(tmp))
        raise


def _remove(*paths: Path) -> None:
    for path in paths:
        try:
            path.unlink()
        except OSError:
            pass


def _record_path(library: Path) -> Path:
    return library.with_name(library.name + ".sha256")


def _record(library: Path) -> tuple[str, bool]:
    """The sha256 recorded when ``library`` was built, and whether the record says that these
    bytes passed the current self-test in a separate process (_Untrusted if there is no record)."""
    record = _record_path(library)
    try:
        text = _read_own_file(record).decode("ascii", errors="replace")
    except FileNotFoundError:
        raise _Untrusted(f"{library} has no recorded sha256 ({record.name}): it was not built here "
                         "by this module, so it is not loaded") from None
    digest = text.split()[0] if text.split() else ""
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise _Untrusted(f"{record} does not hold a sha256")
    return digest, _SELF_TEST_PASSED in text.splitlines()[1:]


def _recorded_sha256(library: Path) -> str:
    """The sha256 recorded when ``library`` was built (_Untrusted if there is no record)."""
    return _record(library)[0]


def _record_text(library: Path, digest: str) -> bytes:
    """A record binding ``digest`` to a self-test passed in a separate process."""
    return f"{digest}  {library.name}\n{_SELF_TEST_PASSED}\n".encode()


_LOADED_FDS: list[int] = []  # descriptors of the libraries loaded by their /proc/self/fd name


def _fd_path(fd: int) -> str | None:
    """A name that opens exactly the file ``fd`` is open on (``/proc/self/fd/N`` on Linux), or
    None where the system has none (macOS, a container without /proc)."""
    path = f"/proc/self/fd/{fd}"
    try:
        same = os.path.samestat(os.stat(path), os.fstat(fd))
    except OSError:
        return None
    return path if same else None


def _load_verified(library: Path, digest: str) -> ctypes.CDLL:
    """Load ``library`` only if its bytes hash to ``digest``.

    The file is opened once (not following a symbolic link; a regular file of yours that no
    one else may write), its bytes are hashed from that descriptor, and the library loaded is
    the file behind that same descriptor (``/proc/self/fd/N``), not the name looked up again:
    a file swapped in under the name between the check and the load is never loaded. Where
    the system has no ``/proc/self/fd`` (macOS), the checked bytes are written to a new file
    of this user's in the same private directory, loaded from there and removed. Checked
    before dlopen, so a changed or truncated file is never mapped (a truncated one would
    crash with SIGBUS).

    A descriptor given to dlopen stays open for the life of the process (as the library
    stays loaded): the dynamic loader remembers libraries by the name they were loaded
    under, and a closed descriptor's number, reused for another library, would be answered
    with the first one."""
    fd, _ = _open_own_file(library)
    keep = False
    try:
        data = _read_fd(fd)
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise _Untrusted(f"{library} does not match its recorded sha256 (recorded {digest[:16]}..., "
                             f"found {actual[:16]}...: changed or truncated since it was built), so "
                             "it is not loaded")
        by_fd = _fd_path(fd)
        if by_fd is None:
            return _load_private_copy(library, data)
        keep = True  # kept even if the load fails: dlopen may have mapped it under this name
        _LOADED_FDS.append(fd)
        return _load(Path(by_fd), shown=library)
    finally:
        if not keep:
            os.close(fd)


def _load_private_copy(library: Path, data: bytes) -> ctypes.CDLL:
    """Load the checked bytes ``data`` of ``library`` from a copy of them written to a new,
    unpredictable name (``O_EXCL``, mode 0700) in the library's private directory, then removed."""
    fd, copy = tempfile.mkstemp(dir=library.parent, prefix=f".{library.name}.", suffix=".load.so")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.chmod(copy, 0o700)
        return _load(Path(copy), shown=library)
    finally:
        _remove(Path(copy))  # a loaded library stays mapped without its name


def _load(path: Path, *, shown: Path | None = None) -> ctypes.CDLL:
    """dlopen ``path`` (named ``shown`` in messages) and declare its fused_decode function."""
    lib = ctypes.CDLL(str(path))
    pointer, long, strides = ctypes.c_void_p, ctypes.c_long, ctypes.POINTER(ctypes.c_long)
    try:
        lib.fused_decode.argtypes = [pointer] * 4 + [long] * 4 + [strides] * 2 + [ctypes.c_int]
    except AttributeError as exc:
        raise OSError(f"{shown or path} has no fused_decode function: {exc}") from None
    lib.fused_decode.restype = ctypes.c_int
    return lib


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, else the CPU count): the most
    threads :func:`fused_decode_attention` runs, and so the most its self-test needs to try."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _self_test(lib: ctypes.CDLL) -> str | None:
    """None when the kernel agrees with F.scaled_dot_product_attention on small cases that a
    broken build gets wrong, else what it got wrong. Values must agree where both are finite,
    and the output must be NaN exactly where PyTorch's is: a build with -ffinite-math-only
    (or -ffast-math) turns a NaN in the cache into a finite output and NaN in q or a score of
    +inf into zeros."""
    gen = torch.Generator().manual_seed(20240607)  # its own generator: the caller's seed is untouched
    randn = functools.partial(torch.randn, generator=gen, dtype=torch.float32)
    q = randn(1, 8, 1, HEAD_WIDTH).abs() + 0.1  # > 0: a key of -inf scores -inf, one of +inf +inf
    k, v = randn(1, 2, 100, HEAD_WIDTH), randn(1, 2, 100, HEAD_WIDTH)
    masked = k.clone()
    masked[:, :, :32] = -math.inf  # the first block scores -inf: the running max starts at -inf
    big_q = randn(2, 12, 1, HEAD_WIDTH)
    cache = randn(2, 4, 90, HEAD_WIDTH) * 40  # scores of several hundred
    big_v = randn(2, 4, 90, HEAD_WIDTH)
    nan_k, nan_q, inf_k = k.clone(), q.clone(), k.clone()
    nan_k[0, 1, 70, 5] = math.nan  # group 1's heads NaN, group 0's finite
    nan_q[0, 2, 0, 9] = math.nan  # head 2 NaN, the others finite
    inf_k[0, 0, 40] = math.inf  # a score of +inf: group 0's heads NaN (inf - inf), as in PyTorch
    all_masked = k.clone()
    all_masked[:, 0] = -math.inf  # every score of group 0's heads -inf: 0, as in PyTorch
    cases = [("a first block of -inf scores", q, masked, v, threads) for threads in (1, 3)]
    cases.append(("scores far from 0, a strided cache", big_q, cache[:, :, :70], big_v[:, :, :70], 2))
    cases += [("a NaN in a cached key", q, nan_k, v, 3), ("a NaN in a query", nan_q, k, v, 2),
              ("a key scoring +inf", q, inf_k, v, 3), ("every key of a group -inf", q, all_masked, v, 2)]
    # The cache read at other time strides: a (B, T, g, dk) buffer seen as (B, g, T, dk) (keys
    # g * dk floats apart), and values from a (B, T, g, 2 dk) buffer (2 g dk apart), so that a
    # build that takes either stride as dk, or one for the other, disagrees.
    btgd_k = randn(2, 100, 2, HEAD_WIDTH).transpose(1, 2)
    btgd_v = randn(2, 100, 2, 2 * HEAD_WIDTH)[..., :HEAD_WIDTH].transpose(1, 2)
    cases += [("a (B, T, g, dk) cache transposed, values at another time stride", big_q[:, :8], btgd_k,
               btgd_v, threads) for threads in (1, 3)]
    # More than 8 threads: 12, and the most fused_decode_attention accepts, each thread with a
    # share (the merge of the threads' partial results runs over all of them).
    top = min(MAX_THREADS, max(usable_cpus(), _SELF_TEST_MORE_THREADS))  # the most that can run
    long_t = top * _BLOCK - 2  # top shares of one block, the last 30 keys
    long_k, long_v = randn(2, 2, long_t, HEAD_WIDTH), randn(2, 2, long_t, HEAD_WIDTH)
    cases.append((f"{long_t} keys", randn(2, 6, 1, HEAD_WIDTH), long_k, long_v, top))
    # Thread counts, each thread with a share: n threads over 32 n - 2 keys (n - 1 whole blocks
    # and a last one of 30). Every count up to 32 (a laptop's or a server's), then a sample of
    # larger ones, odd and even, up to the most the kernel runs here (the CPUs, at least 12): a
    # build that breaks one count disagrees there when the count is in this set. (Every count
    # to 256 would cost seconds: each count starts a team.)
    sweep_q = randn(1, 2, 1, HEAD_WIDTH)
    larger = (33, 47, 63, 64, 65, 96, 127, 128, 129, 191, 255, MAX_THREADS)
    for n in sorted({*range(1, 33), *larger} & set(range(1, top + 1))):
        t = n * _BLOCK - 2
        cases.append((f"{t} keys", sweep_q, long_k[:1, :1, :t], long_v[:1, :1, :t], n))
    # Each path of the kernel: 1 to 8 query heads per group (one compiled path each), 12 (a
    # pass of 8, then 4) and 16 (two passes of 8), with g = 1 and g > 1, three sequences, and
    # 740 keys: at 8 threads, three 32-key blocks per thread and a last share of 2 blocks and
    # 4 keys. A build that miscompiles one path (and only it) disagrees on its case. One cache
    # per number of groups, shared by the shapes with that g; its float64 copy made once.
    caches = {g: (randn(_SELF_TEST_B, g, _SELF_TEST_T, HEAD_WIDTH) * 2,  # scores of spread ~2
                  randn(_SELF_TEST_B, g, _SELF_TEST_T, HEAD_WIDTH))
              for g in sorted({g for _, g in _SELF_TEST_SHAPES})}
    doubles = {g: (k.double(), v.double()) for g, (k, v) in caches.items()}
    expected_of: dict[int, Tensor] = {}
    for i, (r, g) in enumerate(_SELF_TEST_SHAPES):
        shape_q = randn(_SELF_TEST_B, r * g, 1, HEAD_WIDTH)
        expected_of[id(shape_q)] = _reference(shape_q, *doubles[g])
        what = (f"B = {_SELF_TEST_B}, h = {r * g}, g = {g}: {r} query head{'s' * (r > 1)} per group, "
                f"{_SELF_TEST_T} keys")
        cases += [(what, shape_q, *caches[g], threads)
                  for threads in (1 + i % 3, _SELF_TEST_THREADS, _SELF_TEST_MORE_THREADS)]
    for what, q, k, v, threads in cases:
        if id(q) in expected_of:
            expected = expected_of[id(q)]
        else:
            expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), enable_gqa=True)
        got = _run(lib, q, k, v, threads, fill=math.nan).double()  # NaN where nothing was written
        where = f"({what}, {threads} thread(s))"
        if not torch.equal(got.isnan(), expected.isnan()):
            return (f"the built kernel disagrees with F.scaled_dot_product_attention on its self-test "
                    f"{where}: NaN in {int(got.isnan().sum())} output numbers, expected NaN in "
                    f"{int(expected.isnan().sum())} (exactly where PyTorch's are); not used (a flag "
                    "such as -ffast-math or -ffinite-math-only breaks its handling of NaN and infinities)")
        both = ~expected.isnan()
        error = (got[both] - expected[both]).abs().max().item() if both.any() else 0.0
        if not error <= _SELF_TEST_TOLERANCE:  # also NaN
            return (f"the built kernel disagrees with F.scaled_dot_product_attention on its self-test "
                    f"{where}: largest difference {error:.3g}, allowed {_SELF_TEST_TOLERANCE:g}; not "
                    "used (a flag such as -ffast-math in CC breaks its handling of -inf and NaN; a "
                    "compiler that miscompiles one of its paths breaks the shapes that take it)")
    return None


def _reference(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """``F.scaled_dot_product_attention(q, k, v, enable_gqa=True)`` in float64, computed as
    the kernel reads the cache: each group's ``h/g`` query heads as ``h/g`` queries of one
    attention over that group's keys (the same numbers, without a copy of K and V for every
    query head). For finite inputs: PyTorch's NaN and -inf rules are checked on the other
    cases, with ``enable_gqa``."""
    B, h, _, dk = q.shape
    g = k.shape[1]
    grouped = q.double().reshape(B, g, h // g, dk)  # query head i reads group i // (h/g)
    return F.scaled_dot_product_attention(grouped, k.double(), v.double()).reshape(B, h, 1, dk)


def _run_limited(command: list[str], timeout_s: float, folder: Path, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> tuple[int | None, str]:
    """Run ``command`` for at most ``timeout_s`` seconds (in ``cwd`` and with ``env``; by
    default this process's working directory and environment): ``(its exit status, its
    output)``, or ``(None, its output so far)`` if it was stopped. OSError if it cannot be
    started.

    Its output goes to a temporary file, not a pipe, and only the process itself is waited
    for: a child it leaves behind in a session of its own (a compile server, ``setsid sleep
    &``) may keep the file open, and the timeout still holds. On a timeout its process group
    (a session of its own) is killed."""
    with tempfile.TemporaryFile(dir=folder) as log:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=cwd, env=env)
        try:
            status: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                proc.kill()
            try:
                proc.wait(timeout=5)  # SIGKILL: at once, short of a process stuck in the kernel
            except subprocess.TimeoutExpired:
                pass
            status = None
        size = log.seek(0, os.SEEK_END)
        log.seek(max(0, size - 65536))  # the end is where compilers and tracebacks say what went wrong
        return status, log.read().decode("utf-8", errors="replace")  # in any encoding


def _printable(text: str) -> str:
    """``text`` with every character that is not printable (terminal escapes, control bytes)
    shown as ``?``: a program's output quoted in a status or a warning cannot redraw the screen."""
    return "".join(c if c.isprintable() else "?" for c in text)


def _last_lines(text: str, n: int = 2) -> str:
    """The last ``n`` non-blank lines of a program's output, on one line, printable only."""
    lines = [_printable(line.strip()) for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-n:])


_LOW_DISK_BYTES = 16 << 20  # less free than this where the compiler writes: a full disk
_DISK_FULL_WORDS = ("No space left on device", "Disk quota exceeded")


def _disk_full(folder: Path, text: str) -> str | None:
    """Why a failed compiler run was a full disk (the compiler's output says so, or less than
    16 MiB is free in ``folder`` or the temp folder, where compilers write), or None."""
    for words in _DISK_FULL_WORDS:
        if words in text:
            return f"a disk it writes to is full (it said {shown_value(words)})"
    for where in (folder, Path(tempfile.gettempdir())):
        try:
            fs = os.statvfs(where)
        except (OSError, AttributeError):
            continue
        free = fs.f_bavail * fs.f_frsize
        if free < _LOW_DISK_BYTES:
            return f"the disk holding {where} is full ({free / 2**20:.1f} MiB free)"
    return None


def _compile(cc: list[str], flags: tuple[str, ...], folder: Path, name: str,
             timeout_s: float, path: str | None = None) -> tuple[Path | None, str, str]:
    """Run the compiler into a temporary file of ``folder``: ``(its path, "", "built")``, or
    ``(None, the error, "failed")`` (the compiler's verdict), ``(None, the error, "timeout")``,
    ``(None, the error, "disk full")`` (not the compiler's fault) or ``(None, the error, "not
    run")``. It runs with ``path`` as its PATH (default: the folders :func:`_trusted_path` keeps)."""
    for stale in folder.glob(f".{name}.*.so.tmp"):  # left by a build that was killed an hour ago
        try:
            if time.time() - stale.stat().st_mtime > 3600:
                stale.unlink()
        except OSError:
            pass
    fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".so.tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    command = [*cc, *flags, "-o", str(tmp), str(_SOURCE), "-lm"]
    try:
        # in the private folder, with the PATH folders only you or root can write: nothing
        # the compiler runs (as, ld, a ccache's compiler) comes from the working directory or
        # from a folder another user could plant a program in
        path = _trusted_path()[0] if path is None else path
        status, text = _run_limited(command, timeout_s, folder, cwd=folder, env={**os.environ, "PATH": path})
    except OSError as exc:
        _remove(tmp)
        return None, f"could not run {cc[0]}: {exc.strerror or exc}", "not run"
    if status is None:
        _remove(tmp)
        return None, (f"{cc[0]} did not finish within {timeout_s:g} s and was stopped (set "
                      f"{TIMEOUT_ENV} to allow it longer)"), "timeout"
    if status != 0:
        _remove(tmp)
        said = _last_lines(text) or f"exit status {status}"
        full = _disk_full(folder, text)
        if full is not None:
            return None, (f"{cc[0]} failed because {full} ({said}): free some space; not remembered "
                          "as a compiler error, so the next process tries again"), "disk full"
        return None, said, "failed"
    try:
        os.chmod(tmp, 0o700)
    except OSError:
        pass
    return tmp, "", "built"


def _self_test_child(path: str, digest: str) -> int:
    """The separate process's side of :func:`_self_test_elsewhere`: load the library at ``path``
    (its bytes hashing to ``digest``), run the self-test, check that loading it left the
    process's floating-point mode alone; print the verdict, return the exit status."""
    try:
        lib = _load_verified(Path(path), digest)
        error = _self_test(lib)
    except (_Untrusted, OSError) as exc:
        error = f"could not load it: {exc}"
    if error is None:
        tiny, one = float("5e-324"), float("1")  # not constants: Python would fold them at compile time
        if tiny * one == 0.0 or (torch.tensor(1e-40) * one).item() == 0.0:
            error = ("loading it turned on flush-to-zero for the whole process (5e-324 * 1.0 gave 0.0; "
                     "GCC links crtfastmath.o into a library built with -ffast-math, -Ofast or "
                     "-funsafe-math-optimizations, and its constructor does this); not used")
    print(_CHILD_PASSED if error is None else _CHILD_FAILED + error, flush=True)
    return 0 if error is None else 1


# The separate process runs with -I (no PYTHONPATH, no user site, no working directory on the
# path) in the library's private folder, with this process's search path less its relative
# entries and its working directory; this package is imported from where this module was.
_CHILD_CODE = """\
import importlib, importlib.machinery, importlib.util, json, sys
path, digest, root, name, search = sys.argv[1:6]
sys.path[:] = json.loads(search)
top = name.partition(".")[0]
spec = importlib.machinery.PathFinder.find_spec(top, [root])
if spec is None:
    sys.exit(f"{top} not found in {root}")
package = importlib.util.module_from_spec(spec)
sys.modules[top] = package
spec.loader.exec_module(package)
sys.exit(importlib.import_module(name)._self_test_child(path, digest))
"""


def _child_search_path() -> list[str]:
    """This process's module search path, less what depends on the working directory (``''``,
    relative entries, the working directory itself): another user's files there must not run."""
    try:
        here = os.path.realpath(os.getcwd())
    except OSError:  # the working directory was removed
        here = None
    return [entry for entry in sys.path if isinstance(entry, str) and os.path.isabs(entry)
            and os.path.realpath(entry) != here]


def _self_test_elsewhere(library: Path, digest: str, timeout_s: float,
                         path: str | None = None) -> tuple[str | None, str]:
    """Self-test ``library`` in a separate Python process, so that a library that crashes, hangs
    or changes its process (crtfastmath's flush-to-zero) never touches this one: ``(None,
    "passed")``, else ``(why not, "failed")`` where the verdict is the library's own (worth
    remembering), ``"timeout"``, ``"unloadable"`` (the system would not map it: its folder's
    filesystem is mounted noexec, say; not the library's fault) or ``"other"`` (the process
    could not run the test). Only a library that passed is ever loaded here. The process runs
    with ``path`` as its PATH (default: the folders :func:`_trusted_path` keeps)."""
    if not sys.executable:
        return "no Python executable to self-test the library in (sys.executable is empty)", "other"
    package = sys.modules[__name__.partition(".")[0]]  # imported in the child from where it is here
    root = os.path.dirname(os.path.dirname(os.path.abspath(package.__file__)))
    command = [sys.executable, "-I", "-c", _CHILD_CODE, str(library), digest, root, __name__,
               json.dumps(_child_search_path())]
    try:
        # OpenMP's threads sleep rather than spin while they wait: on a busy machine the
        # self-test's spinning threads and PyTorch's took ten times as long.
        path = _trusted_path()[0] if path is None else path
        status, text = _run_limited(command, timeout_s, library.parent, cwd=library.parent,
                                    env={**os.environ, "OMP_WAIT_POLICY": "passive", "PATH": path})
    except OSError as exc:
        return f"could not start {sys.executable} to self-test the library: {exc.strerror or exc}", "other"
    if status is None:
        return (f"its self-test in a separate process did not finish within {timeout_s:g} s and was "
                f"stopped (set {TIMEOUT_ENV} to allow it longer)"), "timeout"
    lines = text.splitlines()
    if status == 0 and _CHILD_PASSED in lines:
        return None, "passed"
    verdicts = [_printable(line[len(_CHILD_FAILED):]) for line in lines if line.startswith(_CHILD_FAILED)]
    if verdicts and _MAP_FAILED in verdicts[-1]:
        return (f"{verdicts[-1]} (the system would not map a library from {library.parent}: is its "
                "filesystem mounted noexec? Not the compiler's or the library's fault, so not "
                "remembered)"), "unloadable"
    if verdicts:
        return verdicts[-1], "failed"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return (f"its self-test crashed the separate process it ran in ({name}); this process was "
                "not affected; not used"), "other" if -status == signal.SIGKILL else "failed"  # SIGKILL: OOM
    return (f"its self-test in a separate process failed (exit status {status}): "
            f"{_last_lines(text) or 'no output'}"), "other"


def _not_a_file(*paths: Path) -> str | None:
    """Why one of ``paths`` (where the kernel keeps its files) cannot be written: something
    other than a regular file, a symbolic link or nothing (a directory, a FIFO) is there."""
    for path in paths:
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            return (f"{path} is {_kind(mode)}, where the kernel keeps a file: remove it so that the "
                    "kernel can be built there")
    return None


def _remember_failure(failed: Path, error: str) -> None:
    try:
        _write_atomically(failed, error.encode())
    except OSError:  # not remembered: the next process tries again
        pass


def _cached_or_built(cc: list[str], flags: tuple[str, ...], folder: Path, name: str,
                     timeout_s: float, notes: list[str], path: str) -> tuple[ctypes.CDLL | None, str, str]:
    """``(the kernel, "", "built")`` from ``folder``, loading a verified cached build or building
    one; or ``(None, the error, what next)``: ``"next"`` (try the next flags), ``"stop"`` (the
    next flags would fare no better: a timeout, a full disk) or ``"refused"`` (something in the
    folder stands where the kernel's files go: not the compiler's doing, and no other build is
    tried in its place)."""
    library = folder / f"{name}.so"
    record = _record_path(library)
    failed = folder / f"{name}.failed"
    why = _not_a_file(library, record, failed)
    if why is not None:  # not a quiet fall back to a build without threads
        return None, why, "refused"
    if os.path.lexists(library):  # a cached build: loaded once its record says it passed the self-test
        try:
            digest, tested = _record(library)
            if tested:
                return _load_verified(library, digest), "", "built"
            # Recorded by an older version of this module (an older self-test, or none): built
            # again, never loaded, not even in a self-test process (its constructor would run there).
            notes.append(f"rebuilt {library.name}: its record does not say it passed the current "
                         f"self-test ({shown_value(_SELF_TEST_PASSED)}), so it was not loaded")
        except (_Untrusted, OSError) as exc:
            notes.append(f"rebuilt {library.name}: {exc}")
            warnings.warn(f"fused decode kernel: {exc}; building it again", RuntimeWarning, stacklevel=5)
        _remove(library, record)
    try:
        remembered = _printable(_read_own_file(failed).decode("utf-8", errors="replace"))
        age = time.time() - os.lstat(failed).st_mtime
    except FileNotFoundError:
        pass
    except _Untrusted as exc:
        return None, str(exc), "refused"
    else:
        if 0 <= age < _FAILURE_MEMORY_S:
            return None, (f"{remembered} (remembered in {failed} for an hour; {_RETRY})"), "next"
    built, error, outcome = _compile(cc, flags, folder, name, timeout_s, path)
    if built is None:
        if outcome == "failed":  # the compiler's verdict; a timeout, a full disk or a missing program is not
            _remember_failure(failed, error)
        # One that hangs once would hang for every flag; a full disk is full for every flag.
        return None, error, "stop" if outcome in ("timeout", "disk full") else "next"
    try:
        digest = hashlib.sha256(_read_own_file(built)).hexdigest()
        error, verdict = _self_test_elsewhere(built, digest, timeout_s, path)
        if error is not None:
            if verdict == "failed":  # the library's own doing: remembered
                _remember_failure(failed, error)
            # slow for every flag; a folder whose libraries cannot be mapped is so for every flag
            return None, error, "stop" if verdict in ("timeout", "unloadable") else "next"
        lib = _load_verified(built, digest)  # these bytes passed: now loaded here
        # The record first: a process looking in between finds no library yet (and builds one),
        # never a new library without its record. os.replace is atomic: no half library is seen.
        _write_atomically(record, _record_text(library, digest))
        os.replace(built, library)
    except (_Untrusted, OSError) as exc:
        return None, f"could not load or keep the kernel it built: {exc}", "next"
    finally:
        _remove(built)  # gone already once moved into place
    return lib, "", "built"


def _build_kernel() -> ctypes.CDLL | str:
    """The compiled, verified, self-tested kernel, or a sentence saying why there is none."""
    if platform.system() == "Windows":
        return "the fused kernel is built with a Unix C toolchain, not set up here on Windows"
    path, skipped = _trusted_path()
    cc = _compiler(path)
    if isinstance(cc, str):
        return cc + "".join(f"; {why}" for why in skipped)
    unsafe = _unsafe_math(cc)
    if unsafe is not None:
        return unsafe
    timeout_s = _timeout_s()
    if isinstance(timeout_s, str):
        return timeout_s
    refused = []
    for folder in _cache_dirs():
        why = _private_dir(folder)
        if why is None:
            break
        refused.append(why)
    else:
        return "no private directory to build the fused kernel in: " + "; ".join(refused)
    notes = [*skipped, *(f"refused {why}" for why in refused)]
    for why in refused:
        warnings.warn(f"fused decode kernel: refused {why}; using {folder} instead (a folder of "
                      "yours, mode 0700, that no one else can write or replace)", RuntimeWarning,
                      stacklevel=4)
    source = _SOURCE.read_bytes()
    failures, names = [], []
    for options in _OPTIONS:
        flags = (*_FLAGS, *options)
        names.append(_kernel_name(cc, flags, source))
        lib, error, outcome = _cached_or_built(cc, flags, folder, names[-1], timeout_s, notes, path)
        if lib is not None:
            lib.build_flags = " ".join(options) or "generic CPU"  # what fused_decode_build reports
            # A weaker build than the first is said with why the better ones were not used (a
            # CC wrapper adding -ffinite-math-only fails the native builds' self-test, say).
            lib.notes = [*(f"not used: {failure}" for failure in failures), *notes]
            return lib
        if outcome == "refused":  # not the compiler's doing: said as it is
            return (f"the fused kernel cannot be built or kept in {folder}: {error}"
                    + "".join(f"; before that: {failure}" for failure in failures))
        failures.append(f"[{' '.join(options) or 'generic'}] {error}")
        if outcome == "stop":
            break
    remembered = any(os.path.lexists(folder / f"{name}.failed") for name in names)
    return (f"{cc[0]} could not build {_SOURCE.name} in {folder}: " + "; ".join(failures)
            + (f" (compiler errors and failed self-tests are remembered for an hour; {_RETRY})"
               if remembered else "") + "".join(f"; {why}" for why in skipped))


def _kernel_name(cc: list[str], flags: tuple[str, ...], source: bytes) -> str:
    """The file name of a build: keyed by the source, the compiler, its flags and the CPU."""
    key = hashlib.sha256(b"\0".join([source, " ".join(cc).encode(), " ".join(flags).encode(),
                                     _cpu_fingerprint().encode()])).hexdigest()[:16]
    return f"fused_decode-{key}"


@functools.cache
def _library() -> ctypes.CDLL | str:
    """The compiled kernel, or a sentence saying why there is none (never raises)."""
    try:
        return _build_kernel()
    except OSError as exc:  # e.g. the source unreadable, a disk full while writing a record
        return f"the fused kernel could not be set up: {exc}"


def fused_decode_status() -> str | None:
    """``None`` when the fused kernel is ready to use, otherwise the reason it is not."""
    lib = _library()
    return lib if isinstance(lib, str) else None


def fused_decode_build() -> str:
    """How the kernel was built (``-march=native -fopenmp``: for this CPU, with threads), or
    why it was not."""
    lib = _library()
    if isinstance(lib, str):
        return f"not built: {lib}"
    return f"built with {lib.build_flags}" + "".join(f"; {note}" for note in lib.notes)


def reset_fused_decode() -> None:
    """Forget this process's kernel (or why there was none) and the failed builds remembered
    on disk (for an hour otherwise), so that the next call looks again: after fixing ``CC``,
    say. A kernel already
    loaded stays in memory; the next call loads a build of the current source, compiler and
    flags (building it if needed)."""
    _library.cache_clear()
    if platform.system() == "Windows":
        return
    for folder in _cache_dirs():
        try:
            st = os.lstat(folder)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == _uid():
            _remove(*folder.glob("fused_decode-*.failed"))


def _kv_strides(name: str, t: Tensor) -> tuple[int, int, int]:
    """(batch, group, time) strides of a K or V whose rows of HEAD_WIDTH floats are contiguous."""
    if t.stride(3) != 1:
        raise ValueError(
            f"{name} must keep each row of {HEAD_WIDTH} numbers together in memory (stride 1 along "
            f"the last axis), got strides {tuple(t.stride())} for shape {tuple(t.shape)}; any strides "
            "along B, g and T are fine (a slice cache[:, :, :T] of a preallocated cache is read in "
            f"place). The kernel does not copy the cache: pass {name}.contiguous() (a copy, every "
            "step) or use grouped_query_attention")
    return t.stride(0), t.stride(1), t.stride(2)


def _check_inputs(q: object, k: object, v: object) -> None:
    """The shape rules of grouped_query_attention, then what this kernel alone requires."""
    _check_gqa_inputs(q, k, v, None)  # tensors, 4-D, k and v alike, same B and dk, g divides h
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype != torch.float32:
            raise TypeError(f"{name} must be float32 (the kernel's only dtype), got {t.dtype}")
        if t.device.type != "cpu":
            raise ValueError(f"{name} must be on the CPU (the kernel is C), got device {t.device}")
    if q.shape[2] != 1:
        raise ValueError(f"q must hold one new token per sequence (B, h, 1, dk) for a decoding "
                         f"step, got Tq = {q.shape[2]} in shape {tuple(q.shape)}")
    if q.shape[3] != HEAD_WIDTH:
        raise ValueError(f"the kernel is built for head width {HEAD_WIDTH}, got {q.shape[3]}; "
                         "grouped_query_attention handles any width")
    if k.shape[2] == 0:
        raise ValueError("k and v hold no cached tokens (T = 0): there is nothing to attend to")
    _kv_strides("k", k)
    _kv_strides("v", v)


def fused_decode_attention(q: Tensor, k: Tensor, v: Tensor, *, num_threads: int | None = None) -> Tensor:
    """One decoding step of grouped-query attention, fused: one pass over the cache per 8 heads.

    Args:
        q: ``(B, h, 1, dk)`` float32, one new token's queries, ``dk = 64`` (copied if it is
            not contiguous: one row per head).
        k, v: ``(B, g, T, dk)`` float32, the cache, ``h % g == 0``; query head ``i`` reads
            key/value head ``i // (h // g)`` (blocked, as ``enable_gqa``). Read in place,
            never copied: any strides along ``B``, ``g`` and ``T`` (a slice
            ``cache[:, :, :T]`` of a preallocated ``(B, g, Tmax, dk)`` buffer, or a
            ``(B, T, g, dk)`` buffer transposed), but each row of ``dk`` numbers must be
            contiguous (stride 1 along the last axis), else a ValueError says so.
        num_threads: threads to split the keys over (default: ``torch.get_num_threads()``),
            at most :data:`MAX_THREADS` (256, or the CPU count where larger), else a ValueError.
            It runs at most one thread per CPU this process may use (:func:`usable_cpus`):
            more only wait for each other, and its self-test tried no more.

    Returns:
        ``(B, h, 1, dk)``, equal to ``F.scaled_dot_product_attention(q, k, v,
        enable_gqa=True)`` up to float32 rounding for finite inputs and rows of ``-inf``,
        whatever the thread count (NaN: see below). No mask: a
        decoding step's one new query may attend to every cached token; a key whose score is
        -inf gets weight 0 (a query whose every score is -inf gets 0, as in PyTorch).

    NaN spreads as in PyTorch: a NaN in one cached key (or value) of group ``j`` makes the
    whole output of every query head reading group ``j`` NaN, and leaves the other groups'
    heads finite; a NaN in query head ``i`` makes head ``i``'s output NaN, and only it. One
    difference: where every score of a head is NaN (a NaN in its query, or every cached key
    NaN) over a short cache (fewer than about 8 to 16 tokens on CPU), PyTorch returns 0 for
    that head, and the kernel NaN, as the course's step-by-step path
    (:func:`~course_utils.grouped_query_attention`) does; over longer caches all give NaN. A
    score of +inf gives NaN in all (inf - inf). The rule of the course's paths is the kernel's:
    every score NaN gives NaN, every score ``-inf`` gives 0 (see
    :mod:`course_utils.attention.mha`, whose default path is PyTorch's).

    Where the kernel cannot be built or loaded (:func:`fused_decode_status` says why), the
    result is computed with :func:`~course_utils.grouped_query_attention` instead, with a
    RuntimeWarning; it never raises for that reason.
    """
    _check_inputs(q, k, v)
    if num_threads is None:  # torch's count, whatever it is set to, capped below
        threads = torch.get_num_threads()
    else:  # only a count the caller passed is held to the limit
        threads = check_int(num_threads, "num_threads", minimum=1)
        if threads > MAX_THREADS:
            raise ValueError(
                f"num_threads must be at most {MAX_THREADS} (256, or this machine's CPU count where "
                f"that is larger), got {threads}: more threads than CPUs only wait for each other, "
                "and thousands of them can exhaust the process's thread limit, which OpenMP answers "
                "by ending the whole process")
    threads = min(threads, usable_cpus())  # more threads than CPUs only wait for each other
    tracking = [name for name, t in (("q", q), ("k", k), ("v", v)) if t.requires_grad]
    if torch.is_grad_enabled() and tracking:  # named: which one tracks gradients (battery 31)
        raise ValueError(f"{' and '.join(tracking)} require{'s' if len(tracking) == 1 else ''} grad, but the "
                         "fused kernel computes no gradients (it is for inference): call it under "
                         "torch.no_grad(), or use grouped_query_attention to train")
    lib = _library()
    if isinstance(lib, str):
        warnings.warn(f"the fused decode kernel is unavailable ({lib}); computing the same result "
                      "with course_utils.grouped_query_attention instead", RuntimeWarning, stacklevel=2)
        with torch.no_grad():
            return grouped_query_attention(q, k, v)[0]
    return _run(lib, q, k, v, threads)


def _run(lib: ctypes.CDLL, q: Tensor, k: Tensor, v: Tensor, threads: int, *,
         fill: float | None = None) -> Tensor:
    """Call the compiled kernel on checked inputs (k and v read in place, at their strides).
    ``fill``: what the output holds before the kernel writes it (the self-test's NaN shows a
    number the kernel never wrote; freed memory could hold the right answer by chance)."""
    q = q.detach().contiguous()  # (B, h, 1, dk): one row per head, a negligible copy if any
    k, v = k.detach(), v.detach()
    if q.numel() == 0:  # no sequences or no heads: nothing to compute
        return torch.empty_like(q)
    strides = ctypes.c_long * 3
    k_strides, v_strides = strides(*_kv_strides("k", k)), strides(*_kv_strides("v", v))
    B, h, _, _ = q.shape
    g, T = k.shape[1], k.shape[2]
    out = torch.empty_like(q) if fill is None else torch.full_like(q, fill)  # (B, h, 1, dk)
    status = lib.fused_decode(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                              B, h, g, T, k_strides, v_strides, threads)
    if status != 0:
        raise MemoryError("the fused decode kernel could not allocate its partial results")
    return out

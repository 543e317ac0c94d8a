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
loaded, so only a library that this user built, in a directory no one else can write, is
ever loaded):

- with the system's C compiler (``cc``, ``gcc`` or ``clang``; the ``CC`` environment variable
  picks another, e.g. ``CC="ccache gcc"``) for this CPU (``-march=native``), stopped after
  ``COURSE_UTILS_CC_TIMEOUT`` seconds (default 120);
- in a private directory: ``$XDG_CACHE_HOME/course_utils`` (``~/.cache/course_utils``), else
  ``course_utils-<uid>`` in the temp folder. It is created with mode 0700 (one of yours that
  others could only read is set to 0700); one that is a symbolic link, owned by another user,
  writable by group or others, or in a folder anyone may write without the sticky bit, is
  refused (a warning, or the status if both are, says which and why);
- into a temporary name in that directory, then moved into place with ``os.replace``; the
  sha256 of the library is recorded next to it (``<name>.so.sha256``, written atomically)
  and checked before every load. A library without a record, or whose bytes no longer match
  it (changed, truncated), is never loaded: it is built again;
- each build, and each cached build when it is loaded, must agree with
  ``F.scaled_dot_product_attention`` on a small self-test (a block of keys scoring -inf,
  scores far from 0, a strided cache); one that does not (``CC="gcc -ffast-math"``) is not
  used or cached as good.

A failed build is remembered (``<name>.failed`` in the same directory), so later processes
do not wait for the compiler again; :func:`reset_fused_decode` forgets it and tries again.
Where there is no kernel, :func:`fused_decode_status` says why and
:func:`fused_decode_attention` computes the same result with PyTorch
(:func:`~course_utils.grouped_query_attention`), with a warning.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import platform
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from .gqa import _check_gqa_inputs, grouped_query_attention

__all__ = ["HEAD_WIDTH", "fused_decode_attention", "fused_decode_build", "fused_decode_status",
           "reset_fused_decode"]

HEAD_WIDTH = 64  # the kernel's head width (DK in fused_decode.c)
_SOURCE = Path(__file__).with_name("fused_decode.c")
_FLAGS = ("-O3", "-shared", "-fPIC", "-Wno-psabi")
# Tried in order: for this CPU with threads (OpenMP), then without OpenMP (Apple's clang has
# none: the kernel then runs on one thread), then for a generic CPU of this architecture.
_OPTIONS = (("-march=native", "-fopenmp"), ("-march=native",), ())
TIMEOUT_ENV = "COURSE_UTILS_CC_TIMEOUT"  # seconds one compiler run may take
_DEFAULT_TIMEOUT_S = 120.0
_RETRY = "course_utils.fused_decode.reset_fused_decode() forgets them and tries again"
_SELF_TEST_TOLERANCE = 1e-4  # outputs are averages of values of size ~1; a bad build is off by far more


class _Untrusted(Exception):
    """A file in the kernel's directory that must not be loaded (the message says why)."""


def _uid() -> int:
    """This process's user (a function, so tests can pretend to be someone else)."""
    return os.getuid()


def _compiler() -> list[str] | str:
    """The C compiler as a command (``CC`` may hold several words, e.g. ``ccache gcc``), or a
    sentence saying why there is none."""
    raw = os.environ.get("CC", "")
    try:
        chosen = shlex.split(raw)
    except ValueError as exc:  # e.g. CC='gcc "': No closing quotation
        return (f"CC={raw!r} is not a command line the shell could split ({exc}); "
                "set CC to a compiler command such as CC=gcc or CC='ccache gcc'")
    if chosen:
        first = chosen[0]
        if os.sep in first or (os.altsep and os.altsep in first):
            if not os.path.lexists(first):
                return f"CC={raw}: no such file" + ("" if first == raw.strip() else f" ({first})")
            if not (os.path.isfile(first) and os.access(first, os.X_OK)):
                return f"CC={raw}: {first} is not an executable file"
            return [first, *chosen[1:]]
        path = shutil.which(first)
        if path is None:
            return f"CC={raw}: no program {first!r} found on PATH"
        return [path, *chosen[1:]]
    found = next((path for name in ("cc", "gcc", "clang") if (path := shutil.which(name))), None)
    if found is None:
        return "no C compiler found (looked for cc, gcc and clang on PATH; set CC to choose one)"
    return [found]


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
        return f"{TIMEOUT_ENV}={raw!r}: expected a number of seconds > 0 (default {_DEFAULT_TIMEOUT_S:g})"
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
    if not root:
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
        return f"{folder}: you cannot write to it (mode {stat.S_IMODE(st.st_mode):04o})"
    try:
        parent = os.stat(folder.parent)
        if parent.st_mode & 0o002 and not parent.st_mode & stat.S_ISVTX:
            return (f"{folder.parent} is writable by everyone without the sticky bit: others could "
                    f"replace {folder.name} in it, so it is refused")
        if stat.S_IMODE(st.st_mode) != 0o700:  # ours, and only we can write: make it private
            os.chmod(folder, 0o700)
    except OSError as exc:
        return f"{folder}: cannot check or set its permissions ({exc.strerror or exc})"
    return None


def _read_own_file(path: Path) -> bytes:
    """The bytes of ``path`` if it is a regular file of this user's, not a symbolic link;
    FileNotFoundError if there is none; _Untrusted otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:  # ELOOP: a symbolic link
        raise _Untrusted(f"{path}: cannot open it without following links ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as file:
        st = os.fstat(file.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise _Untrusted(f"{path} is not a regular file")
        if st.st_uid != _uid():
            raise _Untrusted(f"{path} is owned by {_owner(st.st_uid)}, not by you")
        return file.read()


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


def _recorded_sha256(library: Path) -> str:
    """The sha256 recorded when ``library`` was built (_Untrusted if there is no record)."""
    record = _record_path(library)
    try:
        text = _read_own_file(record).decode("ascii", errors="replace")
    except FileNotFoundError:
        raise _Untrusted(f"{library} has no recorded sha256 ({record.name}): this process's user "
                         "did not build it here, so it is not loaded") from None
    digest = text.split()[0] if text.split() else ""
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise _Untrusted(f"{record} does not hold a sha256")
    return digest


def _load_verified(library: Path, digest: str) -> ctypes.CDLL:
    """Load ``library`` only if its bytes hash to ``digest``: checked before dlopen, so a
    changed or truncated file is never mapped (a truncated one would crash with SIGBUS)."""
    actual = hashlib.sha256(_read_own_file(library)).hexdigest()
    if actual != digest:
        raise _Untrusted(f"{library} does not match its recorded sha256 (recorded {digest[:16]}..., "
                         f"found {actual[:16]}...: changed or truncated since it was built), so "
                         "it is not loaded")
    return _load(library)


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    pointer, long, strides = ctypes.c_void_p, ctypes.c_long, ctypes.POINTER(ctypes.c_long)
    try:
        lib.fused_decode.argtypes = [pointer] * 4 + [long] * 4 + [strides] * 2 + [ctypes.c_int]
    except AttributeError as exc:
        raise OSError(f"{path} has no fused_decode function: {exc}") from None
    lib.fused_decode.restype = ctypes.c_int
    return lib


def _self_test(lib: ctypes.CDLL) -> str | None:
    """None when the kernel agrees with F.scaled_dot_product_attention on small cases that a
    broken build gets wrong, else what it got wrong."""
    gen = torch.Generator().manual_seed(20240607)  # its own generator: the caller's seed is untouched
    randn = functools.partial(torch.randn, generator=gen, dtype=torch.float32)
    q = randn(1, 8, 1, HEAD_WIDTH).abs() + 0.1  # > 0: a key of -inf scores -inf
    k, v = randn(1, 2, 100, HEAD_WIDTH), randn(1, 2, 100, HEAD_WIDTH)
    k[:, :, :32] = -math.inf  # the first block scores -inf: the running max starts at -inf
    big_q = randn(2, 12, 1, HEAD_WIDTH)
    cache = randn(2, 4, 90, HEAD_WIDTH) * 40  # scores of several hundred
    big_v = randn(2, 4, 90, HEAD_WIDTH)
    cases = [("a first block of -inf scores", q, k, v, threads) for threads in (1, 3)]
    cases.append(("scores far from 0, a strided cache", big_q, cache[:, :, :70], big_v[:, :, :70], 2))
    for what, q, k, v, threads in cases:
        expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), enable_gqa=True)
        got = _run(lib, q, k, v, threads).double()
        error = (got - expected).abs().max().item()
        if not error <= _SELF_TEST_TOLERANCE:  # also NaN
            return (f"the built kernel disagrees with F.scaled_dot_product_attention on its self-test "
                    f"({what}, {threads} thread(s)): largest difference {error:.3g}, allowed "
                    f"{_SELF_TEST_TOLERANCE:g}; not used (a flag such as -ffast-math in CC breaks its "
                    "handling of -inf and NaN)")
    return None


def _compile(cc: list[str], flags: tuple[str, ...], folder: Path, name: str,
             timeout_s: float) -> tuple[Path | None, str, str]:
    """Run the compiler into a temporary file of ``folder``: ``(its path, "", "built")``, or
    ``(None, the error, "failed")`` (the compiler's verdict), ``(None, the error, "timeout")``
    or ``(None, the error, "not run")``."""
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
        # A session of its own: on a timeout the whole group goes, with any child holding the pipe.
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        _remove(tmp)
        return None, f"could not run {cc[0]}: {exc.strerror or exc}", "not run"
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        proc.communicate()
        _remove(tmp)
        return None, (f"{cc[0]} did not finish within {timeout_s:g} s and was stopped (set "
                      f"{TIMEOUT_ENV} to allow it longer)"), "timeout"
    text = output.decode("utf-8", errors="replace")  # compilers may print in any encoding
    if proc.returncode != 0:
        _remove(tmp)
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        return None, " | ".join(lines[-2:]) or f"exit status {proc.returncode}", "failed"
    try:
        os.chmod(tmp, 0o700)
    except OSError:
        pass
    return tmp, "", "built"


def _cached_or_built(cc: list[str], flags: tuple[str, ...], folder: Path, name: str,
                     timeout_s: float, notes: list[str]) -> tuple[ctypes.CDLL | None, str, bool]:
    """``(the kernel, "", False)`` from ``folder``, loading a verified cached build or building
    one; or ``(None, the error, whether to stop trying other flags)``."""
    library = folder / f"{name}.so"
    failed = folder / f"{name}.failed"
    if os.path.lexists(library):  # a cached build: verified, loaded, then tested like a new one
        try:
            lib = _load_verified(library, _recorded_sha256(library))
            error = _self_test(lib)
        except (_Untrusted, OSError) as exc:
            error = str(exc)
        if error is None:
            return lib, "", False
        notes.append(f"rebuilt {library.name}: {error}")
        warnings.warn(f"fused decode kernel: {error}; building it again", RuntimeWarning, stacklevel=5)
        _remove(library, _record_path(library))
    try:
        remembered = _read_own_file(failed).decode("utf-8", errors="replace")
    except FileNotFoundError:
        pass
    except _Untrusted as exc:
        return None, str(exc), False
    else:
        return None, f"{remembered} (remembered in {failed}; {_RETRY})", False
    built, error, outcome = _compile(cc, flags, folder, name, timeout_s)
    if built is None:
        if outcome != "not run":  # the compiler's verdict: remembered (a missing program is not)
            _write_atomically(failed, error.encode())
        return None, error, outcome == "timeout"  # one that hangs once would hang for every flag
    try:
        digest = hashlib.sha256(_read_own_file(built)).hexdigest()
        lib = _load_verified(built, digest)
        error = _self_test(lib)
    except (_Untrusted, OSError) as exc:
        error = f"could not load the kernel it built: {exc}"
    if error is not None:
        _remove(built)
        _write_atomically(failed, error.encode())
        return None, error, False
    # The record first: a process looking in between finds no library yet (and builds one),
    # never a new library without its record. os.replace is atomic: no half library is seen.
    _write_atomically(_record_path(library), f"{digest}  {library.name}\n".encode())
    os.replace(built, library)
    return lib, "", False


def _build_kernel() -> ctypes.CDLL | str:
    """The compiled, verified, self-tested kernel, or a sentence saying why there is none."""
    if platform.system() == "Windows":
        return "the fused kernel is built with a Unix C toolchain, not set up here on Windows"
    cc = _compiler()
    if isinstance(cc, str):
        return cc
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
    notes = [f"refused {why}" for why in refused]
    for why in refused:
        warnings.warn(f"fused decode kernel: refused {why}; using {folder} instead", RuntimeWarning,
                      stacklevel=4)
    source = _SOURCE.read_bytes()
    failures = []
    for options in _OPTIONS:
        flags = (*_FLAGS, *options)
        lib, error, stop = _cached_or_built(cc, flags, folder, _kernel_name(cc, flags, source), timeout_s,
                                            notes)
        if lib is not None:
            lib.build_flags = " ".join(options) or "generic CPU"  # what fused_decode_build reports
            lib.notes = notes
            return lib
        failures.append(f"[{' '.join(options) or 'generic'}] {error}")
        if stop:
            break
    return (f"{cc[0]} could not build {_SOURCE.name} in {folder}: " + "; ".join(failures)
            + f" (failures are remembered; {_RETRY})")


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
    on disk, so that the next call looks again: after fixing ``CC``, say. A kernel already
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
        num_threads: threads to split the keys over (default: ``torch.get_num_threads()``).

    Returns:
        ``(B, h, 1, dk)``, equal to ``F.scaled_dot_product_attention(q, k, v,
        enable_gqa=True)`` up to float32 rounding, whatever the thread count. No mask: a
        decoding step's one new query may attend to every cached token; a key whose score is
        -inf gets weight 0 (a query whose every score is -inf gets 0, as in PyTorch).

    NaN spreads as in PyTorch: a NaN in one cached key (or value) of group ``j`` makes the
    whole output of every query head reading group ``j`` NaN, and leaves the other groups'
    heads finite; a NaN in query head ``i`` makes head ``i``'s output NaN, and only it.

    Where the kernel cannot be built or loaded (:func:`fused_decode_status` says why), the
    result is computed with :func:`~course_utils.grouped_query_attention` instead, with a
    RuntimeWarning; it never raises for that reason.
    """
    _check_inputs(q, k, v)
    threads = torch.get_num_threads() if num_threads is None else num_threads
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"num_threads must be a positive int, got {num_threads!r}")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise ValueError("the fused kernel computes no gradients (it is for inference): call it "
                         "under torch.no_grad(), or use grouped_query_attention to train")
    lib = _library()
    if isinstance(lib, str):
        warnings.warn(f"the fused decode kernel is unavailable ({lib}); computing the same result "
                      "with course_utils.grouped_query_attention instead", RuntimeWarning, stacklevel=2)
        with torch.no_grad():
            return grouped_query_attention(q, k, v)[0]
    return _run(lib, q, k, v, threads)


def _run(lib: ctypes.CDLL, q: Tensor, k: Tensor, v: Tensor, threads: int) -> Tensor:
    """Call the compiled kernel on checked inputs (k and v read in place, at their strides)."""
    q = q.detach().contiguous()  # (B, h, 1, dk): one row per head, a negligible copy if any
    k, v = k.detach(), v.detach()
    if q.numel() == 0:  # no sequences or no heads: nothing to compute
        return torch.empty_like(q)
    strides = ctypes.c_long * 3
    k_strides, v_strides = strides(*_kv_strides("k", k)), strides(*_kv_strides("v", v))
    B, h, _, _ = q.shape
    g, T = k.shape[1], k.shape[2]
    out = torch.empty_like(q)  # (B, h, 1, dk)
    status = lib.fused_decode(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                              B, h, g, T, k_strides, v_strides, threads)
    if status != 0:
        raise MemoryError("the fused decode kernel could not allocate its partial results")
    return out

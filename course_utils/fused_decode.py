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

It is built on first use with the system's C compiler (``cc``, ``gcc`` or ``clang``; the
``CC`` environment variable picks another, e.g. ``CC="ccache gcc"``) for this CPU
(``-march=native``), into a per-user cache directory. Where that is not possible,
:func:`fused_decode_status` says why and :func:`grouped_query_attention` computes the same
result in PyTorch.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch
from torch import Tensor

from .gqa import _check_gqa_inputs

__all__ = ["HEAD_WIDTH", "fused_decode_attention", "fused_decode_build", "fused_decode_status"]

HEAD_WIDTH = 64  # the kernel's head width (DK in fused_decode.c)
_SOURCE = Path(__file__).with_name("fused_decode.c")
_FLAGS = ("-O3", "-shared", "-fPIC", "-Wno-psabi")
# Tried in order: for this CPU with threads (OpenMP), then without OpenMP (Apple's clang has
# none: the kernel then runs on one thread), then for a generic CPU of this architecture.
_OPTIONS = (("-march=native", "-fopenmp"), ("-march=native",), ())


def _compiler() -> list[str] | None:
    """The C compiler as a command (``CC`` may hold several words, e.g. ``ccache gcc``)."""
    chosen = shlex.split(os.environ.get("CC", ""))
    if chosen:
        path = shutil.which(chosen[0])
        return None if path is None else [path, *chosen[1:]]
    return next(([path] for name in ("cc", "gcc", "clang") if (path := shutil.which(name))), None)


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
    """Where built kernels go: the user's cache, else a folder of this user's in the temp dir."""
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    user = getattr(os, "getuid", lambda: "user")()
    return [Path(root) / "course_utils", Path(tempfile.gettempdir()) / f"course_utils-{user}"]


def _build(cc: list[str], flags: tuple[str, ...], target: Path) -> str | None:
    """Compile the kernel into ``target`` (atomically); None on success, else the error.
    A failure is remembered next to ``target``, so later processes do not retry it."""
    failed = target.with_suffix(".failed")
    if failed.exists():
        return f"{failed.read_text()} (remembered in {failed}; delete it to try again)"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = Path(tmp) / target.name
        run = subprocess.run([*cc, *flags, "-o", str(built), str(_SOURCE), "-lm"],
                             capture_output=True, text=True, timeout=120)
        if run.returncode == 0:
            os.replace(built, target)  # atomic: a parallel build never loads half a file
            return None
    error = " | ".join((run.stderr or run.stdout).strip().splitlines()[-2:]) or f"exit {run.returncode}"
    failed.write_text(error)
    return error


def _built(cc: list[str], flags: tuple[str, ...], name: str) -> tuple[Path | None, str]:
    """``(path of the built kernel, "")``, building it if needed, or ``(None, the error)``."""
    errors = []
    for folder in _cache_dirs():
        target = folder / name
        if target.exists():
            return target, ""
        try:
            error = _build(cc, flags, target)
        except (OSError, subprocess.SubprocessError) as exc:  # e.g. a folder we cannot write
            errors.append(f"{folder}: {exc}")
            continue
        return (target, "") if error is None else (None, error)  # the compiler's verdict
    return None, "; ".join(errors)


@functools.cache
def _library() -> ctypes.CDLL | str:
    """The compiled kernel, or a sentence saying why there is none."""
    if platform.system() == "Windows":
        return "the fused kernel is built with a Unix C toolchain, not set up here on Windows"
    cc = _compiler()
    if cc is None:
        return "no C compiler found (looked for cc, gcc and clang; set CC to choose one)"
    failures = []
    for options in _OPTIONS:
        flags = (*_FLAGS, *options)
        key = hashlib.sha256(b"\0".join([_SOURCE.read_bytes(), " ".join(cc).encode(),
                                         " ".join(flags).encode(),
                                         _cpu_fingerprint().encode()])).hexdigest()[:16]
        target, error = _built(cc, flags, f"fused_decode-{key}.so")
        if target is not None:
            break
        failures.append(f"[{' '.join(options) or 'generic'}] {error}")
    else:
        return f"{cc[0]} could not build {_SOURCE.name}: " + "; ".join(failures)
    try:
        lib = _load(target)
    except OSError as exc:
        return f"could not load the built kernel {target}: {exc}"
    lib.build_flags = " ".join(options) or "generic CPU"  # what fused_decode_build reports
    return lib


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    pointer, long, strides = ctypes.c_void_p, ctypes.c_long, ctypes.POINTER(ctypes.c_long)
    lib.fused_decode.argtypes = [pointer] * 4 + [long] * 4 + [strides] * 2 + [ctypes.c_int]
    lib.fused_decode.restype = ctypes.c_int
    return lib


def fused_decode_status() -> str | None:
    """``None`` when the fused kernel is ready to use, otherwise the reason it is not."""
    lib = _library()
    return lib if isinstance(lib, str) else None


def fused_decode_build() -> str:
    """How the kernel was built (``-march=native -fopenmp``: for this CPU, with threads), or
    why it was not."""
    lib = _library()
    return f"not built: {lib}" if isinstance(lib, str) else f"built with {lib.build_flags}"


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
        raise RuntimeError(f"the fused decode kernel is unavailable: {lib}. "
                           "course_utils.grouped_query_attention computes the same result.")
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

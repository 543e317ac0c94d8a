"""One decoding step of grouped-query attention as a fused C kernel: one pass over the cache.

Why it exists: at small ``g`` the course's :func:`~course_utils.grouped_query_attention`
stops shrinking with its cache (``python -m course_utils.bench gqa --stages``): a matrix
product of ``h/g`` query rows by a long K or V runs below memory speed, and the softmax
costs the same at every ``g``. The kernel in ``fused_decode.c`` reads each group's keys and
values once, for all the group's query heads, in blocks: scores, a softmax kept running
across blocks (the online softmax of FlashAttention) and the weighted sum of values, with
the next block requested from memory while the current one is computed. The keys are split
into one range per thread and the partial results merged (flash decoding). Its time is then
close to the time to read the cache, which is what GQA shrinks.

It is built on first use with the system's C compiler (``cc``, ``gcc`` or ``clang``; the
``CC`` environment variable picks another) for this CPU (``-march=native``), into a per-user
cache directory. Where that is not possible, :func:`fused_decode_status` says why and
:func:`grouped_query_attention` computes the same result in PyTorch.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch
from torch import Tensor

__all__ = ["HEAD_WIDTH", "fused_decode_attention", "fused_decode_build", "fused_decode_status"]

HEAD_WIDTH = 64  # the kernel's head width (DK in fused_decode.c)
_SOURCE = Path(__file__).with_name("fused_decode.c")
_FLAGS = ("-O3", "-shared", "-fPIC", "-Wno-psabi")
# Tried in order: for this CPU with threads (OpenMP), then without OpenMP (Apple's clang has
# none: the kernel then runs on one thread), then for a generic CPU of this architecture.
_OPTIONS = (("-march=native", "-fopenmp"), ("-march=native",), ())


def _compiler() -> str | None:
    chosen = os.environ.get("CC")
    if chosen:
        return shutil.which(chosen)
    return next((path for name in ("cc", "gcc", "clang") if (path := shutil.which(name))), None)


def _cpu_fingerprint() -> str:
    """What -march=native compiles for: the CPU's model and feature flags where Linux says."""
    try:
        info = Path("/proc/cpuinfo").read_text()
        lines = [line for line in info.splitlines() if line.startswith(("model name", "flags"))]
        return "\n".join(sorted(set(lines)))
    except OSError:
        return f"{platform.machine()} {platform.processor()}"


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "course_utils"


@functools.cache
def _library() -> ctypes.CDLL | str:
    """The compiled kernel, or a sentence saying why there is none."""
    if platform.system() == "Windows":
        return "the fused kernel is built with a Unix C toolchain, not set up here on Windows"
    cc = _compiler()
    if cc is None:
        return "no C compiler found (looked for cc, gcc and clang; set CC to choose one)"
    source = _SOURCE.read_bytes()
    failures = []
    for options in _OPTIONS:
        flags = (*_FLAGS, *options)
        key = hashlib.sha256(b"\0".join([source, cc.encode(), " ".join(flags).encode(),
                                         _cpu_fingerprint().encode()])).hexdigest()[:16]
        target = _cache_dir() / f"fused_decode-{key}.so"
        if target.exists():
            break
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
                built = Path(tmp) / target.name
                run = subprocess.run([cc, *flags, "-o", str(built), str(_SOURCE), "-lm"],
                                     capture_output=True, text=True, timeout=120)
                if run.returncode == 0:
                    os.replace(built, target)  # atomic: a parallel build never loads half a file
                    break
                tail = (run.stderr or run.stdout).strip().splitlines()[-2:]
                failures.append(f"[{' '.join(options) or 'generic'}] " + " | ".join(tail))
        except (OSError, subprocess.SubprocessError) as exc:
            failures.append(f"[{' '.join(options) or 'generic'}] {exc}")
    else:
        return f"{cc} could not build {_SOURCE.name}: " + "; ".join(failures)
    try:
        lib = ctypes.CDLL(str(target))
    except OSError as exc:
        return f"could not load the built kernel {target}: {exc}"
    pointer, long = ctypes.c_void_p, ctypes.c_long
    lib.fused_decode.argtypes = [pointer] * 4 + [long] * 4 + [ctypes.c_int]
    lib.fused_decode.restype = ctypes.c_int
    lib.build_flags = " ".join(options) or "generic CPU"  # what fused_decode_build reports
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


def _check_inputs(q: object, k: object, v: object) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.float32:
            raise TypeError(f"{name} must be float32 (the kernel's only dtype), got {t.dtype}")
        if t.device.type != "cpu":
            raise ValueError(f"{name} must be on the CPU (the kernel is C), got device {t.device}")
        if t.ndim != 4:
            raise ValueError(f"{name} must be 4-D, got shape {tuple(t.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape (B, g, T, dk), got k {tuple(k.shape)} "
                         f"and v {tuple(v.shape)}")
    (B, h, Tq, dk), (Bk, g, T, dk_k) = q.shape, k.shape
    if Tq != 1:
        raise ValueError(f"q must hold one new token per sequence (B, h, 1, dk) for a decoding "
                         f"step, got Tq = {Tq} in shape {tuple(q.shape)}")
    if dk != HEAD_WIDTH or dk_k != HEAD_WIDTH:
        raise ValueError(f"the kernel is built for head width {HEAD_WIDTH}, got q's {dk} and k's "
                         f"{dk_k}; grouped_query_attention handles any width")
    if Bk != B:
        raise ValueError(f"q and k must have the same batch size, got {B} and {Bk}")
    if g == 0 or h % g != 0:
        raise ValueError(f"the number of query heads ({h}) must be a multiple of the number of "
                         f"key/value heads ({g})")
    if T == 0:
        raise ValueError("k and v hold no cached tokens (T = 0): there is nothing to attend to")


def fused_decode_attention(q: Tensor, k: Tensor, v: Tensor, *, num_threads: int | None = None) -> Tensor:
    """One decoding step of grouped-query attention, fused: each group's K and V read once.

    Args:
        q: ``(B, h, 1, dk)`` float32, one new token's queries, ``dk = 64``.
        k, v: ``(B, g, T, dk)`` float32, the cache, ``h % g == 0``; query head ``i`` reads
            key/value head ``i // (h // g)`` (blocked, as ``enable_gqa``).
        num_threads: threads to split the keys over (default: ``torch.get_num_threads()``).

    Returns:
        ``(B, h, 1, dk)``, equal to ``F.scaled_dot_product_attention(q, k, v,
        enable_gqa=True)`` up to float32 rounding. No mask: a decoding step's one new query
        may attend to every cached token.
    """
    _check_inputs(q, k, v)
    lib = _library()
    if isinstance(lib, str):
        raise RuntimeError(f"the fused decode kernel is unavailable: {lib}. "
                           "course_utils.grouped_query_attention computes the same result.")
    threads = torch.get_num_threads() if num_threads is None else num_threads
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"num_threads must be a positive int, got {num_threads!r}")
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    if q.numel() == 0:  # no sequences or no heads: nothing to compute
        return torch.empty_like(q)
    B, h, _, _ = q.shape
    g, T = k.shape[1], k.shape[2]
    out = torch.empty_like(q)  # (B, h, 1, dk)
    status = lib.fused_decode(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                              B, h, g, T, threads)
    if status != 0:
        raise MemoryError("the fused decode kernel could not allocate its partial results")
    return out

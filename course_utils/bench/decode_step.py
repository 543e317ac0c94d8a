"""A whole decoding step (weights and KV cache), and the machine's read-only bandwidth.

``bench gqa``'s first table times attention alone. A model's decoding step also reads every
weight matrix once, and grouped-query attention does not shrink the feed-forward layer or the
query and output projections. This module gives the yardstick and the step:

* :func:`last_level_cache_bytes` finds the CPU's last-level cache (``COURSE_UTILS_LLC_MIB``
  if set, then Linux's ``/sys/devices/system/cpu/cpu0/cache``, then ``lscpu``, then a stated
  guess), and :func:`flush_bytes` sizes a buffer that evicts it: a multiple of it, capped at
  :data:`FLUSH_CAP_BYTES` (256 MiB), so that a server reporting a whole socket's 300 MiB L3
  does not make every benchmark allocate gigabytes. The cap's cost: where the multiple is cut,
  the flush may not evict everything (see :func:`flush_note`).
* :func:`make_read_probe` is the read-only yardstick: the faster, raced in the same run, of
  ``read_sum`` from ``fused_decode.c`` (a compiled, multi-threaded sum) and ``torch.sum``, over
  random float32 numbers (bytes read per second, nothing written). Neither is the faster on
  every CPU, and a slow yardstick makes every share of it read high. A step that must read
  ``N`` bytes cannot take much less than ``N / read bandwidth``; :func:`read_bandwidth` times
  it alone.
* :class:`SmallDecoder` is a decoder stack of random weights (pre-LayerNorm blocks: fused Q/K/V
  projection, attention over a preallocated cache, output projection, a 4 d GELU feed-forward
  layer), with no embedding or unembedding. :meth:`SmallDecoder.step` feeds one token per
  sequence: its key and value go into the slot after the ``context`` cached ones, and its
  query attends over all ``context + 1``. Repeated steps overwrite that slot, so every timed
  step sees the same context.
* :func:`bench_whole_step` times MHA and GQA steps side by side and compares each speed-up
  with its byte bound: ``bytes(g = h) / bytes(g)``, what the speed-up would be if every byte
  were read at the same rate.

:class:`StepRow` and :class:`WholeStep` check their fields when made (``check_record``): sizes,
counts and thread counts >= 1, times divided by > 0, and a WholeStep's rows consistent with one
another (see :meth:`WholeStep.__post_init__`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import platform
import re
import shutil
import stat
import statistics
import subprocess
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from ..attention.fused_decode import HEAD_WIDTH, fused_decode_attention, fused_decode_status
from ..attention.gqa import grouped_query_attention, kv_cache_bytes
from ..attention.validation import (
    check_callable,
    check_choice,
    check_distinct,
    check_finite,
    check_fits_in_memory,
    check_flag,
    check_float_dtype,
    check_holds_values,
    check_int,
    check_int_list,
    check_record,
    check_tensor,
    check_thread_count,
    freeze_fields,
    items_of,
)
from ..attention.validation import shown as shown_value
from ..env import check_seed, torch_threads
from ..paths import check_path
from .timing import check_clock_advanced, check_round_counts, clock_elapsed, interleaved_samples

__all__ = [
    "FALLBACK_LLC_BYTES",
    "FLUSH_CAP_BYTES",
    "MAX_FLUSH_MULTIPLE",
    "LLC_ENV",
    "last_level_cache_bytes",
    "flush_bytes",
    "flush_note",
    "machine_name",
    "wait_policy",
    "run_conditions",
    "clock_for",
    "make_read_probe",
    "PROBE_RACE_READS",
    "read_bandwidth",
    "random_buffer",
    "release_freed_memory",
    "SmallDecoder",
    "check_decoder_fits",
    "decoder_bytes",
    "StepRow",
    "WholeStep",
    "bench_whole_step",
    "format_whole_step",
]

MiB = 2**20
SCATTER = 1.5  # a median repeat this many times the best one: the run was disturbed
#: Used when neither Linux's sysfs nor ``lscpu`` names a last-level cache: larger than most
#: desktop and laptop CPUs' L3 (8-36 MiB), so a buffer sized from it still evicts theirs.
FALLBACK_LLC_BYTES = 64 * MiB
#: The most one flush (or read-probe) buffer takes. Four times the last-level cache evicts it
#: reliably; but servers report up to a whole socket's L3 (300 MiB and more), and four times
#: that, twice over (flush and probe), would put a lesson or a test past Binder's 2 GB.
FLUSH_CAP_BYTES = 256 * MiB
#: The largest multiple of the last-level cache a flush may be asked for: 4 evicts it; 64 times
#: even a 64 MiB cache is already 4 GiB, far past the cap, so a larger one is a slip.
MAX_FLUSH_MULTIPLE = 64
#: Environment variable that overrides the last-level cache found (in MiB): to fake a large
#: cache in a test, or to set the real share of a virtual machine's cache.
LLC_ENV = "COURSE_UTILS_LLC_MIB"
#: The largest :data:`LLC_ENV` taken: 1 TiB in MiB. The largest CPU caches are a few GiB (AMD's
#: 3D V-Cache EPYCs: 1152 MiB a socket), so a larger figure is a slip (a byte count typed as MiB).
MAX_LLC_MIB = 2**20
_SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def _parse_size(text: str) -> int | None:
    """``'32768K'``, ``'32 MiB'``, ``'33554432'`` -> bytes; None if it does not parse (or holds
    more digits than a float: ``int(inf)`` would raise OverflowError)."""
    match = re.fullmatch(r"\s*([\d.]+)\s*([KMG]?)(?:i?B)?\s*(?:\(.*\))?\s*", text, re.IGNORECASE)
    if not match:
        return None
    size = float(match.group(1)) * _UNITS[match.group(2).upper()]
    return int(size) if math.isfinite(size) else None


def _read_attribute(path: Path, limit: int = 4096) -> str:
    """The text of one small sysfs attribute file. It is opened without blocking and read only
    if it is a regular file (a FIFO or a device put where ``size`` should be would otherwise
    block the reader for ever, or stream without end); at most ``limit`` bytes are read.
    Anything else raises ``OSError``, which :func:`_from_sysfs` treats as "not reported"."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        return os.read(fd, limit).decode("utf-8", errors="replace")
    finally:
        os.close(fd)


def _from_sysfs(root: Path) -> int | None:
    best: tuple[int, int] | None = None  # (level, bytes)
    for index in sorted(root.glob("index*")):
        try:
            level = int(_read_attribute(index / "level"))
            kind = _read_attribute(index / "type").strip()
            size = _parse_size(_read_attribute(index / "size"))
        except (OSError, ValueError):
            continue
        if kind in ("Unified", "Data") and size and (best is None or level > best[0]):
            best = (level, size)
    return None if best is None else best[1]


def _from_lscpu() -> int | None:
    if shutil.which("lscpu") is None:
        return None
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    sizes = {}
    for line in text.splitlines():
        match = re.match(r"\s*L(\d)\w* cache:\s*(.+)", line)
        if match and (size := _parse_size(match.group(2).split(" (")[0])):
            sizes[int(match.group(1))] = size  # the total over instances, as lscpu prints it
    return sizes[max(sizes)] if sizes else None


def last_level_cache_bytes(sysfs: Path = _SYSFS_CACHE) -> tuple[int, str]:
    """``(bytes, where the figure came from)`` for the CPU's largest cache level
    (``COURSE_UTILS_LLC_MIB``, a whole number of MiB in 1..:data:`MAX_LLC_MIB`, overrides what
    the system reports; any other value is a ValueError naming it).
    ``sysfs`` is a folder laid out like Linux's ``/sys/devices/system/cpu/cpu0/cache``; a
    ``level``, ``type`` or ``size`` file there that is not a regular file (a FIFO, a device) is
    skipped, never read, so the call cannot hang on it. A size the system reports (sysfs, then
    lscpu) over :data:`MAX_LLC_MIB` MiB, the range ``COURSE_UTILS_LLC_MIB`` is held to (a corrupt
    ``size`` file: ``99999...G``), is treated as not reported: the next source is asked, and the
    source returned says what was ignored and why."""
    if not isinstance(sysfs, (str, os.PathLike)):
        raise TypeError(f"sysfs must be a path to a folder like {_SYSFS_CACHE}, got "
                        f"{type(sysfs).__name__} {shown_value(sysfs, 80)}")
    check_path(sysfs, "sysfs", f"a folder like {_SYSFS_CACHE}")
    sysfs = Path(sysfs)
    if (text := os.environ.get(LLC_ENV)) is not None:
        digits = text.strip()  # ASCII digits: "²" passes isdigit but not int(), 5000 digits neither
        mib = int(digits) if digits.isascii() and digits.isdigit() and len(digits) <= 12 else 0
        if not 1 <= mib <= MAX_LLC_MIB:
            raise ValueError(f"{LLC_ENV} must be a whole number of MiB in 1..{MAX_LLC_MIB} (1 TiB), "
                             f"got {shown_value(text, 60)}")
        return mib * MiB, LLC_ENV
    ignored = []  # sizes out of LLC_ENV's range, each said with the source taken instead
    for read, where in ((lambda: _from_sysfs(sysfs), str(sysfs)), (_from_lscpu, "lscpu")):
        size = read()
        if size is not None and size > MAX_LLC_MIB * MiB:
            ignored.append(f"{where} reported {size / MiB:.3g} MiB, over the {MAX_LLC_MIB} MiB (1 TiB) "
                           f"{LLC_ENV} may say: ignored")
        elif size is not None:
            return size, where + _noted(ignored)
    return FALLBACK_LLC_BYTES, f"not found; assumed {FALLBACK_LLC_BYTES // MiB} MiB" + _noted(ignored)


def _noted(ignored: list[str]) -> str:
    """`` (what was ignored)`` for a source's name, or nothing."""
    return f" ({'; '.join(ignored)})" if ignored else ""


def flush_bytes(multiple: int = 4, *, cap: int = FLUSH_CAP_BYTES) -> int:
    """Bytes of a buffer that evicts the last-level cache when read: ``multiple`` times it (a
    cache keeps some lines through one pass, so once its size is not enough), but at most
    ``cap`` (:data:`FLUSH_CAP_BYTES`; see :func:`flush_note` for what the cap costs)."""
    multiple = check_int(multiple, "multiple", minimum=1, maximum=MAX_FLUSH_MULTIPLE)
    return min(multiple * last_level_cache_bytes()[0], check_int(cap, "cap", minimum=1))


def flush_note(size: int, multiple: int = 4) -> str | None:
    """None when a flush of ``size`` bytes is ``multiple`` times the last-level cache; else a
    sentence on what the cap costs. A flush read again and again stays in a cache larger than
    itself and then evicts little, so data a step read shortly before may still sit in the
    cache beside it: a step whose data (and the flush) fit in the cache can run partly warm,
    faster than memory allows, and its speed-up and share read high."""
    size = check_int(size, "size", minimum=1)
    multiple = check_int(multiple, "multiple", minimum=1, maximum=MAX_FLUSH_MULTIPLE)
    llc, _ = last_level_cache_bytes()
    if size >= multiple * llc:
        return None
    room = max(0, llc - size)
    return (f"flush capped at {size / MiB:.3g} MiB, under {multiple}x the {llc / MiB:.3g} MiB last-level "
            f"cache: steps whose data fit in the {room / MiB:.3g} MiB the flush leaves (small g, short "
            "contexts) may run partly from the cache, so their speed-ups and shares can read high")


def machine_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else :func:`platform.processor`) and
    how many CPUs this process may use."""
    name = ""
    try:
        with open("/proc/cpuinfo") as info:
            name = next((line.split(":", 1)[1].strip() for line in info
                         if line.lower().startswith(("model name", "hardware"))), "")
    except OSError:
        pass
    name = name or platform.processor() or platform.machine() or "unknown CPU"
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{name}, {cpus} CPUs"


def wait_policy() -> str:
    """How OpenMP's idle threads wait, as this process was started (libgomp reads
    ``OMP_WAIT_POLICY`` and ``GOMP_SPINCOUNT`` once, at start-up): by default they spin a while
    before sleeping, which on a busy machine can make a multi-threaded step several times slower."""
    policy = os.environ.get("OMP_WAIT_POLICY", "").strip().lower()
    spin = os.environ.get("GOMP_SPINCOUNT")
    text = f"OMP_WAIT_POLICY={policy}" if policy else "OpenMP wait: default (spin, then sleep)"
    return text + (f", GOMP_SPINCOUNT={spin}" if spin else "")


def run_conditions(threads: int) -> str:
    """What a share of the read-only bandwidth depends on, in one line: threads (and the clock
    that times them, :func:`clock_for`), the OpenMP wait policy and the machine."""
    threads = check_thread_count(threads, "threads")  # a plain int (a subclass's repr may raise)
    clock = "CPU time of the thread" if threads == 1 else "wall clock"
    return f"{threads} thread{'s' if threads != 1 else ''} ({clock}); {wait_policy()}; {machine_name()}"


def clock_for(threads: int) -> Callable[[], float]:
    """The clock a benchmark on ``threads`` threads reads: on one thread, the time that thread
    ran (:func:`time.thread_time`: moments when other programs held the CPU do not count, the
    memory traffic they cause still does); on several, the wall clock (another thread's work
    is not this thread's time)."""
    check_thread_count(threads, "threads")
    return time.thread_time if threads == 1 else time.perf_counter


def release_freed_memory() -> bool:
    """Hand the heap's free memory back to the operating system (glibc's ``malloc_trim``);
    False where there is no glibc. :func:`~course_utils.bench.gqa_speed.steady_allocator` keeps freed
    blocks for reuse while a benchmark runs; once it is over, they would only stay in the
    process's resident memory."""
    try:
        return bool(ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0))
    except (OSError, AttributeError, TypeError):
        return False


def random_buffer(num_bytes: int, seed: int = 0) -> Tensor:
    """float32 random numbers filling ``num_bytes`` (every page written now, not when timed):
    ``num_bytes // 4`` numbers, so at least 4 bytes, and no more than the machine's memory."""
    num_bytes = check_int(num_bytes, "num_bytes", minimum=4)
    check_fits_in_memory(num_bytes, "num_bytes", "a float32 buffer")
    seed = check_seed(seed)  # a Python int: torch.Generator.manual_seed takes no NumPy int
    return torch.rand(num_bytes // 4, generator=torch.Generator().manual_seed(seed))


def _compiled_read_sum() -> tuple[Callable[[int, int, int], float] | None, str]:
    """``read_sum`` of the verified fused-kernel library (``fused_decode.c``) and its build
    flags, or ``(None, why not)``."""
    from ..attention import fused_decode

    lib = fused_decode._library()  # the one verified, self-tested build (never raises)
    if isinstance(lib, str):
        return None, f"no compiled build ({lib})"
    try:
        fn = lib.read_sum
    except AttributeError:
        return None, "the compiled build has no read_sum"
    fn.restype, fn.argtypes = ctypes.c_double, (ctypes.c_void_p, ctypes.c_long, ctypes.c_int)
    return fn, getattr(lib, "build_flags", "")


#: Reads of each candidate probe in :func:`make_read_probe`'s race (alternating, best kept).
PROBE_RACE_READS = 3


def _torch_sum_on(buffer: Tensor, threads: int) -> Callable[[], object]:
    """``buffer.sum`` on ``threads`` threads, whatever torch's thread count is when it is called."""
    def torch_sum() -> object:
        if torch.get_num_threads() == threads:
            return buffer.sum()
        with torch_threads(threads):
            return buffer.sum()
    return torch_sum


def _race(probes: dict[str, Callable[[], object]], clock: Callable[[], float],
          reads: int = PROBE_RACE_READS) -> dict[str, float]:
    """Each probe's fastest of ``reads`` timed calls (seconds), the probes taking turns, the
    order reversed every round, so that neither always runs first after the other. The
    clock's readings are checked as :func:`~course_utils.bench.timing.interleaved_samples`
    checks them (finite, never decreasing, not all 0 s)."""
    seconds: dict[str, list[float]] = {name: [] for name in probes}
    order = list(probes)
    for _ in range(reads):
        for name in order:
            start = clock()
            probes[name]()
            seconds[name].append(clock_elapsed(start, clock(), f"a read by {name}"))
        order.reverse()
    check_clock_advanced(seconds.values(), "reads of the race")
    return {name: min(s) for name, s in seconds.items()}


def _check_probe_inputs(buffer: object, clock: object) -> None:
    """What :func:`make_read_probe` reads and times with: a tensor holding at least one number
    (an empty one reads in no time, and its rate would be "0.0 GB/s"), and a clock of no
    arguments or None."""
    if not isinstance(buffer, Tensor):
        raise TypeError(f"buffer must be a torch.Tensor (contiguous float32 on the CPU, e.g. from "
                        f"random_buffer(num_bytes)), got {type(buffer).__name__} {shown_value(buffer, 60)}")
    check_holds_values(buffer, "buffer")  # a meta buffer "reads" in no time: a meaningless rate
    if buffer.numel() == 0:
        raise ValueError(f"buffer must hold at least one number to read, got shape {tuple(buffer.shape)}")
    if clock is not None:
        check_callable(clock, "clock", "None or a function of no arguments returning seconds "
                       "(e.g. time.perf_counter)", nargs=0)


def make_read_probe(buffer: Tensor, threads: int | None = None, *,
                    clock: Callable[[], float] | None = None) -> tuple[Callable[[], object], str]:
    """The read-only yardstick over ``buffer`` (contiguous float32 on the CPU): a function that
    reads every byte once and writes nothing (it keeps ``buffer`` alive, so it may be called after
    the caller dropped its own reference), and a phrase naming it.

    Two sums race, each read :data:`PROBE_RACE_READS` times in turn over ``buffer`` (a buffer
    several times the last-level cache, read front to back, starts cold each time) and timed
    by ``clock`` (default :func:`clock_for` ``(threads)``): ``read_sum`` from ``fused_decode.c``
    (compiled as the kernel is, split over ``threads``, default ``torch.get_num_threads()``, else
    an int in 1..:data:`~course_utils.attention.validation.MAX_THREADS` as everywhere in the course,
    and no more than the CPU count are used;
    its sum checked once against ``torch.sum`` to 1e-4 relative), and ``torch.sum`` on as many
    threads. The faster is the yardstick, and the phrase names it with both rates: neither is
    the faster everywhere (``torch.sum`` read about a fifth slower than the compiled sum on some
    CPUs, and 11-18% faster on an AVX-512 AMD EPYC), and a slow yardstick makes every share of
    it read high. Where the compiled sum is unavailable (no compiler, built without OpenMP for
    several threads, a wrong sum), ``torch.sum`` alone, and the phrase says why. A ``clock``
    that reads NaN, runs backwards or never advances over the race is a ValueError naming it."""
    _check_probe_inputs(buffer, clock)
    threads = torch.get_num_threads() if threads is None else check_thread_count(threads, "threads")
    threads = min(threads, os.cpu_count() or 1)  # more threads than CPUs only wait on each other
    if buffer.dtype != torch.float32 or buffer.device.type != "cpu" or not buffer.is_contiguous():
        return buffer.sum, "torch.sum (the buffer is not contiguous float32 on the CPU)"
    torch_sum = _torch_sum_on(buffer, threads)
    fn, flags = _compiled_read_sum()
    if fn is None:
        return torch_sum, f"torch.sum: {flags}"
    if threads > 1 and "-fopenmp" not in flags:
        return torch_sum, "torch.sum (the compiled sum was built without OpenMP: one thread only)"
    address, n = buffer.data_ptr(), buffer.numel()
    got, expected = fn(address, n, threads), buffer.sum().item()  # float32: no copy of the buffer
    if not abs(got - expected) <= 1e-4 * max(1.0, abs(expected)):
        return torch_sum, f"torch.sum (the compiled sum gave {got:.6g}, torch {expected:.6g})"
    compiled = "compiled sum"

    def compiled_sum() -> float:
        # holds ``buffer`` itself, not only its address: the probe outlives the caller's reference
        return fn(buffer.data_ptr(), n, threads)

    probes = {compiled: compiled_sum, "torch.sum": torch_sum}
    best = _race(probes, clock_for(threads) if clock is None else clock)
    winner, loser = sorted(best, key=best.__getitem__)
    rate = {name: n * 4 / seconds / 1e9 if seconds > 0 else math.inf for name, seconds in best.items()}
    return probes[winner], (f"{winner}, the faster in a race with {loser} (best of {PROBE_RACE_READS} "
                            f"reads each: {rate[winner]:.1f} vs {rate[loser]:.1f} GB/s; compiled "
                            f"sum = fused_decode.c read_sum, {flags})")


def read_bandwidth(buffer: Tensor | None = None, *, repeats: int = 7, flush: Tensor | None = None,
                   num_threads: int | None = None) -> float:
    """Bytes per second (GB/s, 10^9) of the fastest of ``repeats`` reads of ``buffer`` by
    :func:`make_read_probe`, each after a read of ``flush``. Default buffers: random float32,
    :func:`flush_bytes` (4 times the last-level cache, capped)."""
    repeats = check_round_counts(repeats)[0]  # before the buffers are made
    for name, given in (("buffer", buffer), ("flush", flush)):
        if given is not None:
            check_tensor(given, name, min_ndim=1, layout="(n,)")
            check_holds_values(given, name)  # a meta tensor has no bytes to read
            if given.numel() == 0:
                raise ValueError(f"{name} must hold at least one number to read, got shape "
                                 f"{tuple(given.shape)}")
    buffer = random_buffer(flush_bytes()) if buffer is None else buffer
    flush = random_buffer(flush_bytes(), seed=1) if flush is None else flush
    with torch_threads(num_threads), torch.inference_mode():
        probe, _ = make_read_probe(buffer)
        best = min(time_flushed({"read": probe}, flush, warmup=1, repeats=repeats)["read"])
    return buffer.numel() * buffer.element_size() / best / 1e9


# -- a small decoder ------------------------------------------------------------------------


def _attend_fused(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return fused_decode_attention(q, k, v)


def _attend_course(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return grouped_query_attention(q, k, v)[0]


def _check_decoder_sizes(**sizes: object) -> dict[str, int]:
    """A :class:`SmallDecoder`'s sizes (``d_model``, ``num_heads``, ...), each an int >= 1 under its
    own name, and ``num_heads`` dividing ``d_model`` (the head width ``d_model / num_heads``);
    returned as Python ints (a product of NumPy ints could wrap around)."""
    checked = {name: check_int(value, name, minimum=1) for name, value in sizes.items()}
    if checked["d_model"] % checked["num_heads"]:
        raise ValueError(f"d_model must be a multiple of num_heads (each head is d_model / num_heads "
                         f"wide), got d_model={checked['d_model']}, num_heads={checked['num_heads']}")
    return checked


def decoder_bytes(d_model: int, num_heads: int, num_kv_heads: int, num_layers: int, *, context: int,
                  batch: int, mlp_ratio: int, weight_element: int = 4) -> tuple[int, int]:
    """``(weight bytes, cache bytes)`` of a :class:`SmallDecoder` (the bytes one step reads): per
    layer ``d x ((h + 2g) dk + d + 2 mlp d)`` weights of ``weight_element`` bytes each, and a
    float32 cache of K and V of ``context + 1`` positions (:func:`~course_utils.attention.gqa.
    kv_cache_bytes`). The sizes and ``weight_element`` are ints >= 1 (``mlp_ratio`` a whole
    number too, as :class:`SmallDecoder` takes it) and ``num_heads`` divides ``d_model``: else an
    error naming the argument and its value. ``num_kv_heads`` need not divide ``num_heads`` here:
    the bytes are the same formula for any ``g`` (:class:`SmallDecoder` and :class:`WholeStep`
    refuse such a ``g``; :func:`check_decoder_fits` sizes any)."""
    sizes = _check_decoder_sizes(d_model=d_model, num_heads=num_heads, num_kv_heads=num_kv_heads,
                                 num_layers=num_layers, context=context, batch=batch,
                                 mlp_ratio=mlp_ratio, weight_element=weight_element)
    d, h, g, layers, mlp = (sizes[k] for k in ("d_model", "num_heads", "num_kv_heads", "num_layers",
                                               "mlp_ratio"))
    d_head = d // h
    weights = layers * d * ((h + 2 * g) * d_head + d + 2 * mlp * d) * sizes["weight_element"]
    return weights, kv_cache_bytes(layers, sizes["batch"], g, d_head, sizes["context"] + 1, 4)


def check_decoder_fits(d_model: int, num_heads: int, num_kv_heads: int, num_layers: int, *,
                       context: int, batch: int, mlp_ratio: int = 4,
                       names: tuple[str, str] | None = None) -> None:
    """Refuse a :class:`SmallDecoder` whose float32 weights or cache would not fit in memory, before
    anything is allocated (its constructor, and the ``gqa`` command line when it is parsed). The
    sizes are ints >= 1 and ``num_heads`` divides ``d_model`` (checked, as :func:`decoder_bytes`
    checks them). The refusal blames ``names`` (two str: the arguments blamed for
    the weights and for the cache, e.g. a command line's options); by default (None) the largest of
    the sizes the weights (or the cache) grow with, by name and value, such as
    ``mlp_ratio``, and lists them all with their values (:func:`check_fits_in_memory`)."""
    sizes = _check_decoder_sizes(d_model=d_model, num_heads=num_heads, num_kv_heads=num_kv_heads,
                                 num_layers=num_layers, context=context, batch=batch, mlp_ratio=mlp_ratio)
    if isinstance(names, tuple | list):  # a list whose len() raises is named (battery 31)
        names = items_of(names, "names", "None or a pair of str")
    if names is not None and not (isinstance(names, tuple | list) and len(names) == 2
                                  and all(isinstance(n, str) for n in names)):
        raise TypeError(f"names must be None or a pair of str (the arguments blamed for the weights and "
                        f"for the cache, such as ('--layers 8', '--context 4096')), got "
                        f"{type(names).__name__} {shown_value(names, 60)}")
    weights_grow = {k: sizes[k] for k in ("d_model", "num_kv_heads", "num_layers", "mlp_ratio")}
    cache_grow = {k: sizes[k] for k in ("context", "batch", "num_layers", "num_kv_heads", "d_model")}
    blamed = (None, None) if names is None else tuple(names)
    # the checked plain ints from here on (an int subclass's repr raised in the messages: battery 30)
    d_model, num_heads, num_kv_heads, num_layers, context, batch = (
        sizes[k] for k in ("d_model", "num_heads", "num_kv_heads", "num_layers", "context", "batch"))
    # the weights are drawn in float32 first
    weight_bytes, cache_bytes = decoder_bytes(d_model, num_heads, num_kv_heads, num_layers, context=context,
                                              batch=batch, mlp_ratio=mlp_ratio)
    check_fits_in_memory(weight_bytes, blamed[0], f"float32 weights of {num_layers} layers of "
                                                  f"width {d_model}: {weight_bytes:,} bytes",
                         sizes=weights_grow)
    dk_ = d_model // num_heads
    check_fits_in_memory(cache_bytes, blamed[1], f"a float32 cache of {batch} x {context + 1} positions x "
                         f"{num_layers} layers x {num_kv_heads} K/V heads of width {dk_}, K and V",
                         sizes=cache_grow)


#: How a :class:`SmallDecoder` attends: the fused C kernel where it can (``"auto"``), the kernel or
#: an error (``"fused"``), or :func:`grouped_query_attention` always (``"course"``).
ATTENTION_CHOICES = ("auto", "fused", "course")


class SmallDecoder:
    """``num_layers`` pre-LayerNorm blocks of random weights with ``g`` key/value heads and a
    preallocated cache of ``context`` random keys and values (plus one slot for the new token).

    Weights (``weight_dtype``) per layer: ``W_qkv`` ``((h + 2g) dk, d)``, ``W_o`` ``(d, d)``,
    ``W_up`` ``(mlp d, d)``, ``W_down`` ``(d, mlp d)``; LayerNorms without parameters. The cache is
    float32, ``(B, g, context + 1, dk)`` per layer for K and for V. Attention runs in the fused C
    kernel where it can (float32, ``dk = 64``), otherwise in :func:`grouped_query_attention`.
    ``attention`` (``"auto"``, ``"fused"`` or ``"course"``) is read by validation.check_choice: a
    value that is no str is a TypeError, another str a ValueError, both naming ``attention``.
    """

    def __init__(self, d_model: int = 1024, num_heads: int = 16, num_kv_heads: int = 16,
                 num_layers: int = 8, *, context: int = 4096, batch: int = 1, mlp_ratio: int = 4,
                 weight_dtype: torch.dtype = torch.float32, seed: int = 0,
                 attention: str = "auto", share_from: SmallDecoder | None = None) -> None:
        _check_decoder_sizes(d_model=d_model, num_heads=num_heads, num_kv_heads=num_kv_heads,
                             num_layers=num_layers, context=context, batch=batch, mlp_ratio=mlp_ratio)
        if num_heads % num_kv_heads:
            raise ValueError(f"num_kv_heads must divide num_heads (each K/V head serves num_heads / "
                             f"num_kv_heads query heads), got num_heads={num_heads}, "
                             f"num_kv_heads={num_kv_heads}")
        attention = check_choice(attention, "attention", ATTENTION_CHOICES)
        check_float_dtype(weight_dtype, "weight_dtype")
        seed = check_seed(seed, "seed")  # a Python int: torch.Generator.manual_seed takes no NumPy int
        if share_from is not None and not isinstance(share_from, SmallDecoder):
            raise TypeError(f"share_from must be None or a SmallDecoder whose weights this one "
                            f"shares, got {type(share_from).__name__} {shown_value(share_from, 60)}")
        check_decoder_fits(d_model, num_heads, num_kv_heads, num_layers, context=context, batch=batch,
                           mlp_ratio=mlp_ratio)
        self.d_model, self.num_heads, self.num_kv_heads = d_model, num_heads, num_kv_heads
        self.d_head, self.num_layers = d_model // num_heads, num_layers
        self.context, self.batch = context, batch
        why_not = (None if self.d_head == HEAD_WIDTH
                   else f"head width {self.d_head}, the kernel's is {HEAD_WIDTH}") or fused_decode_status()
        if attention == "fused" and why_not:
            raise RuntimeError(f"the fused kernel cannot run here: {why_not}")
        self.attention = "course" if attention == "course" or why_not else "fused"
        self._attend = _attend_fused if self.attention == "fused" else _attend_course
        gen = torch.Generator().manual_seed(seed)
        d, dk, h, g = d_model, self.d_head, num_heads, num_kv_heads

        def weight(rows: int, cols: int) -> Tensor:
            return torch.randn(rows, cols, generator=gen).div_(math.sqrt(cols)).to(weight_dtype)

        self.weight_dtype = weight_dtype
        if share_from is not None and (share_from.d_model, share_from.num_heads, share_from.num_layers,
                                       share_from.weight_dtype, len(share_from.layers[0][2])) != (
                d, h, num_layers, weight_dtype, mlp_ratio * d):
            raise ValueError("share_from must have the same d_model, num_heads, num_layers, "
                             "mlp_ratio and weight_dtype")
        if share_from is None:
            self.layers = [(weight((h + 2 * g) * dk, d), weight(d, d), weight(mlp_ratio * d, d),
                            weight(d, mlp_ratio * d)) for _ in range(num_layers)]
        else:  # the same W_o and feed-forward tensors (a step reads them as if they were its own)
            self.layers = [(layer[0] if share_from.num_kv_heads == g else weight((h + 2 * g) * dk, d),
                            *layer[1:]) for layer in share_from.layers]
        self.cache = [(torch.randn(batch, g, context + 1, dk, generator=gen),
                       torch.randn(batch, g, context + 1, dk, generator=gen)) for _ in range(num_layers)]
        self.x = torch.randn(batch, d, generator=gen)  # the new token's input, one per sequence

    @property
    def weight_bytes(self) -> int:
        return sum(w.numel() * w.element_size() for layer in self.layers for w in layer)

    @property
    def cache_bytes(self) -> int:
        """Bytes of K and V one step reads: ``context + 1`` positions (the new one included)."""
        return sum(t.numel() * t.element_size() for pair in self.cache for t in pair)

    @property
    def bytes_read(self) -> int:
        """Every byte a step must read from memory: the weights and the KV cache."""
        return self.weight_bytes + self.cache_bytes

    def weights_pass(self, x: Tensor | None = None) -> Tensor:
        """The step's four matrix-vector products per layer and nothing else (no attention, no
        LayerNorm): how fast PyTorch reads the weights alone. Returns the last product. A given
        ``x`` is checked as :meth:`step` checks it."""
        x = self._checked_x(x).to(self.weight_dtype)
        out = x
        for w_qkv, w_o, w_up, w_down in self.layers:
            F.linear(x, w_qkv)
            F.linear(x, w_o)
            out = F.linear(F.linear(x, w_up), w_down)
        return out

    def _checked_x(self, x: object) -> Tensor:
        """``x`` (None: the fixed input ``self.x``), a float tensor ``(batch, d_model)`` that holds
        values (not on the meta device: a step over it would return a meta result, or fail
        writing it into the cache), of the dtype and on the device of ``self.x`` (the float32
        stream the cache is written from; a float64 ``x`` would make the step return float64),
        with finite numbers (a NaN or an infinity would come back as a NaN result without a word;
        one pass over ``batch * d_model`` numbers, and only for a given ``x``: the benchmarks'
        default ``self.x`` is not checked again)."""
        if x is None:
            return self.x
        if not (isinstance(x, Tensor) and x.is_floating_point()
                and tuple(x.shape) == (self.batch, self.d_model)):
            check_tensor(x, "x", ndim=2, layout=f"(batch={self.batch}, d_model={self.d_model})")
            raise ValueError(f"x must be (batch={self.batch}, d_model={self.d_model}), one new token "
                             f"per sequence, got shape {tuple(x.shape)}")
        check_holds_values(x, "x")
        if (x.dtype, x.device) != (self.x.dtype, self.x.device):  # a dtype is a type, a device a value
            raise (TypeError if x.dtype != self.x.dtype else ValueError)(
                f"x must be {self.x.dtype} on {self.x.device}, as the decoder's stream and cache (its "
                f"weights are {self.weight_dtype}), got {x.dtype} on {x.device}: convert with "
                f"x.to({self.x.dtype!s}, {str(self.x.device)!r})")
        check_finite(x, "x", "it would spread to the result as NaN")
        return x

    def step(self, x: Tensor | None = None) -> Tensor:
        """One decoding step: ``x`` ``(B, d)`` (default: a fixed random input) -> ``(B, d)``.
        A given ``x`` must be a float tensor ``(batch, d_model)`` of finite numbers (checked)."""
        x = self._checked_x(x)
        B, d, h, g, dk = x.shape[0], self.d_model, self.num_heads, self.num_kv_heads, self.d_head
        pos = self.context  # the new token's slot: after the cached ones
        for (w_qkv, w_o, w_up, w_down), (k_cache, v_cache) in zip(self.layers, self.cache, strict=True):
            a = F.layer_norm(x, (d,)).to(self.weight_dtype)
            qkv = F.linear(a, w_qkv).float()  # (B, (h + 2g) dk)
            q, k, v = qkv.split((h * dk, g * dk, g * dk), dim=1)
            k_cache[:, :, pos] = k.view(B, g, dk)  # written in place: no copy of the cache
            v_cache[:, :, pos] = v.view(B, g, dk)
            heads = self._attend(q.reshape(B, h, 1, dk), k_cache, v_cache)  # (B, h, 1, dk)
            x = x + F.linear(heads.reshape(B, d).to(self.weight_dtype), w_o).float()
            up = F.gelu(F.linear(F.layer_norm(x, (d,)).to(self.weight_dtype), w_up))
            x = x + F.linear(up, w_down).float()
        return x


# -- MHA vs GQA, whole steps side by side ---------------------------------------------------


@dataclass(frozen=True)
class StepRow:
    """One ``(batch, context, g)``: bytes a step reads and every repeat's step time (at least one
    sample). Frozen (the samples kept as a tuple), so a row checked once stays valid."""

    batch: int
    context: int
    num_kv_heads: int
    weight_bytes: int
    cache_bytes: int
    samples_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        # every size >= 1 (a step reads weights and a cache); a step of 0 s is no time: gb_per_s divides
        freeze_fields(self)
        check_record(self, positive=("batch", "context", "num_kv_heads", "weight_bytes", "cache_bytes",
                                     "samples_s"), nonempty=("samples_s",))
        # a step reads K and V of context + 1 positions per sequence and KV head: a byte each at least
        least = 2 * self.batch * self.num_kv_heads * (self.context + 1)
        if self.cache_bytes < least:
            raise ValueError(f"StepRow.cache_bytes must be at least 2 x batch x num_kv_heads x (context + 1) "
                             f"= {least} (K and V of every position read), got {self.cache_bytes}")

    @property
    def bytes_read(self) -> int:
        return self.weight_bytes + self.cache_bytes

    @property
    def best_s(self) -> float:
        return min(self.samples_s)  # one sample at least: checked when made

    def gb_per_s(self) -> float:
        """Bytes read per second in the fastest repeat (10^9 bytes per GB)."""
        return self.bytes_read / self.best_s / 1e9


@dataclass(frozen=True)
class WholeStep:
    """Result of :func:`bench_whole_step`. Frozen (lists kept as tuples, ``weights_s`` a
    read-only dict), so a result checked once stays valid."""

    d_model: int
    num_heads: int
    num_layers: int
    mlp_ratio: int
    weight_dtype: torch.dtype
    attention: Literal["fused", "course"]  # what the steps ran (bench_whole_step's "auto" resolved)
    threads: int
    rows: tuple[StepRow, ...]
    read_s: tuple[float, ...]  # the read-only probe, every repeat
    read_bytes: int
    llc: tuple[int, str]  # last-level cache: bytes, where the figure came from
    flush_bytes: int
    weights_s: dict[tuple[int, int], tuple[float, ...]] = field(default_factory=dict)  # per shape, g = h
    yardstick: str = "torch.sum"  # what the read-only probe ran (make_read_probe's phrase)
    conditions: str = ""  # threads, OpenMP wait policy, machine (run_conditions)
    flush_note: str | None = None  # what capping the flush costs here, if it was capped

    def __post_init__(self) -> None:
        """Sizes, counts and ``threads`` >= 1 and every time > 0 (they are divided by); then the
        rows agree with one another, as the methods read them: one row per ``(batch, context,
        g)``, each ``g`` a divisor of ``num_heads``, every shape with its ``g = num_heads`` row (the
        MHA baseline of its speed-ups) and one sample count (they are paired repeat by repeat), each
        row's bytes those :func:`decoder_bytes` gives for these sizes, and ``weights_s`` only for
        shapes that have rows."""
        freeze_fields(self)
        check_record(self, nonempty=("rows", "read_s"),  # its methods take min() of them
                     positive=("d_model", "num_heads", "num_layers", "mlp_ratio", "threads", "read_s",
                               "read_bytes", "flush_bytes", "weights_s"))
        check_float_dtype(self.weight_dtype, "WholeStep.weight_dtype")
        keys = [(r.batch, r.context, r.num_kv_heads) for r in self.rows]
        if len(set(keys)) != len(keys) or any(self.num_heads % g for _, _, g in keys):
            raise ValueError(f"WholeStep.rows must be one row per (batch, context, g), each g a divisor "
                             f"of num_heads={self.num_heads}, got {keys}")
        for shape in self.shapes():
            counts = {r.num_kv_heads: len(r.samples_s) for r in self.rows if (r.batch, r.context) == shape}
            if self.num_heads not in counts or len(set(counts.values())) != 1:
                raise ValueError(f"WholeStep.rows of batch={shape[0]}, context={shape[1]} must include "
                                 f"g={self.num_heads} (the MHA baseline) and have one sample count, got "
                                 f"g -> samples {counts}")
        self._check_bytes()
        stray = [shape for shape in self.weights_s if shape not in self.shapes()]
        if stray:
            raise ValueError(f"WholeStep.weights_s must time only shapes that have rows {self.shapes()}, "
                             f"got {stray}")
        self._check_weights_timed()

    def _check_bytes(self) -> None:
        """Every row's ``weight_bytes`` and ``cache_bytes`` are :func:`decoder_bytes` of this run's
        sizes (``weight_dtype``'s element) and the row's batch, context and ``g``: what its
        :class:`SmallDecoder` reads, and what the byte bound and GB/s divide by."""
        element = torch.empty((), dtype=self.weight_dtype).element_size()
        for r in self.rows:
            wanted = decoder_bytes(self.d_model, self.num_heads, r.num_kv_heads, self.num_layers,
                                   context=r.context, batch=r.batch, mlp_ratio=self.mlp_ratio,
                                   weight_element=element)
            if (r.weight_bytes, r.cache_bytes) != wanted:
                raise ValueError(f"WholeStep.rows[batch={r.batch}, context={r.context}, g={r.num_kv_heads}] "
                                 f"must read weight_bytes={wanted[0]} and cache_bytes={wanted[1]} "
                                 f"(decoder_bytes of d_model={self.d_model}, num_heads={self.num_heads}, "
                                 f"num_layers={self.num_layers}, mlp_ratio={self.mlp_ratio}, "
                                 f"{self.weight_dtype}), got weight_bytes={r.weight_bytes}, "
                                 f"cache_bytes={r.cache_bytes}")

    def _check_weights_timed(self) -> None:
        """``weights_s`` is empty (not timed) or times every shape, as many repeats as its rows
        (bench_whole_step times the weights pass alongside every shape's steps)."""
        if not self.weights_s:
            return
        for shape in self.shapes():
            repeats = len(self.row(*shape, self.num_heads).samples_s)
            if shape not in self.weights_s or len(self.weights_s[shape]) != repeats:
                raise ValueError(f"WholeStep.weights_s must time every shape {self.shapes()} with {repeats} "
                                 f"samples at batch={shape[0]}, context={shape[1]} (as its rows), got "
                                 f"{ {k: len(v) for k, v in self.weights_s.items()} }")

    def weights_gb_per_s(self, batch: int, context: int) -> float:
        """Weight bytes per second of :meth:`SmallDecoder.weights_pass` (g = h), fastest repeat."""
        mha = self.row(batch, context, self.num_heads)
        if (batch, context) not in self.weights_s:
            raise ValueError(f"the weights alone were not timed at batch={batch}, context={context}; "
                             f"timed: {list(self.weights_s) or 'none'}")
        return mha.weight_bytes / min(self.weights_s[(batch, context)]) / 1e9

    @property
    def read_gb_per_s(self) -> float:
        """Read-only bandwidth: the probe's fastest repeat."""
        return self.read_bytes / min(self.read_s) / 1e9

    def row(self, batch: int, context: int, num_kv_heads: int) -> StepRow:
        """The row of one ``(batch, context, g)``, each an int >= 1 (checked: ``True`` or ``1.0``
        would find row 1 as if named); a ValueError naming the rows measured if none."""
        key = tuple(check_int(value, name, minimum=1) for name, value in (
            ("batch", batch), ("context", context), ("num_kv_heads", num_kv_heads)))
        for r in self.rows:
            if (r.batch, r.context, r.num_kv_heads) == key:
                return r
        measured = [(r.batch, r.context, r.num_kv_heads) for r in self.rows]
        raise ValueError(f"no row for batch={batch}, context={context}, g={num_kv_heads}; measured "
                         f"(batch, context, g): {measured}")

    def shapes(self) -> list[tuple[int, int]]:
        return list(dict.fromkeys((r.batch, r.context) for r in self.rows))

    def speedup(self, batch: int, context: int, num_kv_heads: int) -> float:
        """``best time(g = h) / best time(g)``. The fastest repeat of each: other programs on the
        machine can only add time, and on a busy machine the medians of ratios scatter widely."""
        return self.row(batch, context, self.num_heads).best_s / self.row(batch, context, num_kv_heads).best_s

    def paired_speedup(self, batch: int, context: int, num_kv_heads: int) -> float:
        """Median over repeats of ``time(g = h) / time(g)`` (paired: same repeat)."""
        mha = self.row(batch, context, self.num_heads).samples_s
        mine = self.row(batch, context, num_kv_heads).samples_s
        return statistics.median(a / b for a, b in zip(mha, mine, strict=True))

    def byte_bound(self, batch: int, context: int, num_kv_heads: int) -> float:
        """``bytes(g = h) / bytes(g)``: the speed-up if every byte were read at one rate."""
        mha, mine = self.row(batch, context, self.num_heads), self.row(batch, context, num_kv_heads)
        return mha.bytes_read / mine.bytes_read

    def share_of_bound(self, batch: int, context: int, num_kv_heads: int) -> float:
        return self.speedup(batch, context, num_kv_heads) / self.byte_bound(batch, context, num_kv_heads)

    def read_share(self, row: StepRow) -> float:
        """The step's best GB/s as a share of the read-only bandwidth (1 = the roofline); ``row``
        is a :class:`StepRow` (one of :attr:`rows`, or :meth:`row`'s): a row of another result was
        timed against another probe, so its share of this one's bandwidth would mean nothing."""
        if not isinstance(row, StepRow):
            raise TypeError(f"row must be a StepRow (one of WholeStep.rows, or WholeStep.row(batch, "
                            f"context, g)), got {type(row).__name__} {shown_value(row, 60)}")
        if row not in self.rows:
            raise ValueError(f"row must be one of this result's rows (WholeStep.rows, or WholeStep.row("
                             f"batch, context, g)), got a StepRow of batch={row.batch}, context="
                             f"{row.context}, g={row.num_kv_heads} that is not among them")
        return row.gb_per_s() / self.read_gb_per_s

    def noise_warnings(self) -> list[str]:
        """``check:`` lines, as :meth:`~course_utils.bench.gqa_speed.DecodeBench.noise_warnings` gives:
        a share of the byte bound above 100% (the g = h steps were slowed, or a step read some
        bytes faster than the others), or repeats that scatter widely (a median step more than
        ``SCATTER`` times the best one: other programs disturbed the run)."""
        warnings = []
        roof = [f"B={r.batch} context {r.context} g={r.num_kv_heads} {self.read_share(r):.0%}"
                for r in self.rows if self.read_share(r) > 1.0]
        if roof:
            warnings.append(f"check: a step read faster than the read-only probe ({', '.join(roof)} of "
                            "roof): its data were partly in the cache, or the probe was slowed")
        fast = [f"B={b}, context {t} {self.weights_gb_per_s(b, t) / self.read_gb_per_s:.0%}"
                for b, t in self.shapes() if (b, t) in self.weights_s
                and self.weights_gb_per_s(b, t) > self.read_gb_per_s]
        if fast:
            warnings.append(f"check: the weights alone read faster than the read-only probe "
                            f"({', '.join(fast)}): the yardstick is too low (a slowed probe, or torch.sum)")
        beyond = [(r.batch, r.context, r.num_kv_heads) for r in self.rows
                  if r.num_kv_heads != self.num_heads
                  and self.share_of_bound(r.batch, r.context, r.num_kv_heads) > 1.0]
        if beyond:
            shown = ", ".join(f"B={b} context {t} g={g} "
                              f"{self.share_of_bound(b, t, g):.0%}" for b, t, g in beyond)
            warnings.append(f"check: share of the byte bound above 100% ({shown}): a noisy run, or "
                            "g=h steps slower than their bytes allow")
        r = max(self.rows, key=lambda r: statistics.median(r.samples_s) / r.best_s)  # every row timed
        spread = statistics.median(r.samples_s) / r.best_s
        if spread > SCATTER:
            warnings.append(f"check: noisy run: a median step (B={r.batch}, context {r.context}, "
                            f"g={r.num_kv_heads}) took {spread:.1f}x the best one")
        return warnings

    def format(self) -> str:
        return format_whole_step(self)


def format_whole_step(result: WholeStep) -> str:
    """The whole-step table as text (lines under 100 characters)."""
    if not isinstance(result, WholeStep):
        raise TypeError(f"result must be a WholeStep (from bench_whole_step), got "
                        f"{type(result).__name__} {shown_value(result, 60)}")
    dtype = str(result.weight_dtype).removeprefix("torch.")
    lines = [
        f"whole decode step: d={result.d_model}, h={result.num_heads}, {result.num_layers} layers, "
        f"{result.mlp_ratio}d MLP, {dtype} weights, float32 cache,",
        f"no embedding or LM head; attention: {result.attention}",
        *textwrap.wrap(f"conditions: {result.conditions or run_conditions(result.threads)}", 99,
                       subsequent_indent="    "),
        *textwrap.wrap(f"read-only bandwidth {result.read_gb_per_s:.1f} GB/s: {result.yardstick}, "
                       f"{result.read_bytes // MiB} MiB of random float32 (last-level cache "
                       f"{result.llc[0] // MiB} MiB from {result.llc[1]}; "
                       f"flush {result.flush_bytes // MiB} MiB)",
                       99, subsequent_indent="    "),
    ]
    head = (f"{'B':>3} {'context':>7} {'g':>3} | {'weights':>7} {'cache':>6} MiB | {'best ms':>7} "
            f"{'roof ms':>7} {'of roof':>7} | {'speed-up':>8} {'bound':>6} {'share':>5}")
    lines += [head, "-" * len(head)]
    for r in result.rows:
        roof = r.bytes_read / (result.read_gb_per_s * 1e9)
        speed = f"{result.speedup(r.batch, r.context, r.num_kv_heads):>7.2f}x"
        bound = result.byte_bound(r.batch, r.context, r.num_kv_heads)
        share = result.share_of_bound(r.batch, r.context, r.num_kv_heads)
        lines.append(f"{r.batch:>3} {r.context:>7} {r.num_kv_heads:>3} | {r.weight_bytes / MiB:>7.0f} "
                     f"{r.cache_bytes / MiB:>6.0f}     | {r.best_s * 1e3:>7.2f} {roof * 1e3:>7.2f} "
                     f"{result.read_share(r):>7.0%} | {speed} {bound:>5.2f}x {share:>5.0%}")
    for b, t in result.shapes():
        if (b, t) in result.weights_s:
            rate = result.weights_gb_per_s(b, t)
            lines.append(f"B={b}, context {t}: the weights alone (matrix products, g={result.num_heads}) "
                         f"read at {rate:.1f} GB/s, {rate / result.read_gb_per_s:.0%} of read-only")
    lines += ["roof ms = (weights + cache) / read-only bandwidth; of roof = roof / best; speed-up = "
              "best time(g=h)", "/ best time(g); bound = bytes(g=h) / bytes(g); share = speed-up / bound"]
    for warning in ([result.flush_note] if result.flush_note else []) + result.noise_warnings():
        lines += textwrap.wrap(warning, 99, subsequent_indent="    ")
    return "\n".join(lines)


def time_flushed(fns: dict, flush: Tensor, warmup: int, repeats: int,
                 after_round: Callable[[], object] | None = None,
                 clock: Callable[[], float] | None = None) -> dict[object, list[float]]:
    """Every function's time, interleaved repeat by repeat, each call after reading ``flush``
    (outside the timing) to evict the last-level cache: every call starts cold.
    ``after_round`` is called after every round (a progress bar's update); ``clock`` reads the
    time (default: the wall clock; see :func:`clock_for`). ``flush`` is a tensor with values (one
    on the meta device, or an empty one, reads nothing, and the times would be labelled flushed),
    or anything whose ``sum()`` reads the memory to evict."""
    if isinstance(flush, Tensor):
        check_holds_values(flush, "flush")
        if flush.numel() == 0:  # reading nothing evicts nothing: the "cold" calls would run warm
            raise ValueError(f"flush must hold at least one element (a buffer larger than the last-level "
                             f"cache), got an empty tensor of shape {tuple(flush.shape)}")
    elif not callable(getattr(flush, "sum", None)):
        raise TypeError(f"flush must be a tensor to read before each call (larger than the last-level "
                        f"cache), got {type(flush).__name__} {shown_value(flush, 60)}")
    return interleaved_samples(fns, warmup=warmup, repeats=repeats, before_each=flush.sum,
                               after_round=after_round, clock=clock)


#: ``bench_whole_step``'s quick default (the lesson's) and its full run (``full=True``).
WHOLE_STEP_RUNS = {
    "quick": dict(shapes=((1, 1024), (1, 8192), (8, 1024)), num_layers=2, repeats=7, warmup=1),
    "full": dict(shapes=((1, 1024), (1, 4096), (1, 16384), (8, 4096)), num_layers=8, repeats=15, warmup=2),
}


def _check_shapes(shapes: object) -> list[tuple[int, int]]:
    """``shapes`` is a non-empty list of distinct ``(batch, context)`` pairs of ints >= 1 (a
    repeated shape would be timed and printed twice); returned as a list of tuples."""
    if isinstance(shapes, (str, bytes)) or not isinstance(shapes, Sequence) or not shapes:
        raise ValueError(f"shapes must list at least one (batch, context) pair, got "
                         f"{shown_value(shapes, 60)}")
    for i, shape in enumerate(shapes):
        if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence) or len(shape) != 2:
            raise TypeError(f"shapes[{i}] must be a (batch, context) pair of ints, got "
                            f"{type(shape).__name__} {shown_value(shape, 60)}")
        check_int(shape[0], f"shapes[{i}] batch", minimum=1)
        check_int(shape[1], f"shapes[{i}] context", minimum=1)
    return check_distinct([(int(b), int(t)) for b, t in shapes], "shapes", "(batch, context) pairs")


def bench_whole_step(
    shapes: Sequence[tuple[int, int]] | None = None,
    groups: Sequence[int] = (16, 4, 1),
    *,
    d_model: int = 1024,
    num_heads: int = 16,
    num_layers: int | None = None,
    mlp_ratio: int = 4,
    weight_dtype: torch.dtype = torch.float32,
    repeats: int | None = None,
    warmup: int | None = None,
    num_threads: int | None = None,
    flush_multiple: int = 4,
    attention: str = "auto",
    full: bool = False,
    progress: bool = True,
) -> WholeStep:
    """Time :meth:`SmallDecoder.step` for every ``(batch, context)`` in ``shapes`` and every
    ``g`` in ``groups`` (which must include ``num_heads``), plus the read-only probe
    (:func:`make_read_probe`), all interleaved repeat by repeat, each call after a flush of
    :func:`flush_bytes` ``(flush_multiple)``. The decoders of one shape have their own
    query/key/value projections and caches, but share the ``g = h`` decoder's ``W_o`` and
    feed-forward tensors (``share_from``), which a step reads as if they were its own; only one
    shape's decoders exist at a time.

    ``shapes``, ``num_layers``, ``repeats`` and ``warmup`` left as None come from
    ``WHOLE_STEP_RUNS["quick"]`` (3 shapes, 2 layers, 1 + 7 rounds: seconds, the lesson's) or,
    with ``full=True``, ``["full"]`` (contexts up to 16384 at B=1 and 8 x 4096, 8 layers, 2 + 15
    rounds).
    ``progress`` shows a text progress bar (tqdm) over the rounds. ``full`` and ``progress`` are
    bools (a string such as ``"no"`` is refused, not taken as True). ``attention`` is one of
    :data:`ATTENTION_CHOICES`, checked before anything is allocated (validation.check_choice: a
    TypeError for a value that is no str, a ValueError for another str)."""
    check_flag(full, "full")
    check_flag(progress, "progress")
    attention = check_choice(attention, "attention", ATTENTION_CHOICES)
    run = WHOLE_STEP_RUNS["full" if full else "quick"]
    shapes = run["shapes"] if shapes is None else shapes
    num_layers = run["num_layers"] if num_layers is None else num_layers
    repeats = run["repeats"] if repeats is None else repeats
    warmup = run["warmup"] if warmup is None else warmup
    repeats, warmup, _ = check_round_counts(repeats, warmup)  # before the bar adds them
    groups = check_int_list(groups, "groups", minimum=1)  # None, a str, nested lists: named here
    num_heads = check_int(num_heads, "num_heads", minimum=1)  # before the message below prints it
    if num_heads not in groups or any(num_heads % g for g in groups):
        raise ValueError(f"groups must be divisors of num_heads={num_heads} including it, got {list(groups)}")
    groups = check_distinct(groups, "groups", "head-group counts")  # a repeat: its rows twice
    shapes = _check_shapes(shapes)
    flush_multiple = check_int(flush_multiple, "flush_multiple", minimum=1, maximum=MAX_FLUSH_MULTIPLE)
    release_freed_memory()  # what earlier work freed but kept: this benchmark needs room
    llc = last_level_cache_bytes()
    size = flush_bytes(flush_multiple)
    flush = random_buffer(size, seed=1)
    probe = random_buffer(size, seed=2)
    rows, read_s, weights_s, used = [], [], {}, "course"
    bar = tqdm(total=len(shapes) * (warmup + repeats), desc="whole step", unit="round", leave=False,
               disable=not progress)
    with torch_threads(num_threads), torch.inference_mode():
        threads = torch.get_num_threads()
        read, yardstick = make_read_probe(probe, threads)
        for batch, context in shapes:  # one shape at a time: only its caches are in memory
            decoders: dict[int, SmallDecoder] = {}
            for g in sorted(groups, reverse=True):  # g = h first; the others share its W_o and MLP
                decoders[g] = SmallDecoder(d_model, num_heads, g, num_layers, context=context,
                                           batch=batch, mlp_ratio=mlp_ratio, weight_dtype=weight_dtype,
                                           attention=attention, share_from=decoders.get(num_heads))
            used = decoders[num_heads].attention
            fns: dict[object, Callable[[], object]] = {g: decoders[g].step for g in groups}
            fns["read"] = read
            fns["weights"] = decoders[num_heads].weights_pass
            samples = time_flushed(fns, flush, warmup, repeats, after_round=bar.update,
                                   clock=clock_for(threads))
            rows += [StepRow(batch, context, g, decoders[g].weight_bytes, decoders[g].cache_bytes,
                             samples[g]) for g in groups]
            read_s += samples["read"]
            weights_s[(batch, context)] = samples["weights"]
            del decoders, fns
            release_freed_memory()  # this shape's weights and caches are gone
    bar.close()
    return WholeStep(d_model, num_heads, num_layers, mlp_ratio, weight_dtype, used, threads,
                     rows, read_s, probe.numel() * 4, llc, flush.numel() * 4, weights_s, yardstick,
                     run_conditions(threads), flush_note(flush.numel() * 4, flush_multiple))

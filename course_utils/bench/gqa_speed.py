"""One decode step through a stack of KV caches: MHA vs GQA vs MQA, measured side by side.

Run ``python -m course_utils.bench gqa``. A decode step of a model with ``h`` query heads
attends from one new token to ``T`` cached keys and values in every layer. Its arithmetic
is tiny (one multiply-add, 2 flops, per cached number and query head that reads it: 2 flops
per number at g = h, ``2 h / g`` with ``g`` K/V heads), so its time is the time to *read* the cache:
with ``g`` K/V heads the cache, and so the ideal step time, shrinks by ``h / g``.

Every call of a timed function runs all layers (as a real model does), and every repeat
runs every method at every ``g`` back to back (interleaved), so a busy moment slows them
alike; ratios are taken repeat by repeat. Before each timed call a buffer of random numbers,
four times the last-level cache (found by :func:`~course_utils.bench.decode_step.last_level_cache_bytes`)
but at most 256 MiB (:func:`~course_utils.bench.decode_step.flush_bytes`), is read, so no
method finds its cache already sitting in L3 (in a real model the weights stream through
between layers and evict it just the same); where the cap cuts the multiple, the table says
what it costs.

The yardstick is the **read-only bandwidth**: a compiled, multi-threaded sum (``read_sum`` in
``fused_decode.c``; ``torch.sum`` where no compiler built it) over another such buffer, timed
in the same run (:func:`~course_utils.bench.decode_step.make_read_probe`). A decoding step
only reads its cache (it writes a few KiB), so
``cache bytes / read-only bandwidth`` is the shortest step possible, and each method's GB/s is
given as a share of it. A copy (``dst.copy_(src)`` into a buffer allocated beforehand) is also
timed when ``copy_mib > 0``, for reference only: it reads and writes, a different job.

The attention table is attention only. A model's step also reads its weights, which GQA
barely shrinks: :mod:`course_utils.bench.decode_step` times whole steps (``--whole-step``, on by
default in the command line) against the bytes they read.

The memory allocator: on Linux, glibc's malloc moves its thresholds as a program runs. At
first it maps each large block (the ``repeat`` method's 16 MiB copies) from the operating
system and unmaps it at ``free``, so a call pays for fresh zeroed pages, which costs more than
the copying itself (measured at g = 4: ``repeat`` took 160 ms with every block mapped afresh,
47 ms with its blocks reused). Later, freed memory stays in the heap and is handed back at
some other ``free``, which may fall inside the *next* method's timed call (measured: the
first layer of the course method at g = 4, right after ``repeat``, took up to 5 ms instead
of about 1 ms). :func:`steady_allocator` fixes the thresholds for the benchmark's process
the way a caching allocator (PyTorch's on a GPU, or an inference server's) behaves: blocks
under 32 MiB come from the heap and, once freed, stay there to be reused; the heap is not
trimmed (unless 1 GiB lies free at its top). No call pays for another's memory, and
``repeat`` pays for what copying costs, not for the operating system's page mapping.

:class:`DecodeRow`, :class:`StageRow` and :class:`DecodeBench` check their fields when made
(``check_record``): sizes, counts and thread counts >= 1, times divided by > 0, and a
DecodeBench's rows consistent with one another (see :meth:`DecodeBench.__post_init__`).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import functools
import statistics
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from ..attention.fused_decode import HEAD_WIDTH, fused_decode_attention, fused_decode_status
from ..attention.gqa import grouped_query_attention, kv_cache_bytes
from ..attention.validation import (
    check_choice,
    check_device,
    check_distinct,
    check_fits_in_memory,
    check_flag,
    check_float_dtype,
    check_int,
    check_int_list,
    check_record,
    freeze_fields,
)
from ..attention.validation import shown as shown_value
from ..env import check_seed, torch_threads
from .decode_step import (
    MAX_FLUSH_MULTIPLE,
    bench_whole_step,
    check_decoder_fits,
    clock_for,
    flush_bytes,
    flush_note,
    last_level_cache_bytes,
    make_read_probe,
    random_buffer,
    release_freed_memory,
    run_conditions,
    time_flushed,
)
from .decode_step import flush_bytes as flush_bytes_default
from .timing import (
    _check_functions,
    check_function_name,
    check_round_counts,
    interleaved_samples,
    timings_from_samples,
)

__all__ = [
    "SHARING_METHODS",
    "ELEMENT_SIZES",
    "DecodeRow",
    "DecodeBench",
    "make_kv_caches",
    "bench_decode",
    "steady_allocator",
    "stage_times",
    "StageRow",
    "stage_bandwidth",
    "WHOLE_STEP_SHAPES",
    "DECODE_RUNS",
    "add_bench_parser",
    "time_cold",
]

MiB = 2**20
# two threads reading memory measured 38-44 GB/s against about 20-35 on one; a probe more than
# 1.6 times its one-thread figure has most likely read (part of) its buffer from the cache
PROBE_SANITY = 1.6

SHARING_METHODS: dict[str, str] = {
    "course": "course_utils.grouped_query_attention: group's query rows in one matmul, no copy",
    "enable_gqa": "F.scaled_dot_product_attention(..., enable_gqa=True)",
    "repeat": "k, v .repeat_interleave(h // g, dim=1), then F.scaled_dot_product_attention",
    "fused": "course_utils.fused_decode_attention: a C kernel, each group's K and V read once",
}


@functools.cache
def steady_allocator() -> str:
    """Fix glibc malloc's thresholds for this process (see the module docstring); one line
    saying what was done. Elsewhere (macOS, Windows, musl) nothing changes and it says so."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return "allocator: left as it is (no glibc mallopt here)"
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
    # 32 MiB is the largest mmap threshold glibc accepts on 64-bit; trim only past 1 GiB free
    if not (mallopt(M_MMAP_THRESHOLD, 32 * MiB) and mallopt(M_TRIM_THRESHOLD, 1024 * MiB)):
        return "allocator: left as it is (mallopt refused)"
    return "allocator: glibc malloc keeps freed memory for reuse, as a caching allocator does"


def _repeat_then_sdpa(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    copies = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(copies, dim=1), v.repeat_interleave(copies, dim=1)  # (B, h, T, dk)
    return F.scaled_dot_product_attention(q, k, v)


_ATTEND: dict[str, Callable[[Tensor, Tensor, Tensor], object]] = {
    "course": grouped_query_attention,
    "enable_gqa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
    "repeat": _repeat_then_sdpa,
    "fused": fused_decode_attention,
}


def _fused_unavailable(d_head: int, device: torch.device, dtype: torch.dtype) -> str | None:
    """Why the fused kernel cannot run this configuration, or None."""
    if device.type != "cpu" or dtype != torch.float32 or d_head != HEAD_WIDTH:
        return (f"fused: not run (it takes float32 on the CPU, head width {HEAD_WIDTH}; "
                f"here {str(dtype).removeprefix('torch.')} on {device.type}, width {d_head})")
    reason = fused_decode_status()
    return None if reason is None else f"fused: not run ({reason})"


#: Bytes per element of the floating dtypes (float8 variants, float16/bfloat16, float32, float64):
#: the element sizes a :class:`DecodeBench`'s cache can have.
ELEMENT_SIZES: tuple[int, ...] = (1, 2, 4, 8)


@dataclass(frozen=True)
class DecodeRow:
    """One ``g``: cache size and, per method, every repeat's time of one whole decode step.

    ``samples_s`` times at least one method, each one of :data:`SHARING_METHODS` with at least
    one sample. Frozen (the samples kept as tuples in a read-only dict), so a row checked once
    stays valid."""

    num_kv_heads: int
    cache_bytes: int
    samples_s: dict[str, tuple[float, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # a g, a cache of 0 bytes or a step of 0 s is no measurement: gb_per_s divides by the time
        freeze_fields(self)
        check_record(self, positive=("num_kv_heads", "cache_bytes", "samples_s"), nonempty=("samples_s",))
        for method, samples in self.samples_s.items():
            if method not in SHARING_METHODS or not samples:
                raise ValueError(f"DecodeRow.samples_s must map methods of {list(SHARING_METHODS)} to at "
                                 f"least one sample each, got {shown_value(method, 60)}: "
                                 f"{shown_value(samples, 60)}")

    def _samples(self, method: object) -> tuple[float, ...]:
        """This row's samples of ``method``; a clear error naming the methods timed if none."""
        found = self.samples_s.get(method) if isinstance(method, str) else None
        if not found:
            raise ValueError(f"method must be one of the methods timed for g={self.num_kv_heads} "
                             f"({list(self.samples_s)}), got {shown_value(method, 60)}")
        return found

    def best_s(self, method: str) -> float:
        return min(self._samples(method))

    def median_s(self, method: str) -> float:
        return statistics.median(self._samples(method))

    def gb_per_s(self, method: str = "course") -> float:
        """Cache bytes read per second in the fastest repeat (10^9 bytes per GB)."""
        return self.cache_bytes / self.best_s(method) / 1e9


@dataclass(frozen=True)
class DecodeBench:
    """Result of :func:`bench_decode`. Frozen (lists kept as tuples), so a result checked once
    stays valid."""

    num_heads: int
    d_head: int
    context: int
    num_layers: int
    batch: int
    threads: int
    rows: tuple[DecodeRow, ...]
    sdpa_mha_s: tuple[float, ...]  # plain F.scaled_dot_product_attention at g = h, every repeat
    copy_s: tuple[float, ...]  # copy of the copy buffer into a ready buffer, every repeat ([] if none)
    copy_bytes: int  # bytes read + written by one copy
    allocator: str = ""  # what steady_allocator did
    notes: tuple[str, ...] = ()  # methods left out, and why
    read_s: tuple[float, ...] = ()  # the read-only probe, every repeat
    read_bytes: int = 0  # bytes the probe reads
    llc: tuple[int, str] = (0, "")  # last-level cache: bytes, where the figure came from
    flush_bytes: int = 0  # the buffer read before every timed call
    read_one_thread_s: tuple[float, ...] = ()  # the same probe on one thread
    yardstick: str = "torch.sum"  # what the read-only probe ran (make_read_probe's phrase)
    conditions: str = ""  # threads, OpenMP wait policy, machine (run_conditions)
    flush_note: str | None = None  # what capping the flush costs here, if it was capped

    def __post_init__(self) -> None:
        """Sizes, counts and ``threads`` >= 1 and every time > 0 (they are divided by); then the
        rows agree with one another, as the methods read them: distinct ``g`` that divide
        ``num_heads``, one of them ``num_heads`` itself (the MHA baseline), each timing the same
        methods, ``course`` among them, with one sample per repeat (as many as ``sdpa_mha_s``:
        speed-ups pair them repeat by repeat); a probe or copy timed has its bytes and one sample per
        repeat (timed in the same run), a copy sized (``copy_bytes`` > 0) was timed, and every row's
        ``cache_bytes`` is what :func:`~course_utils.attention.gqa.kv_cache_bytes` gives for these sizes
        and its ``g`` in one element size."""
        freeze_fields(self)
        check_record(self, nonempty=("rows", "sdpa_mha_s"),  # mha, format take them
                     positive=("num_heads", "d_head", "context", "num_layers", "batch", "threads",
                               "sdpa_mha_s", "copy_s", "read_s", "read_one_thread_s"))
        groups = [r.num_kv_heads for r in self.rows]
        if len(set(groups)) != len(groups) or self.num_heads not in groups \
                or any(self.num_heads % g for g in groups):
            raise ValueError(f"DecodeBench.rows must be one row per g, each g a divisor of num_heads="
                             f"{self.num_heads} and one of them {self.num_heads} itself (the MHA "
                             f"baseline), got g = {groups}")
        repeats = len(self.sdpa_mha_s)
        methods = list(self.rows[0].samples_s)
        for r in self.rows:
            counts = {m: len(s) for m, s in r.samples_s.items()}
            if list(counts) != methods or "course" not in counts or set(counts.values()) != {repeats}:
                raise ValueError(f"DecodeBench.rows[g={r.num_kv_heads}].samples_s must time the methods "
                                 f"{methods or ['course']} (course among them) with {repeats} samples each "
                                 f"(one per repeat, as sdpa_mha_s), got {counts}")
        for times, size in (("copy_s", "copy_bytes"), ("read_s", "read_bytes"),
                            ("read_one_thread_s", "read_bytes")):
            if getattr(self, times) and getattr(self, size) < 1:
                raise ValueError(f"DecodeBench.{size} must be > 0 when {times} holds times (bytes per "
                                 f"second divide it by them), got {getattr(self, size)}")
            if len(getattr(self, times)) not in (0, repeats):  # timed in the same interleaved run
                raise ValueError(f"DecodeBench.{times} must hold {repeats} samples (one per repeat, as "
                                 f"sdpa_mha_s) or none, got {len(getattr(self, times))}")
        if self.copy_bytes and not self.copy_s:  # bench_decode times the copy it sizes
            raise ValueError(f"DecodeBench.copy_s must hold the copy's times when copy_bytes="
                             f"{self.copy_bytes} (0 when no copy was timed), got []")
        self._check_cache_bytes()

    def _check_cache_bytes(self) -> None:
        """Every row's ``cache_bytes`` is :func:`~course_utils.attention.gqa.kv_cache_bytes` of this
        run's sizes and its ``g``, with one element size for all rows (bench_decode's one ``dtype``,
        which the record does not keep: a floating dtype's bytes, one of :data:`ELEMENT_SIZES`)."""
        sizes = [(r.num_kv_heads, r.cache_bytes, kv_cache_bytes(self.num_layers, self.batch, r.num_kv_heads,
                                                                self.d_head, self.context, 1))
                 for r in self.rows]
        elements = {cache // per_element if cache % per_element == 0 else None
                    for _, cache, per_element in sizes}
        if len(elements) != 1 or elements - set(ELEMENT_SIZES):
            got = {f"g={g}": cache for g, cache, _ in sizes}
            wanted = {f"g={g}": f"{per_element} x element size" for g, _, per_element in sizes}
            raise ValueError(f"DecodeBench.rows' cache_bytes must be kv_cache_bytes(num_layers, batch, g, "
                             f"d_head, context) = 2 x {self.num_layers} x {self.batch} x g x {self.d_head} x "
                             f"{self.context} x one element size of {list(ELEMENT_SIZES)} for every row "
                             f"({wanted}), got {got}")

    def row(self, num_kv_heads: int) -> DecodeRow:
        """The row of ``g = num_kv_heads`` (an int; a ValueError naming the measured g if none)."""
        num_kv_heads = check_int(num_kv_heads, "num_kv_heads", minimum=1)
        for r in self.rows:
            if r.num_kv_heads == num_kv_heads:
                return r
        raise ValueError(f"num_kv_heads must be one of the g measured {[r.num_kv_heads for r in self.rows]}, "
                         f"got {num_kv_heads}")

    @property
    def mha(self) -> DecodeRow:
        return self.row(self.num_heads)

    def speedup(self, num_kv_heads: int, method: str = "course") -> float:
        """Median over repeats of ``time(g = h) / time(g)``, both with ``method``."""
        mha, row = self.mha._samples(method), self.row(num_kv_heads)._samples(method)
        return statistics.median(a / b for a, b in zip(mha, row, strict=True))

    def speedup_over_fastest_mha(self, num_kv_heads: int, method: str) -> float:
        """Median over repeats of ``min over methods of time(g = h) / time(method, g)``: the
        speed-up against whichever method was fastest at ``g = h`` in that repeat."""
        row = self.row(num_kv_heads)._samples(method)
        mha = [min(times) for times in zip(*self.mha.samples_s.values(), self.sdpa_mha_s, strict=True)]
        return statistics.median(a / b for a, b in zip(mha, row, strict=True))

    def noise_warnings(self) -> list[str]:
        """Signs that a run's ratios need a second look: a speed-up beyond the ideal h/g (other
        programs slowed the g = h steps, or that method's g = h step is not memory-bound), or a
        median step far slower than the best one (other programs disturbed the run)."""
        warnings = []
        above = [f"{m} g={r.num_kv_heads} {self.read_share(r.num_kv_heads, m):.0%}"
                 for m in self.mha.samples_s for r in self.rows if self.read_share(r.num_kv_heads, m) > 1.0]
        if above:
            warnings.append(f"check: share of the read-only bandwidth above 100% ({', '.join(above)}): "
                            "that step's cache was partly in the CPU's cache, or the probe was slowed")
        for m in self.mha.samples_s:
            beyond = [r.num_kv_heads for r in self.rows
                      if self.speedup(r.num_kv_heads, m) > 1.05 * self.num_heads / r.num_kv_heads]
            spread = max(r.median_s(m) / r.best_s(m) for r in self.rows)
            if beyond:
                warnings.append(f"check: {m} beats the ideal h/g at g={beyond} (a noisy run, or a "
                                f"g={self.num_heads} step slower than memory allows)")
            if spread > 1.5:
                warnings.append(f"noisy run: a median {m} step took {spread:.1f}x the best one")
        if self.read_one_thread_s and self.threads > 1:
            one = self.read_bytes / min(self.read_one_thread_s) / 1e9
            if self.read_gb_per_s > PROBE_SANITY * one:
                warnings.append(
                    f"check: the {self.threads}-thread read-only probe read {self.read_gb_per_s:.1f} GB/s, "
                    f"{self.read_gb_per_s / one:.1f}x the 1-thread {one:.1f} GB/s (above "
                    f"{PROBE_SANITY}x: the flush may not have evicted the last-level cache, so the "
                    f"shares of it are too low)")
        return warnings

    def ratio_to_sdpa(self, method: str = "course") -> float:
        """Median over repeats of ``time(method, g = h) / time(plain F.sdpa, g = h)``."""
        mine = self.mha._samples(method)
        return statistics.median(a / b for a, b in zip(mine, self.sdpa_mha_s, strict=True))

    @property
    def copy_gb_per_s(self) -> float:
        return self.copy_bytes / min(self._timed("copy_s")) / 1e9

    @property
    def read_gb_per_s(self) -> float:
        """Read-only bandwidth: the probe's fastest repeat (10^9 bytes per GB)."""
        return self.read_bytes / min(self._timed("read_s")) / 1e9

    def _timed(self, name: str) -> tuple[float, ...]:
        """The repeats of one probe, refused with its name when none ran (an empty default)."""
        samples = getattr(self, name)
        if not samples:
            raise ValueError(f"DecodeBench.{name} is empty: that probe was not timed in this run")
        return samples

    def read_share(self, num_kv_heads: int, method: str = "course") -> float:
        """The step's best cache GB/s as a share of the read-only bandwidth (1 = the limit)."""
        return self.row(num_kv_heads).gb_per_s(method) / self.read_gb_per_s

    def format(self) -> str:
        """The decode tables as text (lines under 100 characters)."""
        methods = [m for m in SHARING_METHODS if m in self.mha.samples_s]  # those measured
        head = f"{'g':>3} {'cache MiB':>9} | " + " | ".join(f"{m + ' ms':>15}" for m in methods)
        lines = [
            f"one decode step, B={self.batch}, h={self.num_heads} x {self.d_head}, context "
            f"{self.context}, {self.num_layers} layers, {self.threads} thread{'s' * (self.threads != 1)}; "
            "ms = best / median",
            head, "-" * len(head),
        ]
        for r in self.rows:
            cells = [f"{r.best_s(m) * 1e3:6.2f} / {r.median_s(m) * 1e3:6.2f}" for m in methods]
            lines.append(f"{r.num_kv_heads:>3} {r.cache_bytes / MiB:>9.0f} | " + " | ".join(cells))
        shown = [m for m in ("course", "fused") if m in methods]
        head = f"{'g':>3} | " + " | ".join(f"{m + ' speed-up':>14} {'GB/s':>5}" for m in shown)
        if "fused" in shown:
            head += f" | {'fused vs fastest at g=' + str(self.num_heads):>25}"
        lines += ["", "speed-up over g=h, same method (median of paired ratios; ideal h/g); "
                  "GB/s = cache / best time", head, "-" * len(head)]
        for r in self.rows:
            g = r.num_kv_heads
            line = f"{g:>3} | " + " | ".join(f"{self.speedup(g, m):>13.2f}x {r.gb_per_s(m):>5.1f}"
                                              for m in shown)
            if "fused" in shown:
                line += f" | {self.speedup_over_fastest_mha(g, 'fused'):>24.2f}x"
            lines.append(line)
        sdpa = self.sdpa_mha_s
        lines += [
            "",
            f"plain F.sdpa at g={self.num_heads}: {min(sdpa) * 1e3:.2f} / "
            f"{statistics.median(sdpa) * 1e3:.2f} ms; course / F.sdpa (median of paired ratios) "
            f"{self.ratio_to_sdpa():.2f}",
            *textwrap.wrap(f"read-only bandwidth: {self.read_gb_per_s:.1f} GB/s ({self.yardstick}, "
                           f"{self.read_bytes // MiB} MiB of random float32; last-level cache "
                           f"{self.llc[0] // MiB} MiB, flush {self.flush_bytes // MiB} MiB)", 99,
                           subsequent_indent="    "),
            *textwrap.wrap("conditions of every share below: "
                           f"{self.conditions or run_conditions(self.threads)}", 99,
                           subsequent_indent="    "),
        ]
        lines += textwrap.wrap("share of it (cache bytes / best step / read-only bandwidth): " + "; ".join(
            f"{m} " + ", ".join(f"g={r.num_kv_heads} {self.read_share(r.num_kv_heads, m):.0%}"
                                for r in self.rows) for m in shown), 99, subsequent_indent="    ")
        if self.copy_s:
            lines.append(f"copy bandwidth ({self.copy_bytes // 2 // MiB} MiB, read + write, for "
                         f"reference): {self.copy_gb_per_s:.1f} GB/s")
        for note in (self.allocator, *self.notes, *filter(None, [self.flush_note]), *self.noise_warnings()):
            lines += textwrap.wrap(note, 99, subsequent_indent="    ")
        return "\n".join(lines)


def _check_config(num_heads: int, d_head: int, context: int, num_layers: int, batch: int,
                  groups: Sequence[int]) -> tuple[int, ...]:
    """The sizes checked and returned as Python ints (``num_heads, d_head, context, num_layers,
    batch``), so that the byte counts made from them are exact (NumPy int64 products wrap)."""
    sizes = tuple(check_int(value, name, minimum=1) for name, value in (
        ("num_heads", num_heads), ("d_head", d_head), ("context", context), ("num_layers", num_layers),
        ("batch", batch)))
    groups = check_int_list(groups, "groups", minimum=1)  # None, a str or floats: named here
    bad = [g for g in groups if isinstance(g, bool) or not isinstance(g, int) or g <= 0
           or num_heads % g != 0]
    if not groups or bad or num_heads not in groups:
        raise ValueError(f"groups must be divisors of num_heads={num_heads} including "
                         f"{num_heads} itself (the MHA baseline), got {list(groups)}")
    check_distinct(groups, "groups", "head-group counts")  # as bench_whole_step: a repeat, its rows twice
    return sizes


def make_kv_caches(
    num_heads: int, d_head: int, context: int, num_layers: int, groups: Sequence[int], *,
    batch: int = 1, seed: int = 0, device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
) -> tuple[list[Tensor], dict[int, list[tuple[Tensor, Tensor]]]]:
    """Queries ``(B, h, 1, dk)`` per layer and, for each ``g``, per-layer ``(k, v)``
    ``(B, g, T, dk)``. With ``B = 1`` every ``g``'s cache is a contiguous view of the first
    ``g`` heads of the MHA cache, so the caches of all ``g`` together take the MHA's memory."""
    groups = check_int_list(groups, "groups", minimum=1)  # read once: a generator (battery 28)
    num_heads, d_head, context, num_layers, batch = _check_config(num_heads, d_head, context, num_layers,
                                                                  batch, groups)
    check_device(device, "device")
    check_float_dtype(dtype, "dtype")
    seed = check_seed(seed)  # before torch.manual_seed: a bool, float or str is named here
    itemsize = torch.empty((), dtype=dtype).element_size()
    # at least the MHA cache (the caches of the other g are views of it when batch = 1)
    num_bytes = kv_cache_bytes(num_layers, batch, num_heads, d_head, context, itemsize)
    check_fits_in_memory(num_bytes, None, f"{num_layers} layers of keys and values in {dtype}: "
                                          f"{num_bytes:,} bytes",
                         sizes={"num_layers": num_layers, "batch": batch, "num_heads": num_heads,
                                "context": context, "d_head": d_head})
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)

    queries = [randn(batch, num_heads, 1, d_head) for _ in range(num_layers)]
    full = [(randn(batch, num_heads, context, d_head), randn(batch, num_heads, context, d_head))
            for _ in range(num_layers)]
    caches = {g: [(k[:, :g].contiguous(), v[:, :g].contiguous()) for k, v in full] for g in groups}
    return queries, caches


#: ``bench_decode``'s quick default (the lesson's) and its full run (``full=True``).
DECODE_RUNS = {"quick": dict(groups=(16, 4, 1), repeats=5, warmup=1),
               "full": dict(groups=(16, 8, 4, 2, 1), repeats=15, warmup=2)}


def bench_decode(
    num_heads: int = 16,
    d_head: int = 64,
    context: int = 4096,
    num_layers: int = 8,
    groups: Sequence[int] | None = None,
    *,
    batch: int = 1,
    repeats: int | None = None,
    warmup: int | None = None,
    methods: Sequence[str] = tuple(SHARING_METHODS),
    copy_mib: int = 64,
    flush_multiple: int = 4,
    num_threads: int | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    full: bool = False,
    progress: bool = True,
) -> DecodeBench:
    """Time one decode step (all layers) for every ``g`` in ``groups`` and every method, plus
    plain ``F.scaled_dot_product_attention`` at ``g = h``, the read-only probe
    (:func:`~course_utils.bench.decode_step.make_read_probe` over a buffer of
    :func:`~course_utils.bench.decode_step.flush_bytes` ``(flush_multiple)``: that many times the
    last-level cache, capped) and, if ``copy_mib > 0``, a copy of ``copy_mib`` MiB (at most the
    probe's size; ``copy_mib=0`` leaves the copy out of the run), all
    interleaved in one run, each call after a flush of that size too. With more than one
    thread the probe is also timed on one (a sanity check, see :meth:`DecodeBench.noise_warnings`).

    ``groups``, ``repeats`` and ``warmup`` left as None come from ``DECODE_RUNS["quick"]``
    (g = 16, 4, 1; 1 + 5 rounds: the lesson's) or, with ``full=True``, ``["full"]`` (g = 16, 8,
    4, 2, 1; 2 + 15 rounds). ``progress`` shows a text progress bar (tqdm) over the rounds.
    ``full`` and ``progress`` are bools (a string such as ``"no"`` is refused, not taken as True)."""
    check_flag(full, "full")
    check_flag(progress, "progress")
    copy_mib = check_int(copy_mib, "copy_mib", minimum=0)
    flush_multiple = check_int(flush_multiple, "flush_multiple", minimum=1,  # flush_bytes's
                               maximum=MAX_FLUSH_MULTIPLE)
    device = check_device(device, "device")  # '' or b'cpu' named here, not by torch.device
    run = DECODE_RUNS["full" if full else "quick"]
    groups = run["groups"] if groups is None else check_int_list(groups, "groups", minimum=1)  # read once
    repeats = run["repeats"] if repeats is None else repeats
    warmup = run["warmup"] if warmup is None else warmup
    repeats, warmup, _ = check_round_counts(repeats, warmup)  # before the caches and the bar
    methods = check_distinct(methods, "methods", "method names such as 'course'")  # None, 'course'
    methods = [check_choice(m, f"methods[{i}]", tuple(SHARING_METHODS)) for i, m in enumerate(methods)]
    if "course" not in methods:
        raise ValueError(f"methods must include 'course' and come from {list(SHARING_METHODS)}, "
                         f"got {shown_value(methods, 120)}")
    notes = []
    d_head = check_int(d_head, "d_head", minimum=1)  # before _fused_unavailable prints it (battery 31)
    dtype = check_float_dtype(dtype, "dtype")  # so is dtype
    if "fused" in methods and (why := _fused_unavailable(d_head, device, dtype)):
        methods, notes = [m for m in methods if m != "fused"], [why]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    allocator = steady_allocator() if device.type == "cpu" else ""
    queries, caches = make_kv_caches(num_heads, d_head, context, num_layers, groups, batch=batch,
                                     device=device, dtype=dtype)
    llc = last_level_cache_bytes()
    size = flush_bytes(flush_multiple)
    flush = random_buffer(size, seed=1).to(device)  # evicts the LLC when read
    probe = random_buffer(size, seed=2).to(device)  # the read-only probe
    copy_source = probe[:max(0, min(copy_mib * MiB // 4, probe.numel()))]
    copy_target = torch.zeros_like(copy_source)  # pages touched now, not inside the timing

    def step(attend: Callable, g: int) -> Callable[[], None]:
        def run() -> None:
            for q, (k, v) in zip(queries, caches[g], strict=True):  # layer after layer
                attend(q, k, v)
        return run

    fns: dict[tuple[str, int], Callable[[], object]] = {}
    for g in groups:
        for m in methods:
            fns[(m, g)] = step(_ATTEND[m], g)
    fns[("sdpa", num_heads)] = step(F.scaled_dot_product_attention, num_heads)
    if copy_mib > 0:
        fns[("copy", 0)] = lambda: copy_target.copy_(copy_source)
    with torch_threads(num_threads), torch.inference_mode():
        threads = torch.get_num_threads()
        fns[("read", 0)], yardstick = (make_read_probe(probe, threads) if device.type == "cpu"
                                       else (probe.sum, "torch.sum on the GPU"))
        if threads > 1:  # the probe's sanity check (see noise_warnings)
            read1 = make_read_probe(probe, 1)[0] if device.type == "cpu" else probe.sum

            def read_one_thread() -> None:
                with torch_threads(1):
                    read1()
            fns[("read1", 0)] = read_one_thread
        with tqdm(total=warmup + repeats, desc="decode steps", unit="round", leave=False,
                  disable=not progress) as bar:
            samples = interleaved_samples(fns, warmup=warmup, repeats=repeats, before_each=flush.sum,
                                          sync=sync, after_round=bar.update,  # every call starts cold
                                          clock=clock_for(threads) if device.type == "cpu" else None)
    flush_size = flush.numel() * flush.element_size()
    queries = caches = flush = copy_target = None  # noqa: F841  (the closures in fns hold them)
    fns.clear()
    if device.type == "cpu":
        release_freed_memory()  # the caches are gone: give their memory back
    element = torch.tensor([], dtype=dtype).element_size()
    rows = [DecodeRow(g, kv_cache_bytes(num_layers, batch, g, d_head, context, element),
                      {m: samples[(m, g)] for m in methods}) for g in groups]
    return DecodeBench(num_heads, d_head, context, num_layers, batch, threads, rows,
                       samples[("sdpa", num_heads)], samples.get(("copy", 0), []),
                       2 * copy_source.numel() * copy_source.element_size(), allocator, notes,
                       samples[("read", 0)], probe.numel() * probe.element_size(), llc,
                       flush_size, samples.get(("read1", 0), []), yardstick, run_conditions(threads),
                       flush_note(flush_size, flush_multiple))


def _flush_size(flush_mib: int | None) -> int:
    """Bytes of the buffer that evicts the last-level cache: ``flush_mib`` MiB, or
    :func:`~course_utils.bench.decode_step.flush_bytes` (four times the cache found, capped).
    ``flush_mib`` is checked here, under its own name: ``None`` or an int >= 1 that fits in memory."""
    if flush_mib is None:
        return flush_bytes()
    flush_mib = check_int(flush_mib, "flush_mib", minimum=1)
    check_fits_in_memory(flush_mib * MiB, "flush_mib", f"a flush buffer of {flush_mib} MiB")
    return flush_mib * MiB


def _scores(q_rows: Tensor, keys: Tensor) -> Tensor:
    """The scores stage as :func:`grouped_query_attention` computes it: ``K @ q_rows^T``,
    transposed back and made contiguous. ``(g, r, dk), (g, T, dk) -> (g, r, T)``."""
    return torch.bmm(keys, q_rows.transpose(1, 2)).transpose(1, 2).contiguous()


def stage_times(
    groups: Sequence[int] = (16, 4), *, num_heads: int = 16, d_head: int = 64, context: int = 4096,
    num_layers: int = 8, repeats: int = 11, flush_mib: int | None = None,
) -> dict[str, dict[int, float]]:
    """Best CPU time (s) of each stage of the course's grouped decode step, summed over layers:
    ``scores`` (q rows @ K^T), ``softmax``, ``weights @ V``; interleaved over ``groups``.

    One thread, timed with ``time.thread_time`` (CPU time of this thread), so other programs
    on a busy machine barely change the figures; a ``flush_mib`` buffer (default: four times
    the last-level cache) is read before every
    timed call so that no stage finds its data in the last-level cache. Shows which stage
    keeps the small-``g`` step from shrinking as fast as its cache."""
    groups = check_int_list(groups, "groups", minimum=1)  # read once: a generator (battery 28)
    repeats = check_round_counts(repeats)[0]
    queries, caches = make_kv_caches(num_heads, d_head, context, num_layers, groups)
    flush = random_buffer(_flush_size(flush_mib), seed=1)
    prepared = {}
    for g in groups:
        per_layer = []
        for q, (k, v) in zip(queries, caches[g], strict=True):
            q_rows = q.reshape(g, num_heads // g, d_head)  # (g, h/g, dk)
            keys, values = k.reshape(g, context, d_head), v.reshape(g, context, d_head)
            scores = _scores(q_rows, keys)  # (g, h/g, T)
            per_layer.append((q_rows, keys, values, scores, torch.softmax(scores, -1)))
        prepared[g] = per_layer
    stages = {
        "scores": lambda layers: [_scores(q, k) for q, k, _, _, _ in layers],
        "softmax": lambda layers: [torch.softmax(s, -1) for _, _, _, s, _ in layers],
        "weights @ V": lambda layers: [torch.bmm(w, v) for _, _, v, _, w in layers],
    }
    best = {name: {g: float("inf") for g in groups} for name in stages}
    with torch_threads(1), torch.inference_mode():
        for _ in range(repeats):
            for name, stage in stages.items():
                for g in groups:
                    flush.sum()
                    start = time.thread_time()
                    stage(prepared[g])
                    best[name][g] = min(best[name][g], time.thread_time() - start)
    return best


@dataclass(frozen=True)
class StageRow:
    """One stage of the decode step at one ``g``: best one-thread CPU time and bytes moved. Frozen,
    as the other bench records: a row checked once stays valid (``gb_per_s`` divides by
    ``seconds``)."""

    stage: Literal["scores", "softmax", "weights @ V", "read K and V"]  # stage_bandwidth's stages
    num_kv_heads: int
    seconds: float
    bytes_moved: int  # bytes read + written by the stage, summed over layers

    def __post_init__(self) -> None:
        # gb_per_s divides by seconds; a g or a stage that moved 0 bytes is no measurement
        freeze_fields(self)
        check_record(self, positive=("num_kv_heads", "seconds", "bytes_moved"))

    @property
    def gb_per_s(self) -> float:
        return self.bytes_moved / self.seconds / 1e9


def stage_bandwidth(
    groups: Sequence[int] = (16, 4), *, num_heads: int = 16, d_head: int = 64, context: int = 4096,
    num_layers: int = 8, repeats: int = 11, flush_mib: int | None = None,
) -> tuple[list[StageRow], float]:
    """Where the decode step's time goes: :func:`stage_times` plus two yardsticks, as
    ``(rows, copy GB/s)``. Each row has the stage's bytes (float32, read + written, summed
    over layers) and the GB/s it reached. ``read K and V`` is a bare ``sum`` of the cache,
    the fastest one thread streams it; the copy figure is one thread's ``dst.copy_(src)``
    of ``flush_mib`` MiB. A stage well below the ``read`` row is limited by its kernel,
    not by memory."""
    groups = check_int_list(groups, "groups", minimum=1)  # read once: a generator (battery 28)
    best = stage_times(groups, num_heads=num_heads, d_head=d_head, context=context,
                       num_layers=num_layers, repeats=repeats, flush_mib=flush_mib)
    _, caches = make_kv_caches(num_heads, d_head, context, num_layers, groups)
    flush = random_buffer(_flush_size(flush_mib), seed=1)
    target = torch.zeros_like(flush)
    read_s = {g: float("inf") for g in groups}
    copy_s = float("inf")
    with torch_threads(1), torch.inference_mode():
        for _ in range(repeats):
            for g in groups:
                flush.sum()
                start = time.thread_time()
                for k, v in caches[g]:
                    k.sum(), v.sum()
                read_s[g] = min(read_s[g], time.thread_time() - start)
            start = time.thread_time()
            target.copy_(flush)
            copy_s = min(copy_s, time.thread_time() - start)
    rows = []
    for g in groups:
        cache = num_layers * g * context * d_head * 4  # bytes of K (or of V), all layers
        weights = num_layers * num_heads * context * 4  # bytes of the scores (or weights)
        moved = {"scores": cache + weights, "softmax": 2 * weights, "weights @ V": cache + weights}
        rows += [StageRow(name, g, best[name][g], moved[name]) for name in best]
        rows.append(StageRow("read K and V", g, read_s[g], 2 * cache))
    return rows, 2 * flush.numel() * 4 / copy_s / 1e9


def _print_stages(groups: Sequence[int], context: int, num_layers: int, repeats: int) -> None:
    rows, copy_gb_per_s = stage_bandwidth(groups, context=context, num_layers=num_layers,
                                          repeats=repeats)
    print(f"stages, one thread, CPU time, best of {repeats}; copy: {copy_gb_per_s:.1f} GB/s")
    print(f"{'stage':>13} {'g':>3} {'ms':>7} {'MiB':>6} {'GB/s':>5}")
    for r in rows:
        print(f"{r.stage:>13} {r.num_kv_heads:>3} {r.seconds * 1e3:7.2f} "
              f"{r.bytes_moved / MiB:6.1f} {r.gb_per_s:5.1f}")


#: The command line's whole-step shapes as ``(batch, multiple of --context)``: a quarter of the
#: context, the context itself and four times it at B = 1, and a batch of 8 at the context.
WHOLE_STEP_SHAPES: tuple[tuple[int, float], ...] = ((1, 0.25), (1, 1), (1, 4), (8, 1))


def small_cache_note(context: int, num_layers: int, num_heads: int = 16, d_head: int = 64) -> str | None:
    """A warning when the largest KV cache the command reads (MHA's, float32) is smaller than
    the CPU's last-level cache: each step then costs mostly its fixed per-call work, so its
    time and GB/s say little about reading memory. None when the cache is larger."""
    context, num_layers, num_heads, d_head = (check_int(value, name, minimum=1) for name, value in (
        ("context", context), ("num_layers", num_layers), ("num_heads", num_heads), ("d_head", d_head)))
    cache = 2 * num_layers * num_heads * context * d_head * 4  # K and V, every layer, float32
    llc, _ = last_level_cache_bytes()
    if cache >= llc:
        return None
    text = (f"note: at --context {context} the MHA KV cache is {cache / 1024:.0f} KiB, smaller than this "
            f"CPU's last-level cache ({llc / MiB:.0f} MiB): the times below are mostly fixed per-call "
            f"work, not memory reads, and GB/s figures are not bandwidth")
    return textwrap.fill(text, width=96, subsequent_indent="  ") + "\n\n"


def _check_gqa_fits(args: argparse.Namespace) -> None:
    """The memory the ``gqa`` command's options ask for, checked when they are parsed (a
    ValueError naming the option): the MHA cache :func:`bench_decode` reads at ``--context``, and
    each whole-step shape's largest decoder (g = h). Without this a shape too large for the
    machine was refused only when its turn came, after the other benchmarks had run. Options that
    only shape the whole step (``--bf16``, ``--shapes``) are refused with ``--no-whole-step``:
    there is no whole step for them to change, and the run would drop them without a word."""
    if not args.whole_step:
        ignored = [name for name, given in (("--bf16", args.bf16), ("--shapes", args.shapes is not None))
                   if given]
        if ignored:
            names, verb = " and ".join(ignored), "they only shape" if len(ignored) > 1 else "it only shapes"
            raise ValueError(f"{names} would be ignored: {verb} the whole-step timings, which "
                             f"--no-whole-step turns off; drop {names} or --no-whole-step")
    num_bytes = 2 * args.layers * 16 * args.context * 64 * 4  # bench_decode's MHA cache, float32
    check_fits_in_memory(num_bytes, f"--context {args.context}", f"{args.layers} layers of float32 keys "
                         f"and values of 16 heads of width 64: {num_bytes:,} bytes")
    if args.whole_step and args.shapes is None:  # shapes made from --context: a repeat is its fault
        repeated = _repeated_shapes(_whole_step_shapes(args))
        if repeated:  # bench_whole_step refused them after the decode benchmark had run (a traceback)
            default = WHOLE_STEP_SHAPES if args.full else WHOLE_STEP_SHAPES[:2]
            shortest = next(t for t in range(args.context + 1, 2 * len(default) + 2)
                            if not _repeated_shapes(_whole_step_shapes(argparse.Namespace(
                                full=args.full, shapes=None, context=t))))
            raise ValueError(f"--context {args.context} is too short for the default whole-step shapes "
                             f"BxT {', '.join(f'{b}x{m:g}*T' for b, m in default)}: they give "
                             f"{', '.join(repeated)} more than once; give --context {shortest} or more, "
                             f"--shapes, or --no-whole-step")
    if args.whole_step:
        for batch, context in _whole_step_shapes(args):  # the g = h decoder: the largest cache
            blamed = (f"--layers {args.layers}", f"--context {args.context}") if args.shapes is None \
                else (f"--shapes {batch}x{context}",) * 2
            check_decoder_fits(1024, 16, 16, args.layers, context=context, batch=batch, names=blamed)


def _repeated_shapes(shapes: tuple[tuple[int, int], ...]) -> list[str]:
    """The shapes that come more than once in ``shapes``, as ``BxT``."""
    return sorted({f"{b}x{t}" for i, (b, t) in enumerate(shapes) if (b, t) in shapes[:i]})


def _whole_step_shapes(args: argparse.Namespace) -> tuple[tuple[int, int], ...]:
    """The whole-step shapes the command times: ``--shapes``, else :data:`WHOLE_STEP_SHAPES`."""
    default = WHOLE_STEP_SHAPES if args.full else WHOLE_STEP_SHAPES[:2]
    return tuple(args.shapes or ((b, max(1, int(m * args.context))) for b, m in default))


def _main_gqa(args: argparse.Namespace) -> None:
    args.repeats = args.repeats or DECODE_RUNS["full" if args.full else "quick"]["repeats"]
    capability = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "unknown")()
    print(f"torch {torch.__version__}, CPU kernels: {capability}\n"
          f"every method at every g interleaved repeat by repeat; {args.repeats} repeats\n")
    print(small_cache_note(args.context, args.layers) or "", end="")
    result = bench_decode(context=args.context, num_layers=args.layers, repeats=args.repeats,
                          num_threads=args.threads, full=args.full)
    print("ATTENTION ONLY (no weights): the KV cache read by one decode step\n")
    print(result.format())
    print()
    for method, text in SHARING_METHODS.items():
        print(f"{method:>10}: {text}")
    if args.stages:
        print()
        _print_stages((16, 4), args.context, args.layers, args.repeats)
    if args.whole_step:
        shapes = _whole_step_shapes(args)
        print("\nWHOLE STEP: weights (d=1024, 4d MLP, no LM head) + KV cache, one token per sequence\n")
        for dtype in (torch.float32, *([torch.bfloat16] if args.bf16 else [])):
            whole = bench_whole_step(shapes, (16, 8, 4, 1) if args.full else (16, 4, 1),
                                     num_layers=args.layers, repeats=args.repeats,
                                     num_threads=args.threads, weight_dtype=dtype, full=args.full)
            print(whole.format())
            print()


def add_bench_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``python -m course_utils.bench gqa``."""
    from .cli import (
        Distinct,
        batch_by_context,
        check_subparsers,
        context_length,
        layer_count,
        repeat_count,
        thread_count,
    )

    check_subparsers(subparsers, "gqa")

    p = subparsers.add_parser("gqa", help="decode step through KV caches: MHA vs GQA vs MQA")
    p.add_argument("--full", action="store_true",
                   help="the full run: g = 16, 8, 4, 2, 1 and four whole-step shapes (the default "
                   "is quick: g = 16, 4, 1, 5 repeats, two shapes)")
    p.add_argument("--repeats", type=repeat_count, default=None,
                   help="repeats (default: 5, or 15 with --full)")
    p.add_argument("--context", type=context_length, default=4096)
    p.add_argument("--layers", type=layer_count, default=8)
    p.add_argument("--threads", type=thread_count, default=None,
                   help="CPU threads for torch (default: torch's choice)")
    p.add_argument("--stages", action="store_true",
                   help="also time each stage (one thread, CPU time) with its bytes and GB/s")
    p.add_argument("--whole-step", action=argparse.BooleanOptionalAction, default=True,
                   help="also time whole decode steps (weights + cache) against their byte bound")
    p.add_argument("--shapes", type=batch_by_context, nargs="+", default=None, metavar="BxT", action=Distinct,
                   help="whole-step shapes, batch x context (default with --context 4096: 1x1024 "
                   "1x4096, and with --full also 1x16384 8x4096)")
    p.add_argument("--bf16", action="store_true",
                   help="also time the whole step with bfloat16 weights (half the weight bytes)")
    p.set_defaults(run=_main_gqa, check=_check_gqa_fits)


def _check_time_cold(steps: object, baseline: object, flush_bytes: object, progress: object) -> None:
    """What :func:`time_cold` needs, each refused under its own name before anything is
    allocated: a non-empty dict of functions of no arguments (``steps``) holding ``baseline``, a
    ``flush_bytes`` of None or an int >= 4 that fits in memory, and a ``progress`` label that is a
    str or None."""
    if not isinstance(steps, dict) or not steps:
        raise ValueError(f"steps must be a non-empty dict name -> function of no arguments, got "
                         f"{type(steps).__name__} {shown_value(steps, 60)}")
    _check_functions(steps, "steps")
    check_function_name(baseline, "baseline", steps, "the names of steps")
    if flush_bytes is not None:
        flush_bytes = check_int(flush_bytes, "flush_bytes", minimum=4)
        check_fits_in_memory(flush_bytes, "flush_bytes", "a float32 buffer read before every timed call")
    if progress is not None and not isinstance(progress, str):
        raise TypeError(f"progress must be a str (the progress bar's label) or None (no bar), got "
                        f"{type(progress).__name__} {shown_value(progress, 60)}")


def time_cold(steps: dict[str, Callable[[], object]], *, baseline: str, repeats: int = 9,
              warmup: int = 2, flush_bytes: int | None = None,
              progress: str | None = "timing steps") -> tuple[list, str]:
    """Time ``steps`` interleaved, as :func:`course_utils.bench.time_interleaved` does, but the
    way section 3 times attention: glibc's malloc kept steady
    (:func:`~course_utils.bench.gqa_speed.steady_allocator`, so a ``torch.cat`` pays for copying,
    not for fresh pages from the operating system) and a buffer of ``flush_bytes`` (default:
    :func:`~course_utils.bench.decode_step.flush_bytes`, four times the last-level cache, at most
    256 MiB) read before every timed call, so no call finds the cache already in the CPU's
    cache. On one torch thread the time is that thread's CPU time
    (:func:`~course_utils.bench.decode_step.clock_for`: moments when other programs held the
    CPU do not count), otherwise the wall clock. ``progress`` labels a text progress bar over
    the rounds (None: no bar). Returns the
    timings (for :func:`~course_utils.bench.format_spread_table`) and the allocator's one-line
    note."""
    _check_time_cold(steps, baseline, flush_bytes, progress)
    repeats, warmup, _ = check_round_counts(repeats, warmup)  # before the bar adds them
    allocator = steady_allocator()
    flush = random_buffer(flush_bytes_default() if flush_bytes is None else flush_bytes, seed=1)
    with tqdm(total=warmup + repeats, desc=progress, unit="round", leave=False,
              disable=progress is None) as bar:
        samples = time_flushed(steps, flush, warmup, repeats, after_round=bar.update,  # each call cold
                               clock=clock_for(torch.get_num_threads()))
    del flush
    release_freed_memory()
    return timings_from_samples(samples, baseline), allocator

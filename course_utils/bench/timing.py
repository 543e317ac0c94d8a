"""The timing core every benchmark of the course uses.

:func:`interleaved_samples` runs several functions repeat by repeat (each repeat runs every one
of them back to back), so a machine that speeds up or slows down affects all of them alike;
:func:`time_interleaved` wraps it into :class:`Timing` rows, :func:`ratio_spread` says how
much a ratio varied from repeat to repeat, and two formatters print the tables.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import torch

from ..attention.validation import (
    check_callable,
    check_distinct,
    check_int,
    check_real,
    check_record,
    finite,
    freeze_fields,
    is_real,
    items_of,
    plain_str,
    real_number,
    shown,
)

Key = TypeVar("Key", bound=Hashable)  # a function's name in a timing: a str, a tuple, ...


__all__ = [
    "Timing",
    "MAX_REPEATS",
    "check_round_counts",
    "check_function_name",
    "clock_elapsed",
    "check_clock_advanced",
    "interleaved_samples",
    "time_interleaved",
    "timings_from_samples",
    "format_table",
    "paired_ratios",
    "RatioSpread",
    "ratio_spread",
    "format_spread_table",
]


@dataclass(frozen=True)
class Timing:
    """One function's timing: its median time per call and its ratio to the baseline's median.

    ``median_s`` and ``ratio`` are finite and > 0: a table divides by the median (a ratio to it,
    GB/s), and a median of 0 s means the clock did not advance around the calls, no time at all.
    One sample may be 0 s (``samples_s`` items are finite and >= 0): a clock coarser than one
    call (:func:`time.thread_time` on Windows ticks every 15.6 ms) reads 0 for some repeats of a
    fast call and not for others, and only the median is divided by here
    (:func:`paired_ratios` refuses a zero baseline sample itself, naming its repeat). ``name`` is a
    non-empty str or tuple (a table prints it). Frozen: ``samples_s`` is kept as a tuple, so a
    Timing checked once stays valid."""

    name: str | tuple  # a label, or a tuple of settings (lesson 07 times (N, cached) pairs)
    median_s: float
    ratio: float  # median / baseline median
    samples_s: tuple[float, ...] = dataclasses.field(default=(), repr=False)  # every repeat, in order

    def __post_init__(self) -> None:
        """Times are durations: finite, the median and the ratio > 0, each sample >= 0 (a clock
        that ran backwards or returned NaN would otherwise rank as the fastest, or as nothing)."""
        freeze_fields(self)
        if not isinstance(self.samples_s, list | tuple):
            raise TypeError(f"Timing({shown(self.name)}).samples_s must be a list of seconds (every repeat), "
                            f"got {type(self.samples_s).__name__} {shown(self.samples_s, 60)}")
        for label, value in (("median_s", self.median_s), ("ratio", self.ratio)):  # kept as Python floats
            object.__setattr__(self, label, _check_duration(value, f"Timing({shown(self.name)}).{label}",
                                                            positive=True))
        object.__setattr__(self, "samples_s", tuple(
            _check_duration(value, f"Timing({shown(self.name)}).samples_s[{i}]")
            for i, value in enumerate(self.samples_s)))
        check_record(self, nonempty=("name",))  # the rest: name is a non-empty str or tuple
        _check_hashable_name(self.name)
        # a table prints median_s and best_s side by side: they describe the same samples
        if self.samples_s and not _close(self.median_s, statistics.median(self.samples_s)):
            raise ValueError(f"Timing({shown(self.name)}).median_s must be the median of its samples_s "
                             f"({shown(statistics.median(self.samples_s))} s over {len(self.samples_s)} "
                             f"repeats), got {shown(self.median_s)}")

    @property
    def best_s(self) -> float:
        """The fastest repeat: other work on the machine can only ever add time. A Timing made
        without its samples (``samples_s=[]``) has only its median, returned instead."""
        return min(self.samples_s) if self.samples_s else self.median_s


def _check_hashable_name(name: str | tuple) -> None:
    """A Timing's ``name`` labels a row (a table indexes by it, a dict keys on it): a tuple of
    settings must hold only hashable items, not a list or a dict."""
    try:
        hash(name)
    except TypeError:
        odd = next((i for i, item in enumerate(name) if not _hashable(item)), None)
        which = "" if odd is None else (f", whose item [{odd}] is {type(name[odd]).__name__} "
                                        f"{shown(name[odd], 60)}")
        raise TypeError(f"Timing.name must be a str or a tuple of hashable settings (a table indexes its "
                        f"rows by it: str, numbers, tuples of those), got {type(name).__name__} "
                        f"{shown(name, 80)}{which}") from None


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _check_duration(value: object, name: str, *, positive: bool = False) -> float:
    """A time (or a ratio of times): a real number (:func:`is_real`: a NumPy float too), finite
    and >= 0 (> 0 when ``positive``: one that is divided by); returned as a Python float. Not a
    number: a TypeError; out of range: a ValueError; both name ``name``."""
    number = real_number(value, name, "a number of seconds")
    if not (finite(number) and (number > 0 if positive else number >= 0)):
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, got "
                         f"{shown(value)}")
    return number


def _close(a: float, b: float, rel: float = 1e-9) -> bool:
    """``a`` and ``b`` agree but for rounding (a record's field recomputed from its others)."""
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)


def _check_functions(fns: object, name: str = "fns") -> None:
    """``fns`` is a non-empty mapping name -> function of no arguments; errors call it ``name``
    (a caller's own argument, such as :func:`~course_utils.bench.gqa_speed.time_cold`'s ``steps``)."""
    if not isinstance(fns, Mapping):
        raise TypeError(f"{name} must be a mapping name -> function of no arguments (a dict), got "
                        f"{type(fns).__name__} {shown(fns, 60)}")
    if not fns:
        raise ValueError(f"{name} must name at least one function to time")
    for key, fn in fns.items():
        check_callable(fn, f"{name}[{shown(key)}]", "a function of no arguments", nargs=0)


#: The most timed rounds (``repeats``), warm-up rounds (``warmup``) or calls per sample
#: (``inner``) any timing of the course runs: every round calls every function, so a mistyped
#: 10**12 would run until killed. One cap for the Python functions and the command lines'
#: ``--repeats`` (:func:`course_utils.bench.cli.repeat_count`).
MAX_REPEATS = 10_000


def check_round_counts(repeats: object, warmup: object = 0, inner: object = 1) -> tuple[int, int, int]:
    """A timing's counts: ``repeats`` in 1..:data:`MAX_REPEATS`, ``warmup`` in 0..MAX_REPEATS,
    ``inner`` in 1..MAX_REPEATS; returned as Python ints, checked before anything is built or run
    (a progress bar's total, a buffer)."""
    counts = {"repeats": (repeats, 1), "warmup": (warmup, 0), "inner": (inner, 1)}
    # the lower bound first, so that 0 reads "must be a positive int", 10**12 "must be an int <= 10000"
    return tuple(check_int(check_int(value, name, minimum=low), name, maximum=MAX_REPEATS)
                 for name, (value, low) in counts.items())


def interleaved_samples(
    fns: Mapping[Key, Callable[[], object]],
    *,
    repeats: int,
    warmup: int,
    inner: int = 1,
    before_each: Callable[[], object] | None = None,
    sync: Callable[[], object] | None = None,
    after_round: Callable[[], object] | None = None,
    clock: Callable[[], float] | None = None,
) -> dict[Key, list[float]]:
    """The timing core: seconds per call of each function, one sample per repeat.

    ``warmup`` rounds call every function once (untimed). Then each of ``repeats`` rounds
    times every function in turn (A, B, C, A, B, C, ...), so a machine that speeds up or
    slows down affects all of them alike. Per sample, outside the timed region:
    ``before_each()`` (e.g. a read that evicts the cache), then ``sync()``; inside it:
    ``inner`` calls, then ``sync()`` (e.g. ``torch.cuda.synchronize``) before the clock is
    read. ``after_round()`` runs after every round, warm-up rounds included (e.g. a progress
    bar's ``update``). ``clock`` reads the time (default :func:`time.perf_counter`, the wall
    clock); :func:`time.thread_time` counts only the time this thread ran, so moments when other
    programs held the CPU do not count: right for work that runs on this one thread only. A
    clock that reads NaN or runs backwards (:func:`clock_elapsed`), or never advances over the
    whole run (:func:`check_clock_advanced`), is a ValueError naming ``clock``. The loop's
    variables die with this call, so no function outlives the run here.
    """
    _check_functions(fns)
    repeats, warmup, inner = check_round_counts(repeats, warmup, inner)
    for name, hook in (("before_each", before_each), ("sync", sync), ("after_round", after_round)):
        if hook is not None:
            check_callable(hook, name, "a function or None", nargs=0)
    before_each = before_each or (lambda: None)
    sync = sync or (lambda: None)
    after_round = after_round or (lambda: None)
    if clock is not None:
        check_callable(clock, "clock", "a function returning seconds, or None", nargs=0)
    clock = clock or time.perf_counter
    for _ in range(warmup):
        for fn in fns.values():
            fn()
        after_round()
    samples: dict[Key, list[float]] = {key: [] for key in fns}
    for _ in range(repeats):
        for key, fn in fns.items():
            before_each()
            sync()
            start = clock()
            for _ in range(inner):
                fn()
            sync()
            samples[key].append(clock_elapsed(start, clock(), shown(key)) / inner)
        after_round()
    check_clock_advanced(samples.values(), "samples")
    return samples


def clock_elapsed(start: object, end: object, around: str) -> float:
    """``end - start``: two readings of a timing's ``clock`` around ``around`` (what was timed,
    for the message), if both are numbers and the difference is finite and >= 0; else a
    ValueError naming ``clock`` and the two readings (a clock that runs backwards or returns
    NaN would give meaningless samples). A reading is any real number (:func:`is_real`: a NumPy
    float such as ``np.float32`` too, subtracted as a Python float); a bool is none (``True - 0.5``
    would time 0.5 s)."""
    around = plain_str(around, "around", "a str saying what was timed")
    try:
        if not (is_real(start) and is_real(end)):
            elapsed = None
        elif type(start) is int and type(end) is int:  # exact (a nanosecond clock's large ints)
            elapsed = end - start
        else:
            elapsed = float(end) - float(start)
    except OverflowError:  # an int no float holds (10**400: battery 29)
        elapsed = None
    if elapsed is None or not (finite(elapsed) and elapsed >= 0):
        raise ValueError(f"clock must return seconds that never decrease (a finite real number, not a "
                         f"bool), but it read {shown(start)} then {shown(end)} around {around}; use "
                         "time.perf_counter or time.thread_time")
    return float(elapsed)


def check_clock_advanced(seconds: Iterable[Iterable[float]], what: str) -> None:
    """A ValueError naming ``clock`` when every one of ``seconds`` (lists of
    :func:`clock_elapsed` results, called ``what``) is 0: the clock never advanced around any
    timed call (a constant, or one far too coarse for the work), so no time was measured.
    Some zeros among others are kept: a coarse clock can miss one short call. ``seconds`` that
    is not groups of real numbers >= 0 (None, a str, a bare number, NaN, -1.0) is a TypeError /
    ValueError naming ``seconds``."""
    what = plain_str(what, "what", "a str naming the samples, such as 'samples'")
    counted = _seconds_read(seconds)
    if counted and not any(counted):
        raise ValueError(f"clock: expected a clock that advances around the timed calls, but all "
                         f"{len(counted)} {what} read 0 s (a constant clock, or one too coarse for the "
                         "work?); use time.perf_counter, or time more calls per sample with inner=")


def _seconds_read(seconds: object) -> list[float]:
    """Every number in ``seconds`` (an iterable of groups of real numbers), flattened; a str,
    a bare number, NaN or a negative time anywhere is refused naming ``seconds`` and what arrived."""
    if isinstance(seconds, (str, bytes)) or not isinstance(seconds, Iterable):
        raise TypeError(f"seconds must be an iterable of groups (lists) of real numbers, got "
                        f"{type(seconds).__name__} {shown(seconds, 60)}")
    counted = []
    for i, group in enumerate(seconds):
        if isinstance(group, (str, bytes)) or not isinstance(group, Iterable):
            raise TypeError(f"seconds[{i}] must be a group (list) of real numbers, got "
                            f"{type(group).__name__} {shown(group, 60)}")
        counted += [check_real(s, f"seconds[{i}][{j}]") for j, s in enumerate(group)]
    backwards = next(((k, s) for k, s in enumerate(counted) if s < 0), None)
    if backwards is not None:  # what clock_elapsed refuses as it reads them
        raise ValueError(f"seconds must hold elapsed times >= 0 (clock_elapsed results), got "
                         f"{shown(backwards[1])} as number {backwards[0]} of {len(counted)}: a clock that "
                         f"runs backwards?")
    return counted


def time_interleaved(
    fns: Mapping[Key, Callable[[], object]],
    *,
    baseline: Key,
    repeats: int = 15,
    warmup: int = 3,
    inner: int = 1,
    sync: Callable[[], object] | None = None,
    before_each: Callable[[], object] | None = None,
    progress: str | None = None,
    clock: Callable[[], float] | None = None,
) -> list[Timing]:
    """Median wall time of each callable over ``repeats`` interleaved rounds, and its ratio
    to ``baseline``'s (see :func:`interleaved_samples` for what is timed). ``progress``: a
    label for a text progress bar (tqdm) over the rounds; None shows none. ``clock``: as in
    :func:`interleaved_samples` (``time.thread_time`` for one-thread work on a busy machine).
    Each key of ``fns`` becomes a :attr:`Timing.name`, so it must be a non-empty str or a non-empty
    tuple of settings: any other key (``1``, ``""``) is refused naming ``fns`` before anything is
    timed, and ``baseline`` must be one of the keys."""
    _check_functions(fns)
    _check_timing_names(fns, "fns")  # before any timing: each name becomes a Timing's
    check_function_name(baseline, "baseline", fns, "the names of fns")
    repeats, warmup, inner = check_round_counts(repeats, warmup, inner)  # before the bar adds them
    if progress is not None and not isinstance(progress, str):
        raise TypeError(f"progress must be a str (the progress bar's label) or None (no bar), got "
                        f"{type(progress).__name__} {shown(progress, 60)}")
    from tqdm import tqdm

    with tqdm(total=warmup + repeats, desc=progress, unit="round", leave=False,
              disable=progress is None) as bar:
        samples = interleaved_samples(fns, repeats=repeats, warmup=warmup, inner=inner,
                                      before_each=before_each, sync=sync, after_round=bar.update,
                                      clock=clock)
    return timings_from_samples(samples, baseline)


def timings_from_samples(samples: Mapping[Key, list[float]], baseline: Key) -> list[Timing]:
    """One :class:`Timing` per function of ``samples`` (name -> seconds of every repeat, as
    :func:`interleaved_samples` returns), its ratio taken to ``baseline``'s median. A median of
    0 s is refused here, naming the function (the baseline first: no ratio to it exists): the
    clock did not advance around its calls, and a Timing's median is divided by. ``samples`` is
    checked first (a non-empty mapping of non-empty lists of seconds, each named
    ``samples[name][i]``, all of one length: one sample per repeat, each name a non-empty str or
    tuple as :attr:`Timing.name` holds), and ``baseline`` must be one of its names."""
    _check_samples(samples)
    _check_timing_names(samples, "samples")
    check_function_name(baseline, "baseline", samples, "the names of samples")
    medians = {name: statistics.median(s) for name, s in samples.items()}
    for name in (baseline, *medians):
        if not medians[name] > 0:
            role = "baseline " if name == baseline else ""
            raise ValueError(f"{role}{shown(name)} took a median of {shown(medians[name])} s over "
                             f"{len(samples[name])} repeats, so no ratio {'to' if role else 'of'} it "
                             "exists: the clock did not advance around its calls (a clock too coarse "
                             "for the call, or one that returns a constant? use time.perf_counter, or "
                             "time more calls per sample with inner=)")
    # a str subclass's name as the plain str it holds: Timing refuses the subclass (its str() may raise)
    return [Timing(plain_str(n, "each name of samples") if isinstance(n, str) else n, medians[n],
                   medians[n] / medians[baseline], s) for n, s in samples.items()]


def _check_samples(samples: object) -> None:
    """``samples`` is what :func:`interleaved_samples` returns: a non-empty mapping name -> a
    non-empty list (or tuple) of seconds, each finite and >= 0, as many for every name; errors
    name ``samples[name]``."""
    if not isinstance(samples, Mapping) or not samples:
        error = ValueError if isinstance(samples, Mapping) else TypeError
        raise error(f"samples must be a non-empty mapping name -> seconds of every repeat (as "
                    f"interleaved_samples returns), got {type(samples).__name__} {shown(samples, 60)}")
    for key, seconds in samples.items():
        if not isinstance(seconds, list | tuple) or not seconds:
            error = ValueError if isinstance(seconds, list | tuple) else TypeError
            raise error(f"samples[{shown(key)}] must be a non-empty list of seconds (one per repeat), got "
                        f"{type(seconds).__name__} {shown(seconds, 60)}")
        for i, value in enumerate(seconds):
            _check_duration(value, f"samples[{shown(key)}][{i}]")
    counts = {key: len(seconds) for key, seconds in samples.items()}
    if len(set(counts.values())) > 1:  # one run times every function once per repeat
        raise ValueError(f"samples must hold one sample per repeat for every function (as "
                         f"interleaved_samples returns: paired_ratios pairs them), got counts "
                         f"{shown(counts, 120)}")


def _check_timing_names(named: Mapping, name: str) -> None:
    """Each key of ``named`` (``fns``, ``samples``) can name a :class:`Timing` row: a non-empty str
    or a non-empty tuple of hashable settings. Checked before any timing, so that a key such as
    ``1`` or ``""`` is refused naming the argument, not ``Timing.name`` after every round has run."""
    for key in named:
        if isinstance(key, str):
            if str.__len__(key):  # (a str subclass's own __len__ may lie)
                continue
            raise ValueError(f"{name} must be keyed by non-empty names (each becomes a Timing's name, "
                             f"a row of the table), got the empty str {shown(key, 60)}")
        if isinstance(key, tuple) and tuple.__len__(key) and _hashable(key):
            continue
        wanted = ("a non-empty tuple of hashable settings" if isinstance(key, tuple)
                  else "a str or a tuple of settings")
        error = ValueError if isinstance(key, tuple) else TypeError
        raise error(f"{name} must be keyed by names a Timing can hold (each becomes a row of the table): "
                    f"{wanted}, such as 'naive' or (64, True), got {type(key).__name__} {shown(key, 60)}")


def check_function_name(value: object, name: str, among: Iterable[Hashable] | None = None,
                        what: str = "the functions") -> None:
    """``value`` names a function (a str, or another hashable key such as a tuple): a list
    cannot be looked up among the names. With ``among`` (the names there are, e.g. a dict of
    functions), ``value`` must be one of them: a ValueError naming the argument ``name``, what
    arrived and the names there are (``what`` says whose). Its own arguments are checked too:
    ``name`` and ``what`` non-empty strs, ``among`` an iterable of names other than a str (whose
    letters are no names); errors name the argument (``among=3`` said "'int' object is not
    iterable", ``name=3`` passed without a word: battery 19)."""
    from ..cli import check_label  # not at import: python -m course_utils.cli would warn

    name = check_label(name, "name", "the argument's name for the message, such as 'baseline'")  # plain str
    what = check_label(what, "what", "whose names among holds, such as 'the names of fns'")
    if among is not None and (isinstance(among, str | bytes) or not isinstance(among, Iterable)):
        raise TypeError(f"among must be None or an iterable of names (a dict of functions, a list of "
                        f"str), got {type(among).__name__} {shown(among, 60)}")
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"{name} must be a function's name (a str such as 'naive', or a tuple), got "
                        f"{type(value).__name__} {shown(value, 60)}") from None
    if among is not None and not _is_among(value, names := items_of(among, "among", "an iterable of names")):
        raise ValueError(f"{name} {shown(value, 60)} ({type(value).__name__}) is not one of {what} {names}")


def _is_among(value: Hashable, names: list) -> bool:
    """``value`` is one of ``names`` as a dict lookup finds it (hash, then ==): a str subclass whose
    ``__eq__`` says True to anything passed ``value in names``, then failed the lookup with a bare
    KeyError (battery 30). Names that cannot be hashed are compared with == alone."""
    try:
        return value in set(names)
    except TypeError:
        return value in names


def _check_timings(timings: object, baseline: object) -> Timing:
    """``timings`` is a non-empty list of :class:`Timing` and ``baseline`` one of their names;
    returns the baseline's Timing."""
    expected = "a non-empty list of Timing (from time_interleaved)"
    if isinstance(timings, (list, tuple)):  # (a list whose len() raises is named: battery 30)
        timings = items_of(timings, "timings", expected)
    if not isinstance(timings, (list, tuple)) or not timings:
        raise ValueError(f"timings must be a non-empty list of Timing (from time_interleaved), got "
                         f"{type(timings).__name__} {shown(timings, 60)}")
    wrong = next((i for i, t in enumerate(timings) if not isinstance(t, Timing)), None)
    if wrong is not None:
        raise TypeError(f"timings[{wrong}] must be a Timing, got {type(timings[wrong]).__name__}")
    check_distinct([t.name for t in timings], "the timings' names", "names (one Timing per function)")
    by_name = {t.name: t for t in timings}
    check_function_name(baseline, "baseline", by_name, "the timings' names")
    return by_name[baseline]


def _check_headings(title: object, label: object) -> tuple[str, str | None]:
    """A table's ``title`` is a str, and ``label`` (the baseline's name in the header) a str or None;
    returns them as plain strs (a str subclass's own ``__str__`` may raise)."""
    if not isinstance(title, str):
        raise TypeError(f"title must be a str (the table's first line), got {type(title).__name__} "
                        f"{shown(title, 60)}")
    if label is not None and not isinstance(label, str):
        raise TypeError(f"label must be a str or None (the baseline's name), got {type(label).__name__} "
                        f"{shown(label, 60)}")
    return plain_str(title, "title"), None if label is None else plain_str(label, "label")


def format_table(title: str, timings: list[Timing], baseline: str, label: str | None = None) -> str:
    """A text table: each function's median time and its ratio to the median of ``baseline``
    (one of the timings' names); ``label`` names it in the header (default: its name)."""
    base = _check_timings(timings, baseline)
    title, label = _check_headings(title, label)
    width = max(len(t.name) for t in timings)
    lines = [title, f"{'implementation':<{width}}  {'median ms':>10}  {'ratio to ' + (label or baseline):>s}"]
    for t in timings:
        ratio = t.median_s / base.median_s  # > 0: a Timing's median is
        lines.append(f"{t.name:<{width}}  {t.median_s * 1e3:>10.3f}  {ratio:>8.2f}x")
    return "\n".join(lines)


def paired_ratios(timings: list[Timing], name: str, baseline: str) -> list[float]:
    """Repeat-by-repeat ratios ``name / baseline`` from one :func:`time_interleaved` run.

    Repeat ``i`` of every function ran back to back, so a moment when the machine was busy
    slows both sides of ratio ``i``: the ratios are steadier than the times themselves.
    """
    _check_timings(timings, baseline)
    by_name = {t.name: t for t in timings}
    check_function_name(name, "name", by_name, "the timings' names")
    top, bottom = by_name[name].samples_s, by_name[baseline].samples_s
    if not top or len(top) != len(bottom):
        raise ValueError(f"need the same non-zero number of samples for {shown(name)} and {shown(baseline)} "
                         f"(one per repeat of one run), got {len(top)} for {shown(name)} and "
                         f"{len(bottom)} for {shown(baseline)}")
    zero = next((i for i, b in enumerate(bottom) if not b > 0), None)
    if zero is not None:
        raise ValueError(f"baseline {shown(baseline)} has a sample of {shown(bottom[zero])} s at repeat "
                         f"{zero}: a "
                         "ratio needs positive times (a clock too coarse for the call? time more calls "
                         "per sample)")
    return [a / b for a, b in zip(top, bottom, strict=True)]


@dataclass(frozen=True)
class RatioSpread:
    """How ``name / baseline`` varied over the repeats of one run.

    The five ratios are ordered ``low <= q1 <= median <= q3 <= high`` and the median is > 0 (the
    median of the ratios of two Timings, each with a median > 0). ``name`` may equal
    ``baseline``: :func:`format_spread_table` prints the baseline's own row (every ratio 1), so
    that is not refused. Frozen: a spread checked once stays valid."""

    name: str
    baseline: str
    median: float
    q1: float  # 25th percentile: three quarters of the repeats had a larger ratio
    q3: float  # 75th percentile
    low: float
    high: float
    repeats: int

    def __post_init__(self) -> None:
        """Ratios of times are finite and >= 0, and a spread comes from at least one repeat (a NaN
        ratio or 0 repeats would otherwise read as "no clear difference")."""
        for label in ("median", "q1", "q3", "low", "high"):  # kept as Python floats
            object.__setattr__(self, label, _check_duration(
                getattr(self, label), f"RatioSpread({shown(self.name)}).{label}", positive=label == "median"))
        object.__setattr__(self, "repeats",
                           check_int(self.repeats, f"RatioSpread({shown(self.name)}).repeats", minimum=1))
        # the rest: name and baseline are non-empty str (verdict would say "slower than  in this run")
        check_record(self, nonempty=("baseline",))
        # verdict reads q1 and q3; the slack absorbs the rounding of statistics.quantiles
        order = ("low", "q1", "median", "q3", "high")
        for lower, upper in zip(order, order[1:], strict=False):
            if getattr(self, lower) > getattr(self, upper) * (1 + 1e-9):
                raise ValueError(f"RatioSpread({shown(self.name)}) must have low <= q1 <= median <= q3 "
                                 f"<= high "
                                 f"(range, quartiles and median of the ratios), got {lower}="
                                 f"{shown(getattr(self, lower))} > {upper}={shown(getattr(self, upper))}")

    def verdict(self) -> str:
        """One sentence: slower / faster / no clear difference, decided by the middle half."""
        if self.q1 > 1:
            finding = "slower than"
        elif self.q3 < 1:
            finding = "faster than"
        else:
            finding = "no clear difference from"
        return (f"{self.name}: {finding} {self.baseline} in this run (ratio {self.median:.2f}; middle "
                f"half of the {self.repeats} repeats {self.q1:.2f}-{self.q3:.2f}, all {self.low:.2f}-"
                f"{self.high:.2f})")


def ratio_spread(timings: list[Timing], name: str, baseline: str) -> RatioSpread:
    """Median, quartiles and range of :func:`paired_ratios`."""
    r = sorted(paired_ratios(timings, name, baseline))
    q1, _, q3 = statistics.quantiles(r, n=4, method="inclusive") if len(r) > 1 else (r[0], r[0], r[0])
    return RatioSpread(name, baseline, statistics.median(r), q1, q3, r[0], r[-1], len(r))


def format_spread_table(title: str, timings: list[Timing], baseline: str, label: str | None = None) -> str:
    """Best and median time of each function, and its ratio to ``baseline`` repeat by
    repeat: the median ratio and, in brackets, the middle half of the ratios (IQR).
    ``label`` names the baseline in the header (default: its name)."""
    _check_timings(timings, baseline)
    title, label = _check_headings(title, label)
    width = max(len(t.name) for t in timings)
    header = f"{'implementation':<{width}}  {'best ms':>8}  {'median ms':>9}  ratio to {label or baseline}"
    lines = [title, header + " (median [middle half])"]
    for t in timings:
        spread = ratio_spread(timings, t.name, baseline)
        lines.append(f"{t.name:<{width}}  {t.best_s * 1e3:>8.3f}  {t.median_s * 1e3:>9.3f}  "
                     f"{spread.median:>5.2f}x [{spread.q1:.2f}-{spread.q3:.2f}]")
    return "\n".join(lines)


def _sync_for(device: torch.device | str) -> Callable[[], None] | None:
    return torch.cuda.synchronize if torch.device(device).type == "cuda" else None


def _inner_for(fns: dict[str, Callable[[], object]], sync, target_s: float) -> int:
    """Calls per sample so that the slowest function's sample lasts about ``target_s``
    (short samples are dominated by timer and scheduler noise)."""
    once = interleaved_samples(fns, repeats=1, warmup=1, sync=sync)  # warm-up: allocations, kernels
    slowest = max(sample for samples in once.values() for sample in samples)
    return max(1, min(100, math.ceil(target_s / max(slowest, 1e-9))))

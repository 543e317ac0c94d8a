"""Lesson 4's benchmark: four versions of multi-head attention timed side by side.

``python -m course_utils.bench mha``. :func:`lesson_implementations` builds the loop over heads,
the batched module, the batched module with ``F.scaled_dot_product_attention`` and
``nn.MultiheadAttention``; :func:`bench_mha` times them with the core in
:mod:`course_utils.bench.timing`; :func:`sweep_mha` times them across sizes for a plot;
:func:`count_dispatched_ops` counts the tensor operations of one forward pass; on a CUDA GPU,
:func:`compare_on_device` compares the SDPA backends (:mod:`course_utils.attention.sdpa_backends`).

:class:`DeviceComparison` checks its fields when made (``check_record``).
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from ..attention.mha import MultiHeadAttention
from ..attention.naive_mha import naive_from_batched
from ..attention.sdpa_backends import cuda_unavailable_reason, precision_notes, sdpa_backend_callables
from ..attention.validation import (
    check_attention_fits,
    check_axes,
    check_callable,
    check_choice,
    check_device,
    check_dims_not_empty,
    check_distinct,
    check_flag,
    check_float_dtype,
    check_head_dims,
    check_int,
    check_int_list,
    check_linear_weights_fit,
    check_matches_module,
    check_record,
    check_stream,
    check_table,
    check_tensor,
    finite,
    freeze_fields,
    is_real,
    real_number,
    shown,
)
from ..env import check_seed, torch_threads
from .timing import (
    Timing,
    _inner_for,
    _sync_for,
    check_function_name,
    check_round_counts,
    format_spread_table,
    format_table,
    ratio_spread,
    time_interleaved,
)

__all__ = [
    "IMPLEMENTATIONS",
    "lesson_implementations",
    "forward_callables",
    "bench_mha",
    "sweep_mha",
    "SWEEP_DEFAULTS",
    "plot_sweep",
    "count_dispatched_ops",
    "TOLERANCES",
    "DeviceComparison",
    "compare_on_device",
    "add_bench_parser",
]


class _ExplicitSoftmaxCourse(MultiHeadAttention):
    """The course module, always on the step-by-step softmax path (weights kept)."""

    def forward(self, query, key=None, value=None, **kwargs):
        return super().forward(query, key, value, need_weights=True, **kwargs)


class _NaiveAsTuple(nn.Module):
    """The naive ``nn.ModuleList`` version, returning ``(output, None)`` like the others."""

    def __init__(self, batched: MultiHeadAttention) -> None:
        super().__init__()
        self.naive = naive_from_batched(batched)

    @property
    def d_model(self) -> int:
        """The width it takes (as the course module and ``nn.MultiheadAttention.embed_dim`` say)."""
        return self.naive.d_model

    def forward(self, query, key=None, value=None, **_):
        return self.naive(query), None


#: The row labels of every multi-head attention benchmark, one per version of lesson 4.
IMPLEMENTATIONS: tuple[str, ...] = ("loop over heads", "batched", "batched + F.sdpa",
                                    "nn.MultiheadAttention")


def lesson_implementations(
    d_model: int, num_heads: int, *, device="cpu", dtype=torch.float32, seed: int = 0
) -> dict[str, nn.Module]:
    """Lesson 4's four versions, sharing one set of weights, in eval mode, keyed by
    :data:`IMPLEMENTATIONS`: the loop over heads (:class:`~course_utils.attention.naive_mha.
    NaiveMultiHeadAttention`), the batched course module on its step-by-step softmax path
    and on its default ``F.scaled_dot_product_attention`` path, and ``nn.MultiheadAttention``."""
    check_head_dims(d_model, num_heads)
    check_device(device, "device")
    check_float_dtype(dtype, "dtype")
    seed = check_seed(seed)  # a Python int: torch.Generator.manual_seed takes no NumPy int
    # three copies of the weights (torch's module, the course's, the step-by-step one), refused
    # before allocating when they would not fit
    check_linear_weights_fit(d_model, (3 * d_model, d_model) * 3, dtype=dtype)
    torch.manual_seed(seed)
    theirs = nn.MultiheadAttention(d_model, num_heads, batch_first=True).to(device, dtype)
    ours = MultiHeadAttention.from_torch(theirs)
    explicit = _ExplicitSoftmaxCourse(d_model, num_heads).to(device, dtype)
    explicit.load_state_dict(ours.state_dict())
    modules = dict(zip(IMPLEMENTATIONS, (_NaiveAsTuple(ours), explicit, ours, theirs), strict=True))
    return {name: m.eval() for name, m in modules.items()}


def forward_callables(modules: dict[str, nn.Module], x: Tensor) -> dict[str, Callable[[], Tensor]]:
    """Zero-argument self-attention forward passes ``x (B, T, d) -> (B, T, d)``, one per module.

    ``nn.MultiheadAttention`` is called with ``need_weights=False``, which (in eval mode,
    without gradients, with an even head count) lets it take its fused fast path.

    ``x`` is checked against every module now, not when the benchmark first calls it: its dtype
    and device against the module's parameters and, for a module that says its width
    (``d_model``, as the course's modules do, or ``embed_dim``, as ``nn.MultiheadAttention``
    does), its last dimension against that width. ``B >= 1``: an empty batch would time
    passes over nothing.
    """
    if not isinstance(modules, dict) or not all(isinstance(m, nn.Module) for m in modules.values()):
        raise TypeError(f"modules must be a dict {{label: nn.Module}} (what lesson_implementations returns), "
                        f"got {type(modules).__name__} {shown(modules, 60)}")
    check_tensor(x, "x", ndim=3, layout="(B, T, d_model)")
    check_dims_not_empty(x, "x", ("B",))  # an empty batch would time passes over nothing
    for name, m in modules.items():  # refused now, not when the benchmark calls it
        weight = next(m.parameters(), None)
        width = _width(m)
        if weight is not None and width is not None:
            check_stream(x, f"x (for modules[{shown(name)}])", d_model=width, weight=weight)
        elif weight is not None:
            check_matches_module(x, f"x (for modules[{shown(name)}])", weight)

    def call(m: nn.Module) -> Callable[[], Tensor]:
        if isinstance(m, nn.MultiheadAttention):
            return lambda: m(x, x, x, need_weights=False)[0]
        return lambda: m(x)[0]

    return {name: call(m) for name, m in modules.items()}


def _width(module: nn.Module) -> int | None:
    """The width a module takes, where it says (``d_model`` or ``embed_dim``, an int), else None."""
    for attribute in ("d_model", "embed_dim"):
        width = getattr(module, attribute, None)
        if isinstance(width, int) and not isinstance(width, bool):
            return width
    return None


def bench_mha(
    batch: int, seq_len: int, d_model: int, num_heads: int, *, repeats: int = 15,
    device="cpu", seed: int = 0, baseline: str = "nn.MultiheadAttention",
    dtype: torch.dtype = torch.float32, num_threads: int | None = None,
    target_sample_s: float = 0.0, lesson: bool = True,
) -> list[Timing]:
    """Time self-attention forward passes (inference: eval + no_grad) of lesson 4's four
    versions (:func:`lesson_implementations`), one row per label of :data:`IMPLEMENTATIONS`.

    ``num_threads``: see :func:`torch_threads`. ``target_sample_s > 0`` repeats short calls
    inside each sample: a real number (a NumPy float too) >= 0, else a TypeError (not a number) or
    ValueError (NaN, infinite or negative) naming it. ``lesson`` is ignored (every benchmark
    times the lesson's versions); it is accepted so that lesson 4's ``lesson=True`` keeps working
    (a bool: ``"no"`` is refused).
    """
    check_flag(lesson, "lesson")
    batch = check_int(batch, "batch", minimum=1)
    seq_len = check_int(seq_len, "seq_len", minimum=1)
    check_head_dims(d_model, num_heads)
    check_attention_fits(batch, seq_len, d_model, num_heads)
    seed = check_seed(seed)  # a Python int: torch.Generator.manual_seed takes no NumPy int
    target_sample_s = real_number(target_sample_s, "target_sample_s", "a number of seconds >= 0 (0: one "
                                  "call per sample)")  # np.float32 too
    if not (finite(target_sample_s) and target_sample_s >= 0):
        raise ValueError(f"target_sample_s must be a finite number of seconds >= 0 (0: one call per "
                         f"sample), got {type(target_sample_s).__name__} {shown(target_sample_s)}")
    check_function_name(baseline, "baseline", IMPLEMENTATIONS, "the lesson's implementations")
    modules = lesson_implementations(d_model, num_heads, device=device, dtype=dtype, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, seq_len, d_model, generator=gen).to(device, dtype)
    sync = _sync_for(device)
    with torch_threads(num_threads), torch.inference_mode():
        fns = forward_callables(modules, x)
        inner = _inner_for(fns, sync, target_sample_s) if target_sample_s > 0 else 1
        return time_interleaved(fns, baseline=baseline, repeats=repeats, sync=sync, inner=inner,
                                warmup=1 if target_sample_s > 0 else 3)


#: :func:`sweep_mha`'s ``vary``; anything else is refused by validation.check_choice (a TypeError for
#: a value that is no str, a ValueError for another str), as is a ``statistic`` other than min or median.
_SWEEPABLE = ("batch", "seq_len", "d_model", "num_heads")
#: :func:`sweep_mha`'s fixed sizes when not given (each but the varied one).
SWEEP_DEFAULTS = {"batch": 2, "seq_len": 64, "d_model": 128, "num_heads": 8}


def _check_sweep(vary: object, values: object, given: dict[str, object],
                 statistic: object) -> tuple[str, str, list[int], dict[str, int]]:
    """What :func:`sweep_mha` needs, checked before anything is measured: ``vary`` one of
    :data:`_SWEEPABLE`, and no size given for it (``values`` sets it row by row: a value given
    for it would be ignored); ``values`` distinct positive ints (a repeat would be measured twice
    and shown once), each of whose sizes fits in memory; the fixed sizes ints >= 1 (None: the
    default of :data:`SWEEP_DEFAULTS`); ``statistic`` "min" or "median". Returns ``vary`` and
    ``statistic`` as plain strs (:func:`check_choice`: a TypeError for anything but a str), the
    values as a list and the fixed sizes."""
    vary = check_choice(vary, "vary", _SWEEPABLE)
    if given[vary] is not None:
        raise ValueError(f"{vary} must be left out (None) when vary={shown(vary)}: values sets it row by "
                         f"row, so the {type(given[vary]).__name__} {shown(given[vary], 60)} given for it "
                         "would be ignored")
    fixed = {name: check_int(SWEEP_DEFAULTS[name] if value is None else value, name, minimum=1)
             for name, value in given.items() if name != vary}
    values = check_distinct(check_int_list(values, "values", minimum=1), "values",
                            f"sizes (each is one row of the table, indexed by {vary})")
    statistic = check_choice(statistic, "statistic", ("min", "median"))
    for value in values:
        sizes = {**fixed, vary: value}
        check_head_dims(sizes["d_model"], sizes["num_heads"])
        check_attention_fits(*(sizes[k] for k in _SWEEPABLE))  # blames the largest part, by its sizes
    return vary, statistic, values, fixed


def sweep_mha(
    vary: str, values: Sequence[int], *, batch: int | None = None, seq_len: int | None = None,
    d_model: int | None = None, num_heads: int | None = None, repeats: int = 5,
    num_threads: int | None = 1, target_sample_s: float = 2e-3, baseline: str = "batched",
    seed: int = 0, statistic: str = "min",
):
    """Lesson 4's four versions timed at each value of one size parameter.

    ``vary`` is one of ``batch``, ``seq_len``, ``d_model``, ``num_heads``; the others stay
    fixed, at the value given or else their default (:data:`SWEEP_DEFAULTS`: ``batch=2``,
    ``seq_len=64``, ``d_model=128``, ``num_heads=8``). The varied one must not be given
    (``values`` sets it; a value given for it is refused, naming it, rather than ignored).
    Returns a ``pandas.DataFrame``: one row per value, one column per
    implementation, milliseconds per forward pass (``statistic`` ``"min"``, the best of
    the interleaved repeats, or ``"median"``); each row is measured in one run.
    """
    import pandas as pd

    given = {"batch": batch, "seq_len": seq_len, "d_model": d_model, "num_heads": num_heads}
    vary, statistic, values, fixed = _check_sweep(vary, values, given, statistic)
    pick = min if statistic == "min" else statistics.median
    rows = {}
    for value in values:
        sizes = {**fixed, vary: value}
        timings = bench_mha(sizes["batch"], sizes["seq_len"], sizes["d_model"], sizes["num_heads"],
                            repeats=repeats, baseline=baseline, seed=seed,
                            num_threads=num_threads, target_sample_s=target_sample_s)
        rows[value] = {t.name: pick(t.samples_s) * 1e3 for t in timings}
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = vary
    return table


def _check_sweep_table(table: object) -> None:
    """``table`` is what :func:`sweep_mha` returns: a DataFrame of at least one row and one column,
    indexed by distinct sizes >= 1 (the log2 x axis), every time a finite number > 0 ms (a log
    y axis, and a time at all); else an error naming the table, and the cell."""
    check_table(table, "table")
    if table.empty:
        raise ValueError(f"table must hold at least one row and one column (sweep_mha's: one row per "
                         f"size, one column per implementation), got shape {table.shape}")
    check_distinct(check_int_list(list(table.index), "table.index", minimum=1), "table.index", "sizes")
    for name, column in table.items():
        for index, value in column.items():
            if not is_real(value) or not (finite(value) and value > 0):
                raise ValueError(f"table[{shown(name)}] at {table.index.name or 'index'}={shown(index)} "
                                 f"must be a "
                                 f"finite time > 0 ms (sweep_mha's times), got {type(value).__name__} "
                                 f"{shown(value, 60)}")


def plot_sweep(table, ax, *, title: str, ylabel: str = "time per forward pass (ms)", logy: bool = True):
    """Plot :func:`sweep_mha`'s table: one line per implementation, log2 x axis (``logy``, a
    bool: a log y axis too); ``title`` and ``ylabel`` are str. ``table`` is checked as
    :func:`sweep_mha` makes it (:func:`_check_sweep_table`)."""
    _check_sweep_table(table)
    check_axes(ax, "ax")
    if ax is None:
        raise TypeError("ax must be a matplotlib Axes to draw on (e.g. plt.gca()), got None")
    check_flag(logy, "logy")
    for label, text in (("title", title), ("ylabel", ylabel)):
        if not isinstance(text, str):  # matplotlib would draw str() of anything: b'...', 123
            raise TypeError(f"{label} must be a str (the plot's {label}), got {type(text).__name__} "
                            f"{shown(text, 60)}")
    for name in table.columns:
        ax.plot(table.index, table[name], marker="o", label=name)
    ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xticks(list(table.index), [str(v) for v in table.index])
    ax.minorticks_off()
    ax.set_xlabel(table.index.name)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def count_dispatched_ops(fn: Callable[[], object]) -> Counter:
    """How many times each ATen operator runs during ``fn()`` (one call, run here).

    Every operator call pays a fixed cost (Python, argument checks, dispatch, and on a GPU
    a kernel launch) whatever the size of its tensors. Uses PyTorch's dispatch-mode hook
    (``torch.utils._python_dispatch``; long-standing, though not a documented API).
    """
    check_callable(fn, "fn", "a function of no arguments", nargs=0)
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Counting(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.counts: Counter = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.counts[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    mode = _Counting()
    with mode:
        fn()
    return mode.counts


#: Largest accepted ``max |device output - CPU float32 output|``, as a fraction of the CPU
#: output's standard deviation (so the tolerance follows the size of the numbers compared).
#: float16 keeps about 3 significant digits, bfloat16 about 2.
TOLERANCES: dict[torch.dtype, float] = {
    torch.float64: 1e-5,
    torch.float32: 1e-4,
    torch.float16: 1e-2,
    torch.bfloat16: 5e-2,
}


@dataclass(frozen=True)
class DeviceComparison:
    """Timings on one device and how far each output is from the CPU float32 run. Frozen
    (lists kept as tuples, dicts read-only), so a comparison checked once stays valid."""

    title: str
    timings: tuple[Timing, ...]
    max_abs_diff: dict[str, float]
    tolerance: float  # accepted max |diff|, as a fraction of reference_std
    reference_std: float
    agree: dict[str, bool]
    skipped: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        freeze_fields(self)
        # a max |diff| may be NaN or inf (an output that overflowed): measured, and agree is False
        # tolerance > 0: a share of reference_std (0 would demand bit-identical outputs)
        # title: the heading of report's table (a blank one would head nothing)
        check_record(self, nan_ok=("max_abs_diff",), nonempty=("title", "timings", "max_abs_diff"),
                     positive=("tolerance", "reference_std"))
        if set(self.agree) != set(self.max_abs_diff):  # report reads agree[name] for every diff
            raise ValueError(f"DeviceComparison.agree must have the keys of max_abs_diff "
                             f"{sorted(self.max_abs_diff)}, got {sorted(self.agree)}")
        self._check_consistent()

    def _check_consistent(self) -> None:
        """One Timing per function, nn.MultiheadAttention among them (report's baseline), a max |diff|
        only for a timed function, no timed function among ``skipped`` (one that did not run), and
        each ``agree`` what its max |diff| and :attr:`atol` say."""
        names = check_distinct([t.name for t in self.timings], "DeviceComparison.timings' names",
                               "names (one Timing per function)")
        if "nn.MultiheadAttention" not in names:
            raise ValueError(f"DeviceComparison.timings must include 'nn.MultiheadAttention' (the report's "
                             f"baseline), got names {shown(names, 200)}")
        untimed = [n for n in self.max_abs_diff if n not in names]
        if untimed:
            raise ValueError(f"DeviceComparison.max_abs_diff names {shown(untimed[0])}, which is not one of "
                             f"the timings' names {shown(names, 200)}")
        timed_and_skipped = [n for n in self.skipped if n in names]
        if timed_and_skipped:
            raise ValueError(f"DeviceComparison.skipped names {shown(timed_and_skipped[0])}, which is also "
                             f"one of the timings' names {shown(names, 200)} (a skipped function did not "
                             f"run)")
        for name, diff in self.max_abs_diff.items():
            # only a clear contradiction: a diff within rounding of atol may read either way
            if self.agree[name] and not diff <= self.atol * (1 + 1e-9) or \
                    not self.agree[name] and diff <= self.atol * (1 - 1e-9):
                raise ValueError(f"DeviceComparison.agree[{shown(name)}] must say whether max_abs_diff "
                                 f"{shown(diff)} <= atol {shown(self.atol)} (tolerance x reference_std), got "
                                 f"{shown(self.agree[name])}")

    @property
    def atol(self) -> float:
        """The accepted max |diff| in absolute terms."""
        return self.tolerance * self.reference_std

    def report(self) -> str:
        lines = [format_table(self.title, self.timings, "nn.MultiheadAttention", "nn.MHA"), "",
                 f"agreement with the CPU float32 run: max |diff| <= {self.tolerance:g} x std of the "
                 f"CPU output ({self.reference_std:.3g}) = {self.atol:.2e}"]
        width = max(len(n) for n in self.max_abs_diff)
        for name, diff in self.max_abs_diff.items():
            lines.append(f"  {name:<{width}}  max |diff| = {diff:.2e}  "
                         f"{'agrees' if self.agree[name] else 'DIFFERS'}")
        for label, why in self.skipped.items():
            lines.append(f"  F.sdpa [{label}] skipped: {why}")
        lines.extend(self.notes)
        return "\n".join(lines)


def compare_on_device(
    device: str | torch.device = "cuda", *, batch: int = 8, seq_len: int = 1024, d_model: int = 512,
    num_heads: int = 8, dtype: torch.dtype = torch.float16, repeats: int = 20, seed: int = 0,
) -> DeviceComparison:
    """Lesson 4's versions plus each SDPA backend, timed on ``device`` in ``dtype``, and
    each output compared with nn.MultiheadAttention run on the CPU in float32.

    Raises ``RuntimeError`` naming ``device`` for a CUDA device when :func:`cuda_unavailable_reason`
    gives a reason; a ``device`` that is not one (``'cuda:x'``, ``'tpu'``, ``3``, ``None``) is a
    ``ValueError`` or ``TypeError`` naming it, on any machine. Works on the CPU too (fewer
    backends run there). On a GPU, memory grows with ``batch * num_heads * seq_len**2`` for the
    versions that build the score tensor; an out-of-memory error is PyTorch's
    ``torch.cuda.OutOfMemoryError``.
    """
    if _is_cuda(device) and (why := cuda_unavailable_reason()) is not None:
        asked = shown(device if isinstance(device, str) else str(device))  # 'cuda', not device(type=...)
        raise RuntimeError(f"compare_on_device(device={asked}) cannot run: {why}. Run it on a "
                           "machine with an NVIDIA GPU and torch >= 2.3, or pass device='cpu'.")
    device = check_device(device, "device")  # a malformed one ('cuda:x') is named here
    if not isinstance(dtype, torch.dtype) or dtype not in TOLERANCES:  # a list: "unhashable" (battery 28)
        raise ValueError(f"dtype must be one of {list(TOLERANCES)}, got {dtype}")
    batch = check_int(batch, "batch", minimum=1)
    seq_len = check_int(seq_len, "seq_len", minimum=1)
    check_head_dims(d_model, num_heads)
    check_attention_fits(batch, seq_len, d_model, num_heads)  # the float32 reference runs on the CPU
    check_round_counts(repeats)
    seed = check_seed(seed)  # a Python int: torch.Generator.manual_seed takes no NumPy int
    gen = torch.Generator().manual_seed(seed)
    x_cpu = torch.randn(batch, seq_len, d_model, generator=gen)  # (B, T, d) float32
    x = x_cpu.to(device, dtype)
    cpu_module = lesson_implementations(d_model, num_heads, seed=seed)["nn.MultiheadAttention"]
    modules = lesson_implementations(d_model, num_heads, device=device, dtype=dtype, seed=seed)
    with torch.inference_mode():
        reference = cpu_module(x_cpu, x_cpu, x_cpu, need_weights=False)[0]  # (B, T, d)
        fns = forward_callables(modules, x)
        backend_fns, skipped = sdpa_backend_callables(modules["batched + F.sdpa"], x)
        fns.update(backend_fns)
        sync = _sync_for(device)
        timings = time_interleaved(fns, baseline="nn.MultiheadAttention", repeats=repeats, sync=sync)
        tolerance, std = TOLERANCES[dtype], float(reference.std())
        diffs, agree = {}, {}
        for name, fn in fns.items():
            out = fn().float().cpu()
            diffs[name] = float((out - reference).abs().max())
            agree[name] = diffs[name] <= tolerance * std
    notes = precision_notes(device, dtype)
    title = (f"{device.type}, {str(dtype).replace('torch.', '')}: B={batch}, T={seq_len}, "
             f"d_model={d_model}, h={num_heads}")
    return DeviceComparison(title, timings, diffs, tolerance, std, agree, skipped, notes)


def _is_cuda(device: object) -> bool:
    """``device`` is a well-formed CUDA device (``'cuda'``, ``'cuda:1'``, ``torch.device('cuda')``)."""
    try:
        return isinstance(device, (str, torch.device)) and torch.device(device).type == "cuda"
    except RuntimeError:  # not a device at all: check_device names it
        return False


def _main_mha(args: argparse.Namespace) -> None:
    threads = args.threads or torch.get_num_threads()
    print(f"torch {torch.__version__}, {threads} CPU threads, device {args.device}")
    print("forward pass, eval mode, torch.inference_mode(); ratio < 1 means faster than nn.MHA;")
    print("ratios are taken repeat by repeat (each repeat runs every version back to back)\n")
    for batch, seq_len, d_model, heads in [(8, 256, 512, 8), (2, 32, 64, 4)]:
        timings = bench_mha(batch, seq_len, d_model, heads, repeats=args.repeats,
                            device=args.device, num_threads=args.threads)
        title = f"B={batch}, T={seq_len}, d_model={d_model}, h={heads}"
        print(format_spread_table(title, timings, "nn.MultiheadAttention", "nn.MHA"))
        print(ratio_spread(timings, "loop over heads", "batched").verdict())
        print()


def add_bench_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``mha``: lesson 4's four versions timed side by side."""
    from .cli import check_subparsers, device_name, repeat_count, thread_count

    check_subparsers(subparsers, "mha")

    p = subparsers.add_parser("mha", help="loop over heads vs batched vs F.sdpa vs nn.MultiheadAttention")
    p.add_argument("--repeats", type=repeat_count, default=15)
    p.add_argument("--device", default="cpu", type=device_name,
                   help="cpu, cuda or cuda:N (checked when parsed: it must be present here)")
    p.add_argument("--threads", type=thread_count, default=None,
                   help="CPU threads for torch (default: torch's choice); 1 is steadiest when busy")
    p.set_defaults(run=_main_mha)

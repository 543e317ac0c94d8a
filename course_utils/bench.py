"""Side-by-side benchmarks that print tables of times and ratios.

Run ``python -m course_utils.bench mha`` (or ``train``; see ``--help``). Every ratio
is measured in one run, with the implementations interleaved repeat by repeat, so a
machine that speeds up or slows down affects all of them alike; :func:`ratio_spread`
says how much the ratio varied from repeat to repeat.

The timing core is :func:`interleaved_samples` (the one loop every benchmark here and in
:mod:`course_utils.bench_gqa` and :mod:`course_utils.decode_step` times with),
:func:`time_interleaved`, :func:`ratio_spread` and the two table formatters. Lesson 4
adds its four versions of multi-head attention (:func:`lesson_implementations`),
:func:`bench_mha` (one table), :func:`sweep_mha` (timings across sizes, for a plot),
:func:`count_dispatched_ops` (how many tensor operations one forward pass runs) and, on
a CUDA GPU, :func:`compare_on_device`, whose backend diagnostics live in
:mod:`course_utils.sdpa_backends`.
"""

from __future__ import annotations

import argparse
import importlib
import math
import statistics
import time
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import torch
from torch import Tensor, nn

from .attention import MultiHeadAttention
from .env import torch_threads
from .naive_mha import naive_from_batched
from .sdpa_backends import cuda_unavailable_reason, precision_notes, sdpa_backend_callables
from .validation import check_callable, check_int

Key = TypeVar("Key", bound=Hashable)  # a function's name in a timing: a str, a tuple, ...

__all__ = [
    "Timing",
    "interleaved_samples",
    "time_interleaved",
    "format_table",
    "paired_ratios",
    "RatioSpread",
    "ratio_spread",
    "format_spread_table",
    "IMPLEMENTATIONS",
    "lesson_implementations",
    "forward_callables",
    "bench_mha",
    "sweep_mha",
    "plot_sweep",
    "count_dispatched_ops",
    "TOLERANCES",
    "DeviceComparison",
    "compare_on_device",
    "main",
]


@dataclass
class Timing:
    name: str
    median_s: float
    ratio: float  # median / baseline median
    samples_s: list[float] = field(default_factory=list, repr=False)  # every repeat, in order

    @property
    def best_s(self) -> float:
        """The fastest repeat: other work on the machine can only ever add time."""
        return min(self.samples_s) if self.samples_s else self.median_s


def interleaved_samples(
    fns: Mapping[Key, Callable[[], object]],
    *,
    repeats: int,
    warmup: int,
    inner: int = 1,
    before_each: Callable[[], object] | None = None,
    sync: Callable[[], object] | None = None,
) -> dict[Key, list[float]]:
    """The timing core: seconds per call of each function, one sample per repeat.

    ``warmup`` rounds call every function once (untimed). Then each of ``repeats`` rounds
    times every function in turn (A, B, C, A, B, C, ...), so a machine that speeds up or
    slows down affects all of them alike. Per sample, outside the timed region:
    ``before_each()`` (e.g. a read that evicts the cache), then ``sync()``; inside it:
    ``inner`` calls, then ``sync()`` (e.g. ``torch.cuda.synchronize``) before the clock is
    read. The loop's variables die with this call, so no function outlives the run here.
    """
    if not fns:
        raise ValueError("fns must name at least one function to time")
    for key, fn in fns.items():
        check_callable(fn, f"fns[{key!r}]")
    repeats = check_int(repeats, "repeats", minimum=1)
    warmup = check_int(warmup, "warmup", minimum=0)
    inner = check_int(inner, "inner", minimum=1)
    for name, hook in (("before_each", before_each), ("sync", sync)):
        if hook is not None:
            check_callable(hook, name, "a function or None")
    before_each = before_each or (lambda: None)
    sync = sync or (lambda: None)
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[Key, list[float]] = {key: [] for key in fns}
    for _ in range(repeats):
        for key, fn in fns.items():
            before_each()
            sync()
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            sync()
            samples[key].append((time.perf_counter() - start) / inner)
    return samples


def time_interleaved(
    fns: Mapping[Key, Callable[[], object]],
    *,
    baseline: Key,
    repeats: int = 15,
    warmup: int = 3,
    inner: int = 1,
    sync: Callable[[], object] | None = None,
    before_each: Callable[[], object] | None = None,
) -> list[Timing]:
    """Median wall time of each callable over ``repeats`` interleaved rounds, and its ratio
    to ``baseline``'s (see :func:`interleaved_samples` for what is timed)."""
    if baseline not in fns:
        raise ValueError(f"baseline {baseline!r} is not one of {list(fns)}")
    samples = interleaved_samples(fns, repeats=repeats, warmup=warmup, inner=inner,
                                  before_each=before_each, sync=sync)
    base = statistics.median(samples[baseline])
    return [Timing(n, statistics.median(s), statistics.median(s) / base, s) for n, s in samples.items()]


def format_table(title: str, timings: list[Timing], baseline: str) -> str:
    """A text table: each function's median time and its ratio to the baseline's median
    (``baseline`` is only the label shown in the header)."""
    width = max(len(t.name) for t in timings)
    lines = [title, f"{'implementation':<{width}}  {'median ms':>10}  {'ratio to ' + baseline:>s}"]
    for t in timings:
        lines.append(f"{t.name:<{width}}  {t.median_s * 1e3:>10.3f}  {t.ratio:>8.2f}x")
    return "\n".join(lines)


def paired_ratios(timings: list[Timing], name: str, baseline: str) -> list[float]:
    """Repeat-by-repeat ratios ``name / baseline`` from one :func:`time_interleaved` run.

    Repeat ``i`` of every function ran back to back, so a moment when the machine was busy
    slows both sides of ratio ``i``: the ratios are steadier than the times themselves.
    """
    by_name = {t.name: t for t in timings}
    for n in (name, baseline):
        if n not in by_name:
            raise ValueError(f"{n!r} is not one of {list(by_name)}")
    top, bottom = by_name[name].samples_s, by_name[baseline].samples_s
    if not top or len(top) != len(bottom):
        raise ValueError(f"need the same non-zero number of samples for {name!r} and {baseline!r}")
    return [a / b for a, b in zip(top, bottom, strict=True)]


@dataclass
class RatioSpread:
    """How ``name / baseline`` varied over the repeats of one run."""

    name: str
    baseline: str
    median: float
    q1: float  # 25th percentile: three quarters of the repeats had a larger ratio
    q3: float  # 75th percentile
    low: float
    high: float
    repeats: int

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
    width = max(len(t.name) for t in timings)
    header = f"{'implementation':<{width}}  {'best ms':>8}  {'median ms':>9}  ratio to {label or baseline}"
    lines = [title, header + " (median [middle half])"]
    for t in timings:
        spread = ratio_spread(timings, t.name, baseline)
        lines.append(f"{t.name:<{width}}  {t.best_s * 1e3:>8.3f}  {t.median_s * 1e3:>9.3f}  "
                     f"{spread.median:>5.2f}x [{spread.q1:.2f}-{spread.q3:.2f}]")
    return "\n".join(lines)


class _ExplicitSoftmaxCourse(MultiHeadAttention):
    """The course module, always on the step-by-step softmax path (weights kept)."""

    def forward(self, query, key=None, value=None, **kwargs):
        return super().forward(query, key, value, need_weights=True, **kwargs)


class _NaiveAsTuple(nn.Module):
    """The naive ``nn.ModuleList`` version, returning ``(output, None)`` like the others."""

    def __init__(self, batched: MultiHeadAttention) -> None:
        super().__init__()
        self.naive = naive_from_batched(batched)

    def forward(self, query, key=None, value=None, **_):
        return self.naive(query), None


#: The row labels of every multi-head attention benchmark, one per version of lesson 4.
IMPLEMENTATIONS: tuple[str, ...] = ("loop over heads", "batched", "batched + F.sdpa",
                                    "nn.MultiheadAttention")


def lesson_implementations(
    d_model: int, num_heads: int, *, device="cpu", dtype=torch.float32, seed: int = 0
) -> dict[str, nn.Module]:
    """Lesson 4's four versions, sharing one set of weights, in eval mode, keyed by
    :data:`IMPLEMENTATIONS`: the loop over heads (:class:`~course_utils.naive_mha.
    NaiveMultiHeadAttention`), the batched course module on its step-by-step softmax path
    and on its default ``F.scaled_dot_product_attention`` path, and ``nn.MultiheadAttention``."""
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
    """

    def call(m: nn.Module) -> Callable[[], Tensor]:
        if isinstance(m, nn.MultiheadAttention):
            return lambda: m(x, x, x, need_weights=False)[0]
        return lambda: m(x)[0]

    return {name: call(m) for name, m in modules.items()}


def _sync_for(device: torch.device | str) -> Callable[[], None] | None:
    return torch.cuda.synchronize if torch.device(device).type == "cuda" else None


def _inner_for(fns: dict[str, Callable[[], object]], sync, target_s: float) -> int:
    """Calls per sample so that the slowest function's sample lasts about ``target_s``
    (short samples are dominated by timer and scheduler noise)."""
    once = interleaved_samples(fns, repeats=1, warmup=1, sync=sync)  # warm-up: allocations, kernels
    slowest = max(sample for samples in once.values() for sample in samples)
    return max(1, min(100, math.ceil(target_s / max(slowest, 1e-9))))


def bench_mha(
    batch: int, seq_len: int, d_model: int, num_heads: int, *, repeats: int = 15,
    device="cpu", seed: int = 0, baseline: str = "nn.MultiheadAttention",
    dtype: torch.dtype = torch.float32, num_threads: int | None = None,
    target_sample_s: float = 0.0, lesson: bool = True,
) -> list[Timing]:
    """Time self-attention forward passes (inference: eval + no_grad) of lesson 4's four
    versions (:func:`lesson_implementations`), one row per label of :data:`IMPLEMENTATIONS`.

    ``num_threads``: see :func:`torch_threads`. ``target_sample_s > 0`` repeats short calls
    inside each sample. ``lesson`` is ignored (every benchmark times the lesson's versions);
    it is accepted so that lesson 4's ``lesson=True`` keeps working.
    """
    modules = lesson_implementations(d_model, num_heads, device=device, dtype=dtype, seed=seed)
    if baseline not in modules:
        raise ValueError(f"baseline {baseline!r} is not one of {list(modules)}")
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, seq_len, d_model, generator=gen).to(device, dtype)
    sync = _sync_for(device)
    with torch_threads(num_threads), torch.inference_mode():
        fns = forward_callables(modules, x)
        inner = _inner_for(fns, sync, target_sample_s) if target_sample_s > 0 else 1
        return time_interleaved(fns, baseline=baseline, repeats=repeats, sync=sync, inner=inner,
                                warmup=1 if target_sample_s > 0 else 3)


_SWEEPABLE = ("batch", "seq_len", "d_model", "num_heads")


def sweep_mha(
    vary: str, values: Sequence[int], *, batch: int = 2, seq_len: int = 64, d_model: int = 128,
    num_heads: int = 8, repeats: int = 5, num_threads: int | None = 1,
    target_sample_s: float = 2e-3, baseline: str = "batched", seed: int = 0,
    statistic: str = "min",
):
    """Lesson 4's four versions timed at each value of one size parameter.

    ``vary`` is one of ``batch``, ``seq_len``, ``d_model``, ``num_heads``; the others stay
    fixed. Returns a ``pandas.DataFrame``: one row per value, one column per
    implementation, milliseconds per forward pass (``statistic`` ``"min"``, the best of
    the interleaved repeats, or ``"median"``); each row is measured in one run.
    """
    import pandas as pd

    if vary not in _SWEEPABLE:
        raise ValueError(f"vary must be one of {_SWEEPABLE}, got {vary!r}")
    if not values:
        raise ValueError("values must list at least one size to time")
    if statistic not in ("min", "median"):
        raise ValueError(f"statistic must be 'min' or 'median', got {statistic!r}")
    pick = min if statistic == "min" else statistics.median
    fixed = {"batch": batch, "seq_len": seq_len, "d_model": d_model, "num_heads": num_heads}
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


def plot_sweep(table, ax, *, title: str, ylabel: str = "time per forward pass (ms)", logy: bool = True):
    """Plot :func:`sweep_mha`'s table: one line per implementation, log2 x axis."""
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


# -- the GPU comparison (optional cells of lesson 4) ------------------------------------

#: Largest accepted ``max |device output - CPU float32 output|``, as a fraction of the CPU
#: output's standard deviation (so the tolerance follows the size of the numbers compared).
#: float16 keeps about 3 significant digits, bfloat16 about 2.
TOLERANCES: dict[torch.dtype, float] = {
    torch.float64: 1e-5,
    torch.float32: 1e-4,
    torch.float16: 1e-2,
    torch.bfloat16: 5e-2,
}


@dataclass
class DeviceComparison:
    """Timings on one device and how far each output is from the CPU float32 run."""

    title: str
    timings: list[Timing]
    max_abs_diff: dict[str, float]
    tolerance: float  # accepted max |diff|, as a fraction of reference_std
    reference_std: float
    agree: dict[str, bool]
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def atol(self) -> float:
        """The accepted max |diff| in absolute terms."""
        return self.tolerance * self.reference_std

    def report(self) -> str:
        lines = [format_table(self.title, self.timings, "nn.MHA"), "",
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

    Raises ``RuntimeError`` for a CUDA device when :func:`cuda_unavailable_reason` gives a
    reason. Works on the CPU too (fewer backends run there). On a GPU, memory grows with
    ``batch * num_heads * seq_len**2`` for the versions that build the score tensor; an
    out-of-memory error is PyTorch's ``torch.cuda.OutOfMemoryError``.
    """
    device = torch.device(device)
    if device.type == "cuda" and (why := cuda_unavailable_reason()) is not None:
        raise RuntimeError(f"compare_on_device('cuda') cannot run: {why}. Run it on a machine with "
                           "an NVIDIA GPU and torch >= 2.3, or pass device='cpu'.")
    if dtype not in TOLERANCES:
        raise ValueError(f"dtype must be one of {list(TOLERANCES)}, got {dtype}")
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


# -- command line ----------------------------------------------------------------------

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
    p = subparsers.add_parser("mha", help="loop over heads vs batched vs F.sdpa vs nn.MultiheadAttention")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for torch (default: torch's choice); 1 is steadiest when busy")
    p.set_defaults(run=_main_mha)


#: Modules that each add one subcommand with ``add_bench_parser(subparsers)`` (besides this
#: module's ``mha``); imported when the command line runs, so they may import this module.
SUBCOMMANDS: tuple[str, ...] = ("course_utils.train", "course_utils.bench_gqa", "course_utils.bench_memory")


def main(argv: list[str] | None = None) -> None:
    """``python -m course_utils.bench <subcommand> [options]``; see ``--help``."""
    parser = argparse.ArgumentParser(prog="python -m course_utils.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="which", required=True)
    add_bench_parser(subparsers)
    for module in SUBCOMMANDS:
        importlib.import_module(module).add_bench_parser(subparsers)
    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()

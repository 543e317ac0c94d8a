"""Side-by-side benchmarks that print tables of times and ratios.

Run ``python -m course_utils.bench mha`` (or ``train``; see ``--help``). Every ratio
is measured in one run, with the implementations interleaved repeat by repeat, so a
machine that speeds up or slows down affects all of them alike; :func:`ratio_spread`
says how much the ratio varied from repeat to repeat.

Lesson 4 uses the helpers below: :func:`bench_mha` (one table), :func:`sweep_mha`
(timings across sequence lengths or head counts, for a plot), :func:`count_dispatched_ops`
(how many tensor operations one forward pass runs) and, on a CUDA GPU,
:func:`compare_on_device` (including the ``F.scaled_dot_product_attention`` backends).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import LoopMultiHeadAttention, MultiHeadAttention
from .env import torch_threads
from .naive_mha import naive_from_batched

__all__ = [
    "Timing",
    "time_interleaved",
    "format_table",
    "paired_ratios",
    "RatioSpread",
    "ratio_spread",
    "format_spread_table",
    "torch_threads",
    "mha_implementations",
    "LESSON_IMPLEMENTATIONS",
    "lesson_implementations",
    "forward_callables",
    "bench_mha",
    "sweep_mha",
    "plot_sweep",
    "count_dispatched_ops",
    "SDPA_BACKENDS",
    "SDPA_WARNING_HEADERS",
    "TOLERANCES",
    "reason_from_warnings",
    "skip_detail",
    "precision_notes",
    "backend_rejection_reason",
    "sdpa_backend_callables",
    "cuda_unavailable_reason",
    "DeviceComparison",
    "compare_on_device",
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


def time_interleaved(
    fns: dict[str, Callable[[], object]],
    *,
    baseline: str,
    repeats: int = 15,
    warmup: int = 3,
    inner: int = 1,
    sync: Callable[[], None] | None = None,
) -> list[Timing]:
    """Median wall time of each callable over ``repeats`` interleaved rounds.

    Each round calls every function ``inner`` times in turn (A, B, C, A, B, C, ...).
    ``sync`` (e.g. ``torch.cuda.synchronize``) runs before each clock read.
    """
    if baseline not in fns:
        raise ValueError(f"baseline {baseline!r} is not one of {list(fns)}")
    sync = sync or (lambda: None)
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            sync()
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            sync()
            samples[name].append((time.perf_counter() - start) / inner)
    base = statistics.median(samples[baseline])
    return [Timing(n, statistics.median(s), statistics.median(s) / base, s) for n, s in samples.items()]


def format_table(title: str, timings: list[Timing], baseline: str) -> str:
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


class _SDPAInsideCourse(MultiHeadAttention):
    """The course module, but always on ``F.scaled_dot_product_attention``."""

    def forward(self, query, key=None, value=None, **_):  # noqa: D401 - benchmark helper
        q, k, v = self.project_qkv(query, query if key is None else key,
                                   query if value is None else value)
        return self.out_proj(self.merge_heads(F.scaled_dot_product_attention(q, k, v))), None


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


def mha_implementations(
    d_model: int, num_heads: int, *, device="cpu", dtype=torch.float32, seed: int = 0
) -> dict[str, nn.Module]:
    """The same weights in six modules, all in eval mode."""
    torch.manual_seed(seed)
    theirs = nn.MultiheadAttention(d_model, num_heads, batch_first=True).to(device, dtype)
    ours = MultiHeadAttention.from_torch(theirs)
    explicit = _ExplicitSoftmaxCourse(d_model, num_heads).to(device, dtype)
    explicit.load_state_dict(ours.state_dict())
    sdpa = _SDPAInsideCourse(d_model, num_heads).to(device, dtype)
    sdpa.load_state_dict(ours.state_dict())
    modules = {
        "nn.MultiheadAttention": theirs,
        "course MHA (batched)": ours,
        "course MHA, explicit softmax": explicit,
        "course MHA, F.sdpa only": sdpa,
        "course MHA, loop over heads": LoopMultiHeadAttention.from_batched(ours),
        "naive ModuleList of heads": _NaiveAsTuple(ours),
    }
    return {name: m.eval() for name, m in modules.items()}


#: The four versions lesson 4 compares: short name -> name in :func:`mha_implementations`.
LESSON_IMPLEMENTATIONS: dict[str, str] = {
    "loop over heads": "naive ModuleList of heads",
    "batched": "course MHA, explicit softmax",
    "batched + F.sdpa": "course MHA (batched)",
    "nn.MultiheadAttention": "nn.MultiheadAttention",
}


def lesson_implementations(
    d_model: int, num_heads: int, *, device="cpu", dtype=torch.float32, seed: int = 0
) -> dict[str, nn.Module]:
    """Lesson 4's four versions (:data:`LESSON_IMPLEMENTATIONS`), sharing one set of weights."""
    every = mha_implementations(d_model, num_heads, device=device, dtype=dtype, seed=seed)
    return {short: every[full] for short, full in LESSON_IMPLEMENTATIONS.items()}


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
    sync = sync or (lambda: None)
    slowest = 0.0
    for fn in fns.values():
        fn()  # warm up (allocations, kernel selection)
        sync()
        start = time.perf_counter()
        fn()
        sync()
        slowest = max(slowest, time.perf_counter() - start)
    return max(1, min(100, math.ceil(target_s / max(slowest, 1e-9))))


def bench_mha(
    batch: int, seq_len: int, d_model: int, num_heads: int, *, repeats: int = 15,
    device="cpu", include: list[str] | None = None, seed: int = 0,
    lesson: bool = False, baseline: str | None = None, dtype: torch.dtype = torch.float32,
    num_threads: int | None = None, target_sample_s: float = 0.0,
) -> list[Timing]:
    """Time self-attention forward passes (inference: eval + no_grad) of each module.

    ``lesson=True`` times lesson 4's four versions under their short names
    (:data:`LESSON_IMPLEMENTATIONS`) instead of every module of :func:`mha_implementations`.
    ``baseline`` defaults to ``"nn.MultiheadAttention"``. ``num_threads``: see
    :func:`torch_threads`. ``target_sample_s > 0`` repeats short calls inside each sample.
    """
    if lesson:
        modules = lesson_implementations(d_model, num_heads, device=device, dtype=dtype, seed=seed)
    else:
        modules = mha_implementations(d_model, num_heads, device=device, dtype=dtype, seed=seed)
    if include is not None:
        modules = {k: v for k, v in modules.items() if k in include or k.startswith("nn.")}
    baseline = baseline or "nn.MultiheadAttention"
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
                            repeats=repeats, lesson=True, baseline=baseline, seed=seed,
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

#: Backends of ``F.scaled_dot_product_attention``: label -> ``torch.nn.attention.SDPBackend`` member.
SDPA_BACKENDS: dict[str, str] = {
    "flash": "FLASH_ATTENTION",
    "memory-efficient": "EFFICIENT_ATTENTION",
    "cuDNN": "CUDNN_ATTENTION",
    "math": "MATH",
}

#: The warning line with which PyTorch (on CUDA) introduces the reasons a backend was rejected.
#: When no allowed backend fits, it warns for every backend in turn, memory-efficient first.
SDPA_WARNING_HEADERS: dict[str, str] = {
    "flash": "Flash attention kernel not used because:",
    "memory-efficient": "Memory efficient kernel not used because:",
    "cuDNN": "cuDNN attention kernel not used because:",
}

#: ``torch.backends.cuda`` functions that say whether (and, with ``debug=True``, why not) a
#: backend accepts given inputs.
_CAN_USE: dict[str, str] = {
    "flash": "can_use_flash_attention",
    "memory-efficient": "can_use_efficient_attention",
    "cuDNN": "can_use_cudnn_attention",
}

#: Errors that only say "no backend was allowed" (CPU, CUDA): the warnings say why.
_GENERIC_SDPA_ERRORS = ("No viable backend", "No available kernel")

#: Largest accepted ``max |device output - CPU float32 output|``, as a fraction of the CPU
#: output's standard deviation (so the tolerance follows the size of the numbers compared).
#: float16 keeps about 3 significant digits, bfloat16 about 2.
TOLERANCES: dict[torch.dtype, float] = {
    torch.float64: 1e-5,
    torch.float32: 1e-4,
    torch.float16: 1e-2,
    torch.bfloat16: 5e-2,
}


def _sdpa_kernel_api():
    """``(SDPBackend, sdpa_kernel)`` from ``torch.nn.attention`` (torch >= 2.3), else ``None``."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return None
    return SDPBackend, sdpa_kernel


def cuda_unavailable_reason() -> str | None:
    """``None`` when the GPU comparison can run, else one sentence saying why not: no CUDA
    GPU, or a PyTorch too old to choose the attention backend (``sdpa_kernel``, torch 2.3)."""
    if not torch.cuda.is_available():
        if torch.version.cuda is None:
            return "this PyTorch is a CPU-only build (torch.version.cuda is None)"
        return "this PyTorch has CUDA support but sees no GPU (torch.cuda.is_available() is False)"
    if _sdpa_kernel_api() is None:
        return (f"this PyTorch ({torch.__version__}) is older than 2.3, and the comparison needs "
                "torch.nn.attention.sdpa_kernel to choose each attention backend")
    return None


def _warning_lines(messages: Sequence[str]) -> list[str]:
    """Non-empty lines of PyTorch warnings, without the "(Triggered internally at ...)" tail."""
    lines = []
    for message in messages:
        for line in str(message).split("(Triggered internally")[0].splitlines():
            if line.strip():
                lines.append(line.strip())
    return lines


def reason_from_warnings(label: str, messages: Sequence[str]) -> str | None:
    """Why backend ``label`` was rejected, read from the warnings PyTorch emitted.

    On CUDA, a call that no allowed backend accepts warns a header per backend (see
    :data:`SDPA_WARNING_HEADERS`; memory-efficient comes first) followed by that backend's
    reasons. This returns the reasons under ``label``'s own header, joined by "; ". Without
    any header it returns the first line; with headers but none for ``label``, ``None``.
    """
    lines = _warning_lines(messages)
    headers = set(SDPA_WARNING_HEADERS.values())
    header = SDPA_WARNING_HEADERS.get(label)
    if header in lines:
        reasons = []
        for line in lines[lines.index(header) + 1:]:
            if line in headers or line.endswith("because:"):
                break
            reasons.append(line)
        return "; ".join(reasons) or None
    if any(line in headers for line in lines):
        return None
    return lines[0] if lines else None


def _sdpa_params(q: Tensor, k: Tensor, v: Tensor):
    """``torch.backends.cuda.SDPAParams`` for unmasked, causal-free attention without dropout
    (torch >= 2.5 takes an extra ``enable_gqa`` flag); ``None`` if this PyTorch has none."""
    params_cls = getattr(torch.backends.cuda, "SDPAParams", None)
    if params_cls is None:
        return None
    for extra in ((False,), ()):
        try:
            return params_cls(q, k, v, None, 0.0, False, *extra)
        except TypeError:
            continue
    return None


def backend_rejection_reason(label: str, q: Tensor, k: Tensor, v: Tensor) -> str | None:
    """Ask PyTorch directly why CUDA backend ``label`` rejects ``q, k, v`` ``(B, h, T, dk)``.

    Uses ``torch.backends.cuda.can_use_<backend>(SDPAParams(...), debug=True)``, which
    warns only about that backend (as Python warnings or printed to stderr: both are
    read). ``None`` when the backend accepts the inputs, when this PyTorch lacks the
    function (e.g. ``can_use_cudnn_attention`` before 2.4), or when it gives no reason (as
    on a CPU-only build).
    """
    checker = getattr(torch.backends.cuda, _CAN_USE.get(label, ""), None)
    params = _sdpa_params(q, k, v) if checker is not None else None
    if params is None:
        return None
    printed: list[str] = []
    with warnings.catch_warnings(record=True) as caught, _capture_stderr(printed):
        warnings.simplefilter("always")
        try:
            usable = checker(params, True)
        except Exception:  # a check that cannot run tells us nothing
            usable = None
    if usable is None or usable:
        return None
    lines = _warning_lines([w.message for w in caught]) + _c10_warning_lines("".join(printed))
    return "; ".join(lines) or None


@contextmanager
def _capture_stderr(into: list[str]) -> Iterator[None]:
    """Collect what C++ code writes to file descriptor 2 during the block.

    The ``can_use_*`` checks are plain bindings: depending on the build, their debug
    warnings arrive as Python warnings or are printed by C++ straight to stderr.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            into.append(tmp.read().decode(errors="replace"))


def _c10_warning_lines(text: str) -> list[str]:
    """The messages of C++ warnings as printed to stderr, e.g.
    ``[W1122 10:00:00.1 sdp_utils.cpp:612] Warning: <message> (function operator())``."""
    lines = []
    for line in text.splitlines():
        if "Warning: " in line:
            message = line.split("Warning: ", 1)[1]
            lines.append(re.sub(r"\s*\(function .*\)\s*$", "", message).strip())
    return [line for line in lines if line]


def skip_detail(label: str, error: str, warning_messages: Sequence[str], direct: str | None = None) -> str:
    """The reason to show for a skipped backend: ``direct`` (from
    :func:`backend_rejection_reason`) if given, else the reasons under ``label``'s header in
    the warnings, else the error's first line, unless that line is only PyTorch's generic
    "no backend" message (CPU: "No viable backend ...", CUDA: "No available kernel. Aborting
    execution."), which says nothing about this backend: then ``""``."""
    detail = direct or reason_from_warnings(label, warning_messages)
    if detail:
        return detail
    first = (error.splitlines() or [""])[0]
    return "" if any(g in first for g in _GENERIC_SDPA_ERRORS) else first


def sdpa_backend_callables(
    module: MultiHeadAttention, x: Tensor, backends: dict[str, str] | None = None
) -> tuple[dict[str, Callable[[], Tensor]], dict[str, str]]:
    """One callable per ``F.scaled_dot_product_attention`` backend that can run here.

    Each callable runs ``module(x)`` (the course module, whose forward calls
    ``F.scaled_dot_product_attention``) with only that backend allowed, via
    ``torch.nn.attention.sdpa_kernel``. Returns ``(callables keyed "F.sdpa [label]",
    {label: why it cannot run})``: a backend is skipped when this PyTorch lacks it or
    rejects these inputs (the device, dtype or head width). On CUDA the reason comes from
    :func:`backend_rejection_reason`, else from :func:`reason_from_warnings`.
    """
    if not isinstance(module, MultiHeadAttention):
        raise TypeError(f"expected a course MultiHeadAttention, got {type(module).__name__}")
    backends = SDPA_BACKENDS if backends is None else backends
    api = _sdpa_kernel_api()
    if api is None:
        why = f"choosing a backend needs torch >= 2.3 (torch.nn.attention), found {torch.__version__}"
        return {}, {label: why for label in backends}
    SDPBackend, sdpa_kernel = api
    with torch.inference_mode():
        q, k, v = module.project_qkv(x, x, x)  # (B, h, T, dk): what the module passes to SDPA
    dtype_name = str(x.dtype).replace("torch.", "")
    fns: dict[str, Callable[[], Tensor]] = {}
    skipped: dict[str, str] = {}
    for label, member in backends.items():
        backend = getattr(SDPBackend, member, None)
        if backend is None:
            skipped[label] = f"this PyTorch has no SDPBackend.{member}"
            continue

        def run(backend=backend) -> Tensor:
            with sdpa_kernel(backend):
                return module(x)[0]

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with torch.inference_mode():
                    run()
            except Exception as exc:  # any refusal means "cannot run here"
                direct = backend_rejection_reason(label, q, k, v) if x.device.type == "cuda" else None
                detail = skip_detail(label, str(exc), [w.message for w in caught], direct)
                skipped[label] = (f"not available for {x.device.type} {dtype_name} inputs with head "
                                  f"width {module.d_k}" + (f" ({detail[:200]})" if detail else ""))
                continue
        fns[f"F.sdpa [{label}]"] = run
    return fns, skipped


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


def precision_notes(device: str | torch.device, dtype: torch.dtype) -> list[str]:
    """A warning line when float32 matmuls on a CUDA device may run in TF32."""
    precision = torch.get_float32_matmul_precision()
    if torch.device(device).type != "cuda" or dtype != torch.float32 or precision == "highest":
        return []
    return [f"note: torch.get_float32_matmul_precision() is {precision!r}, so float32 matmuls may use "
            "TF32 (about 3 significant digits) and differ from the CPU by more than the tolerance; "
            "torch.set_float32_matmul_precision('highest') restores full float32."]


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
        for loop in ("naive ModuleList of heads", "course MHA, loop over heads"):
            print(ratio_spread(timings, loop, "course MHA, explicit softmax").verdict())
        print()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m course_utils.bench", description=__doc__)
    sub = parser.add_subparsers(dest="which", required=True)
    p_mha = sub.add_parser("mha", help="course MHA vs loop vs nn.MultiheadAttention vs SDPA")
    p_mha.add_argument("--repeats", type=int, default=15)
    p_mha.add_argument("--device", default="cpu")
    p_mha.add_argument("--threads", type=int, default=None,
                       help="CPU threads for torch (default: torch's choice); 1 is steadiest when busy")
    p_mha.set_defaults(run=_main_mha)
    try:
        from .train import add_bench_parser  # lesson 5 onwards
    except ImportError:
        pass
    else:
        add_bench_parser(sub)
    from .bench_memory import add_memory_parser  # peak memory of every notebook
    add_memory_parser(sub)
    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()

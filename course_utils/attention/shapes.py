"""Shapes, parameters and multiply-adds of multi-head attention, measured on real tensors.

:func:`trace_shapes` runs a :class:`~course_utils.attention.mha.MultiHeadAttention` layer
step by step with its own weights (project, ``view``, ``transpose``, scores, softmax,
attend, transpose back, merge, W_O), records each step's real shape, layout and
multiply-adds (counted by ``torch.utils.flop_counter``), and checks that the result
equals the module's own forward pass.

Symbols: B batch, T sequence length (Tq, Tk for cross-attention), d = d_model,
h heads, dk = d_model // h. Weights are written as in the formulas (``x @ W``), so
W_Q is ``(d, d)``; ``nn.Linear`` stores the transpose, ``(out, in)``.

:class:`TraceStep`, :class:`ShapeTrace`, :class:`AttentionMacs` are frozen records filled by
this module's validated functions: each checks its fields when it is built and cannot be changed
afterwards, so what its methods read is what was checked.
"""

from __future__ import annotations

import math
import numbers
import os
import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from .hooks import run_with_cache
from .mha import MultiHeadAttention
from .native_output import native_stderr_captured
from .validation import (
    MAX_DECIMALS,
    check_attention_fits,
    check_callable,
    check_dims_not_empty,
    check_distinct,
    check_flag,
    check_head_dims,
    check_int,
    check_int_list,
    check_matches_module,
    check_record,
    check_stream,
    check_tensor,
    freeze_fields,
    shown,
)

__all__ = [
    "TraceStep",
    "ShapeTrace",
    "trace_shapes",
    "validate_dims",
    "count_parameters",
    "mha_parameter_count",
    "parameter_table",
    "AttentionMacs",
    "mha_macs",
    "measured_macs",
    "peak_allocated_bytes",
    "cost_table",
    "dimension_report",
    "frame_to_text",
]

# A live trace allocates B*T*d floats several times and B*h*T*T for the scores.
MAX_REPORT_ELEMENTS = 20_000_000


# ---------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------
def validate_dims(
    d_model: int, num_heads: int, *, batch: int = 1, seq_len: int = 1, kv_len: int | None = None
) -> int:
    """Check the sizes of a multi-head attention layer and its input; return ``dk``.

    Raises ``TypeError`` for a non-int and ``ValueError`` for a size < 1 or a
    ``d_model`` that ``num_heads`` does not divide.
    """
    batch, seq_len, d_model, num_heads = (check_int(value, name, minimum=1) for name, value in (
        ("batch", batch), ("seq_len", seq_len), ("d_model", d_model), ("num_heads", num_heads)))
    if kv_len is not None:
        kv_len = check_int(kv_len, "kv_len", minimum=1)
    return check_head_dims(d_model, num_heads)  # the argument's own name (battery 29)


def _exact_sizes(*sizes: int) -> tuple[int, ...]:
    """Checked sizes as Python ints, whose products are exact however large: a product of NumPy
    int64 sizes wraps around past 2**63 (2**20 * 2**20 * 2**12 * 2**12 gives 0) with only a
    RuntimeWarning, which a notebook may hide."""
    return tuple(int(n) for n in sizes)


# ---------------------------------------------------------------------------------
# the shape trace
# ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class TraceStep:
    """One recorded step. ``macs``: multiply-adds of matrix products in this step."""

    name: str
    code: str
    symbolic: tuple[str, ...]
    shape: tuple[int, ...]
    macs: int
    contiguous: bool
    is_parameter: bool = False

    def __post_init__(self) -> None:
        freeze_fields(self)  # a list given for symbolic or shape is kept as a tuple
        check_record(self)
        if len(self.symbolic) != len(self.shape):  # symbolic_text names each dim of shape
            raise ValueError(f"TraceStep.symbolic must name each of the {len(self.shape)} dims of shape "
                             f"{self.shape}, got {self.symbolic}")

    @property
    def symbolic_text(self) -> str:
        return "(" + ", ".join(self.symbolic) + ")"


@dataclass(frozen=True)
class ShapeTrace:
    """The steps of one multi-head attention forward pass, in order.

    ``sizes`` gives each symbol's size (``{"B": 2, "T": 10, ...}``). ``tensors`` holds every
    recorded tensor by step name (detached). ``max_abs_diff`` compares the traced output and
    weights with the module's own forward pass: NaN until compared, and it may be infinite (one
    side overflowed where the other did not), so the record takes both.

    The record is frozen and checked whole when built (:func:`trace_shapes` builds it at the
    end): ``steps`` is kept as a tuple and ``sizes`` / ``tensors`` as read-only mappings (a list or
    dict given is copied), every step's shape must be what ``sizes`` says its symbols are, and
    every tensor must belong to a step of its shape, so :meth:`format` and :meth:`to_frame`
    never answer from a trace changed after its check.
    """

    sizes: dict[str, int]
    steps: tuple[TraceStep, ...] = ()
    tensors: dict[str, Tensor] = field(default_factory=dict)
    max_abs_diff: float = float("nan")

    def __post_init__(self) -> None:
        freeze_fields(self)  # before the check: it sees what is kept
        check_record(self, nan_ok=("max_abs_diff",))  # NaN: not compared yet
        _check_trace_consistent(self)

    def __getitem__(self, name: str) -> TraceStep:
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(f"no step named {shown(name)}; steps: {self.names}")

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.steps]

    def shape(self, name: str) -> tuple[int, ...]:
        return self[name].shape

    @property
    def total_macs(self) -> int:
        return sum(s.macs for s in self.steps)

    def to_frame(self) -> pd.DataFrame:
        """The trace as a table, one row per step (``display`` it for an HTML table)."""
        return pd.DataFrame(
            {
                "step": [s.name for s in self.steps],
                "code": [s.code for s in self.steps],
                "symbolic": [s.symbolic_text for s in self.steps],
                "shape": [str(list(s.shape)) for s in self.steps],
                "matmul MACs": [s.macs for s in self.steps],
                "contiguous": [_layout(s) for s in self.steps],
            }
        )

    def format(self, *, code: bool = True) -> str:
        """The trace as an aligned text table (the ``code`` column is optional)."""
        check_flag(code, "code")
        header = ["step", "code", "symbolic", "shape", "matmul MACs", "contiguous"]
        rows = [[s.name, s.code, s.symbolic_text, str(list(s.shape)), f"{s.macs:,}", _layout(s)]
                for s in self.steps]
        if not code:
            header.pop(1)
            rows = [r[:1] + r[2:] for r in rows]
        return _format_rows(header, rows, right_align={header.index("matmul MACs")})


def _check_trace_consistent(trace: ShapeTrace) -> None:
    """The steps of ``trace`` have distinct names and the shapes ``trace.sizes`` gives their
    symbols; each of its tensors belongs to a step and has that step's shape."""
    seen: set[str] = set()
    for i, step in enumerate(trace.steps):
        if step.name in seen:  # __getitem__ would only ever find the first
            raise ValueError(f"ShapeTrace.steps[{i}] repeats the step name {shown(step.name)}")
        seen.add(step.name)
        unknown = [s for s in step.symbolic if s not in trace.sizes]
        if unknown:
            raise ValueError(f"ShapeTrace.steps[{i}] ({shown(step.name)}) uses the symbol "
                             f"{shown(unknown[0], 60)}, which "
                             f"ShapeTrace.sizes does not give (it gives {sorted(trace.sizes)})")
        expected = tuple(trace.sizes[s] for s in step.symbolic)
        if step.shape != expected:
            raise ValueError(f"ShapeTrace.steps[{i}] ({shown(step.name)}) has shape {step.shape}, but "
                             f"ShapeTrace.sizes makes {step.symbolic_text} = {expected}")
    shapes = {step.name: step.shape for step in trace.steps}
    for name, tensor in trace.tensors.items():
        if name not in shapes:
            raise ValueError(f"ShapeTrace.tensors[{shown(name)}] belongs to no step (steps: {list(shapes)})")
        if tuple(tensor.shape) != shapes[name]:
            raise ValueError(f"ShapeTrace.tensors[{shown(name)}] has shape {tuple(tensor.shape)}, but "
                             f"its step "
                             f"has shape {shapes[name]}")


def _layout(step: TraceStep) -> str:
    if step.is_parameter:
        return "(weight)"
    return "yes" if step.contiguous else "no"


def _format_rows(header: list[str], rows: list[list[str]], right_align: set[int] = frozenset()) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        parts = [str(c).rjust(w) if i in right_align else str(c).ljust(w)
                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


class _Recorder:
    """Runs and records the steps of :func:`trace_shapes`; its ``steps`` and ``tensors`` become the
    (frozen) :class:`ShapeTrace` at the end."""

    def __init__(self, sizes: dict[str, int], keep: bool) -> None:
        self.sizes, self.keep = sizes, keep
        self.steps: list[TraceStep] = []
        self.tensors: dict[str, Tensor] = {}

    def __call__(self, name: str, code: str, symbolic: tuple[str, ...], run: Callable[[], Tensor],
                 *, is_parameter: bool = False) -> Tensor:
        with _flop_counter() as counter:
            t = run()
        expected = tuple(self.sizes[s] for s in symbolic)
        if tuple(t.shape) != expected:  # the explanation and the tensor disagree: a bug
            raise RuntimeError(f"step {name}: expected {symbolic} = {expected}, got {tuple(t.shape)}")
        self.steps.append(TraceStep(name, code, symbolic, tuple(t.shape),
                                          counter.get_total_flops() // 2, t.is_contiguous(),
                                          is_parameter))
        if self.keep:
            self.tensors[name] = t.detach()
        return t


def trace_shapes(
    module: MultiHeadAttention,
    query: Tensor,
    key_value: Tensor | None = None,
    *,
    head: int = 0,
    keep_tensors: bool = True,
) -> ShapeTrace:
    """Run ``module`` step by step on ``query`` ``(B, Tq, d)`` and record every shape.

    ``key_value`` ``(B, Tk, d)`` makes it cross-attention (default: self-attention, and
    the symbol ``T`` stands for both lengths). ``head`` picks the head whose slice
    ``W_Q_i`` of the stacked W_Q is shown. Dropout is not applied. Every step that the
    module's own forward also names is compared with what passes its hook point there (the
    heads ``q``, ``k``, ``v``, the weights, each head's output ``z``) and the output with
    ``module(..., need_weights=True)`` (in eval mode): the largest difference is ``max_abs_diff``.
    """
    if not isinstance(module, MultiHeadAttention):
        raise TypeError(f"module must be a course_utils MultiHeadAttention, got {type(module).__name__}")
    d, h, dk = module.d_model, module.num_heads, module.d_k
    cross = key_value is not None
    kv = key_value if cross else query
    for name, t in (("query", query), ("key_value", kv)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim != 3 or t.shape[-1] != d:
            raise ValueError(f"{name} must have shape (B, T, d_model={d}), got {tuple(t.shape)}")
        check_tensor(t, name, ndim=3)  # floating point: an integer tensor would fail inside the projection
        check_dims_not_empty(t, name)  # an empty batch or sequence would fail in the last max()
        check_matches_module(t, name, module._weight())
    if kv.shape[0] != query.shape[0]:
        raise ValueError(f"query and key_value must share the batch size, got {tuple(query.shape)} "
                         f"and {tuple(kv.shape)}")
    head = check_int(head, "head", minimum=0)
    check_flag(keep_tensors, "keep_tensors")
    if head >= h:
        raise ValueError(f"head must be in 0..{h - 1}, got {head}")
    B, Tq, _ = query.shape
    Tk = kv.shape[1]
    T, S = ("Tq", "Tk") if cross else ("T", "T")
    sizes = {"B": B, "T": Tq, "Tq": Tq, "Tk": Tk, "d": d, "h": h, "dk": dk}
    rec = _Recorder(sizes, keep_tensors)
    src = "c" if cross else "x"

    w_q, w_k, w_v = module.in_proj.weight.split(d, dim=0)  # (d, d) each, stored (out, in)
    b = module.in_proj.bias
    b_q, b_k, b_v = b.split(d) if b is not None else (None, None, None)
    with torch.no_grad():
        rec("input", "x" if not cross else "x (queries); c (keys/values)", ("B", T, "d"), lambda: query)
        W_Q = rec("W_Q", "in_proj.weight[:d].T", ("d", "d"), lambda: w_q.T, is_parameter=True)
        rec(f"W_Q_{head}", f"W_Q[:, {head}*dk:{head + 1}*dk]", ("d", "dk"),
            lambda: W_Q[:, head * dk:(head + 1) * dk], is_parameter=True)
        q = rec("Q", "x @ W_Q + b_Q", ("B", T, "d"), lambda: F.linear(query, w_q, b_q))
        k = rec("K", f"{src} @ W_K + b_K", ("B", S, "d"), lambda: F.linear(kv, w_k, b_k))
        v = rec("V", f"{src} @ W_V + b_V", ("B", S, "d"), lambda: F.linear(kv, w_v, b_v))
        q_view = rec("Q_view", f"Q.view(B, {T}, h, dk)", ("B", T, "h", "dk"), lambda: q.view(B, Tq, h, dk))
        q_h = rec("Q_heads", "Q_view.transpose(1, 2)", ("B", "h", T, "dk"), lambda: q_view.transpose(1, 2))
        k_h = rec("K_heads", f"K.view(B, {S}, h, dk).transpose(1, 2)", ("B", "h", S, "dk"),
                  lambda: k.view(B, Tk, h, dk).transpose(1, 2))
        v_h = rec("V_heads", f"V.view(B, {S}, h, dk).transpose(1, 2)", ("B", "h", S, "dk"),
                  lambda: v.view(B, Tk, h, dk).transpose(1, 2))
        scores = rec("scores", "Q_heads @ K_heads.transpose(-2, -1) / sqrt(dk)", ("B", "h", T, S),
                     lambda: q_h @ k_h.transpose(-2, -1) / math.sqrt(dk))
        weights = rec("weights", "softmax(scores, dim=-1)", ("B", "h", T, S),
                      lambda: torch.softmax(scores, dim=-1))
        attend = rec("attend", "weights @ V_heads", ("B", "h", T, "dk"), lambda: weights @ v_h)
        back = rec("transpose_back", "attend.transpose(1, 2)", ("B", T, "h", "dk"),
                   lambda: attend.transpose(1, 2))
        merged = rec("merge", f"transpose_back.contiguous().view(B, {T}, d)", ("B", T, "d"),
                     lambda: back.contiguous().view(B, Tq, d))
        rec("W_O", "out_proj.weight.T", ("d", "d"), lambda: module.out_proj.weight.T, is_parameter=True)
        out = rec("output", "merge @ W_O + b_O", ("B", T, "d"), lambda: module.out_proj(merged))

        was_training = module.training
        module.eval()
        try:  # what the module's own forward computes, read at its hook points
            (ref_out, _), seen = run_with_cache(module, query, kv, kv, need_weights=True)
        finally:
            module.train(was_training)
    pairs = [(q_h, seen["hook_q"]), (k_h, seen["hook_k"]), (v_h, seen["hook_v"]),
             (weights, seen["hook_pattern"]), (attend, seen["hook_z"]), (out, ref_out)]
    max_abs_diff = max((mine - theirs).abs().max().item() for mine, theirs in pairs)
    return ShapeTrace(sizes, rec.steps, rec.tensors, max_abs_diff)


# ---------------------------------------------------------------------------------
# parameters
# ---------------------------------------------------------------------------------
def count_parameters(module: nn.Module) -> int:
    """Number of scalars in ``module``'s parameters (what an optimiser updates)."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
    return sum(p.numel() for p in module.parameters())


def mha_parameter_count(d_model: int, num_heads: int, *, bias: bool = True) -> int:
    """Parameters of multi-head attention with dk = d_model / h: ``4 d^2`` (+ ``4 d``).

    W_Q, W_K, W_V are h slices of ``(d, dk)`` each, i.e. ``h * d * dk = d^2`` per
    matrix; W_O is ``(d, d)``. ``num_heads`` only has to divide ``d_model``.
    """
    validate_dims(d_model, num_heads)
    check_flag(bias, "bias")
    d_model, num_heads = _exact_sizes(d_model, num_heads)
    dk = d_model // num_heads
    per_matrix = num_heads * d_model * dk  # h slices of (d, dk)
    weights = 3 * per_matrix + d_model * d_model  # W_Q, W_K, W_V, W_O
    return weights + (4 * d_model if bias else 0)


def _check_head_counts(d_model: object, head_counts: object) -> list[int]:
    """``head_counts``: distinct positive ints, each dividing ``d_model``; an error names the entry
    (``head_counts[1]``), not ``num_heads``, which the tables' callers never pass."""
    head_counts = check_distinct(check_int_list(head_counts, "head_counts", minimum=1), "head_counts",
                                 "head counts (each is one row of the table, indexed by h)")
    for i, h in enumerate(head_counts):
        check_head_dims(d_model, h, heads_name=f"head_counts[{i}]")
    return head_counts


def parameter_table(d_model: int, head_counts: Iterable[int], *, bias: bool = True) -> pd.DataFrame:
    """Per h: one head's W_Q^i, h of them, the formula and the real module's count. ``head_counts``
    is a list of distinct positive ints, each dividing ``d_model``: an entry that does not is a
    ValueError naming it (``head_counts[0] = 3``) and the head counts that divide ``d_model``."""
    rows = []
    head_counts = _check_head_counts(d_model, head_counts)
    for h in head_counts:
        dk = validate_dims(d_model, h)
        with torch.random.fork_rng(devices=[]):  # leave the caller's random stream alone
            module = MultiHeadAttention(d_model, h, bias=bias)
        head_slice = module.in_proj.weight[:d_model].T[:, :dk]  # W_Q^0 as (d, dk)
        real = count_parameters(module)
        formula = mha_parameter_count(d_model, h, bias=bias)
        rows.append({"h": h, "d_k": dk, "W_Q^i shape": str(tuple(head_slice.shape)),
                     "W_Q^i params": head_slice.numel(), "h x W_Q^i": h * head_slice.numel(),
                     "formula": formula, "module": real, "equal": formula == real})
    return pd.DataFrame(rows).set_index("h")


# ---------------------------------------------------------------------------------
# multiply-adds
# ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class AttentionMacs:
    """Multiply-adds of one multi-head attention forward pass, by part.

    Softmax, scaling and bias additions are element-wise (O(B h T^2) and O(B T d)) and
    not counted. One multiply-add is two floating-point operations.
    """

    qkv_projections: int
    scores: int
    attend: int
    output_projection: int

    def __post_init__(self) -> None:
        check_record(self)

    @property
    def total(self) -> int:
        return self.qkv_projections + self.scores + self.attend + self.output_projection

    @property
    def flops(self) -> int:
        return 2 * self.total


def mha_macs(
    batch: int, seq_len: int, d_model: int, num_heads: int, *, kv_len: int | None = None
) -> AttentionMacs:
    """Multiply-adds for ``(B, T, d)`` queries attending over ``kv_len`` keys (default T).

    Each of the h heads spends ``Tq * Tk * dk`` on Q K^T and the same on weights @ V
    per sequence, so the h heads together spend ``Tq * Tk * d``: h cancels.
    """
    dk = validate_dims(d_model, num_heads, batch=batch, seq_len=seq_len, kv_len=kv_len)
    tk = seq_len if kv_len is None else kv_len
    batch, seq_len, tk, d_model, num_heads = _exact_sizes(batch, seq_len, tk, d_model, num_heads)
    per_head = batch * seq_len * tk * dk
    return AttentionMacs(
        qkv_projections=batch * (seq_len + 2 * tk) * d_model * d_model,
        scores=num_heads * per_head,
        attend=num_heads * per_head,
        output_projection=batch * seq_len * d_model * d_model,
    )


def _flop_counter() -> FlopCounterMode:
    """torch's operation counter; a FileNotFoundError saying why when the current folder is gone:
    its first use imports ``torch._dynamo``, whose config reads the current folder, and failed with
    a bare "[Errno 2] No such file or directory" (battery 27)."""
    if "torch._dynamo" not in sys.modules:
        try:
            os.getcwd()
        except OSError as err:
            raise FileNotFoundError(
                f"the current folder cannot be read ({err.strerror}; was it deleted?): torch's "
                f"operation counter (FlopCounterMode) needs it the first time it runs; change to an "
                f"existing folder (os.chdir) and try again") from None
    return FlopCounterMode(display=False)


def measured_macs(module: MultiHeadAttention, x: Tensor) -> int:
    """Multiply-adds PyTorch actually performs in ``module(x, need_weights=True)``,
    counted by ``torch.utils.flop_counter.FlopCounterMode`` (matrix products only). ``x`` is
    ``(B, T, d_model)`` with ``B >= 1`` (an empty batch is refused, as the module refuses it)."""
    if not isinstance(module, MultiHeadAttention):  # it is called with need_weights=True
        raise TypeError(f"module must be the course's MultiHeadAttention (it is called as module(x, "
                        f"need_weights=True)), got {type(module).__name__}")
    check_stream(x, "x", d_model=module.d_model, weight=module._weight())  # named x, not query
    with torch.no_grad(), _flop_counter() as counter:
        module(x, need_weights=True)
    return counter.get_total_flops() // 2


def peak_allocated_bytes(fn: Callable[[], object]) -> int:
    """Peak of the CPU memory that ``fn()`` allocates beyond what exists before it runs.

    Replays every allocation and free that ``torch.profiler`` records during the call
    (inside kernels too) and returns the highest running total, in bytes. Tensors that
    ``fn`` returns count, as they are allocated inside it. The buffers of some kernels
    scale with the number of threads: fix it (``torch_threads(1)``) to compare runs.
    """
    check_callable(fn, "fn", "a function taking no arguments", nargs=0)
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with warnings.catch_warnings():
        # torch 2.11 warns that the profiler "clears events at the end of each cycle" (one cycle
        # here); its C++ side prints a line with a timestamp: neither belongs in a lesson's output
        warnings.filterwarnings("ignore", message=".*Profiler clears events", category=UserWarning)
        with native_stderr_captured():
            prof.start()
        try:
            fn()
        finally:
            with native_stderr_captured():
                prof.stop()
    records = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    running = peak = 0
    for record in sorted(records, key=lambda e: e.start_ns()):  # in the order they happened
        running += record.nbytes()
        peak = max(peak, running)
    return peak


def cost_table(batch: int, seq_len: int, d_model: int, head_counts: Iterable[int]) -> pd.DataFrame:
    """Per h: Q K^T multiply-adds per head and for all heads, the other parts, the
    formula total, and the total counted on a real module's forward pass. ``head_counts`` as in
    :func:`parameter_table`: an entry that does not divide ``d_model`` is named (``head_counts[0]``)."""
    rows = []
    head_counts = _check_head_counts(d_model, head_counts)
    for h in head_counts:
        mha_macs(batch, seq_len, d_model, h)  # checks every size before any tensor is made
    batch, seq_len, d_model = (int(v) for v in (batch, seq_len, d_model))  # exact products below
    check_attention_fits(batch, seq_len, d_model, max(head_counts))  # the measured column's forward pass
    x = torch.zeros(batch, seq_len, d_model)
    for h in head_counts:
        macs = mha_macs(batch, seq_len, d_model, h)
        with torch.random.fork_rng(devices=[]):
            module = MultiHeadAttention(d_model, h)
        measured = measured_macs(module, x)
        rows.append({"h": h, "d_k": d_model // h, "QK^T per head": macs.scores // h,
                     "QK^T all heads": macs.scores, "AV all heads": macs.attend,
                     "Q,K,V proj": macs.qkv_projections, "W_O": macs.output_projection,
                     "total": macs.total, "measured": measured, "equal": measured == macs.total})
    return pd.DataFrame(rows).set_index("h")


def frame_to_text(frame: pd.DataFrame, decimals: int = 3) -> str:
    """A table as text for printed, checked output: integers with thousands separators,
    floats with ``decimals`` decimals (never ``-0.000``), booleans and strings as they are.
    ``decimals``: an int in 0..:data:`~course_utils.attention.validation.MAX_DECIMALS` (15: a
    float64 holds about 15 significant digits, so more decimals print rounding noise)."""
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"frame must be a pandas DataFrame (such as parameter_table returns), got "
                        f"{type(frame).__name__} {shown(frame, 60)}")
    decimals = check_int(decimals, "decimals", minimum=0, maximum=MAX_DECIMALS)

    def fmt(value: object) -> str:
        if isinstance(value, (bool, np.bool_)):
            return str(bool(value))
        if isinstance(value, numbers.Integral):
            return f"{int(value):,}"
        if isinstance(value, numbers.Real):
            rounded = round(float(value), decimals) + 0.0  # + 0.0 turns -0.0 into 0.0
            return f"{rounded:.{decimals}f}"
        return str(value)

    return frame.map(fmt).to_string()


# ---------------------------------------------------------------------------------
# a report for given sizes (used by the widget and its static fallback)
# ---------------------------------------------------------------------------------
def dimension_report(batch: int, seq_len: int, d_model: int, num_heads: int) -> str:
    """Shape table, parameter count and multiply-adds for these sizes, as text.

    Never raises: an invalid combination returns a message that says what is wrong.
    The shapes come from a real forward pass (the global random state is untouched).
    """
    try:
        dk = validate_dims(d_model, num_heads, batch=batch, seq_len=seq_len)
    except (TypeError, ValueError) as err:
        return f"Invalid combination: {err}"
    batch, seq_len, d_model, num_heads = map(int, (batch, seq_len, d_model, num_heads))  # plain, for the text
    elements = batch * seq_len * d_model * 8 + batch * num_heads * seq_len * seq_len * 2
    if elements > MAX_REPORT_ELEMENTS:
        return (f"Too large for a live trace: about {elements:,} numbers would be allocated "
                f"(limit {MAX_REPORT_ELEMENTS:,}). Use smaller batch, seq_len or d_model.")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        module = MultiHeadAttention(d_model, num_heads)
        x = torch.randn(batch, seq_len, d_model)
    trace = trace_shapes(module, x, keep_tensors=False)
    macs = mha_macs(batch, seq_len, d_model, num_heads)
    params = count_parameters(module)
    lines = [
        f"B = {batch}, T = {seq_len}, d_model = {d_model}, h = {num_heads}  ->  d_k = d_v = {dk}",
        "",
        trace.format(code=False),
        "",
        f"parameters: 4*d^2 + 4*d = {mha_parameter_count(d_model, num_heads):,} "
        f"(real module: {params:,}; without biases {4 * d_model * d_model:,})",
        f"multiply-adds: Q,K,V projections {macs.qkv_projections:,} + QK^T {macs.scores:,} "
        f"+ AV {macs.attend:,} + W_O {macs.output_projection:,}",
        f"             = {macs.total:,} (traced: {trace.total_macs:,}), i.e. {macs.flops:,} FLOPs",
    ]
    return "\n".join(lines)

"""Side-by-side benchmarks that print a table of medians and ratios.

Run ``python -m course_utils.bench mha`` (or ``train``; see ``--help``). Every ratio
is measured in one run, with the implementations interleaved repeat by repeat, so a
machine that speeds up or slows down affects all of them alike.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .attention import LoopMultiHeadAttention, MultiHeadAttention

__all__ = ["Timing", "time_interleaved", "format_table", "mha_implementations", "bench_mha"]


@dataclass
class Timing:
    name: str
    median_s: float
    ratio: float  # median / baseline median


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
    return [Timing(n, statistics.median(s), statistics.median(s) / base) for n, s in samples.items()]


def format_table(title: str, timings: list[Timing], baseline: str) -> str:
    width = max(len(t.name) for t in timings)
    lines = [title, f"{'implementation':<{width}}  {'median ms':>10}  {'ratio to ' + baseline:>s}"]
    for t in timings:
        lines.append(f"{t.name:<{width}}  {t.median_s * 1e3:>10.3f}  {t.ratio:>8.2f}x")
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


def mha_implementations(
    d_model: int, num_heads: int, *, device="cpu", dtype=torch.float32, seed: int = 0
) -> dict[str, nn.Module]:
    """The same weights in five modules, all in eval mode."""
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
    }
    return {name: m.eval() for name, m in modules.items()}


def bench_mha(
    batch: int, seq_len: int, d_model: int, num_heads: int, *, repeats: int = 15,
    device="cpu", include: list[str] | None = None, seed: int = 0,
) -> list[Timing]:
    """Time self-attention forward passes (inference: eval + no_grad) of each module."""
    modules = mha_implementations(d_model, num_heads, device=device, seed=seed)
    if include is not None:
        modules = {k: v for k, v in modules.items() if k in include or k.startswith("nn.")}
    x = torch.randn(batch, seq_len, d_model, device=device)

    def call(m: nn.Module) -> Callable[[], object]:
        if isinstance(m, nn.MultiheadAttention):
            return lambda: m(x, x, x, need_weights=False)
        return lambda: m(x)

    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else None
    with torch.inference_mode():
        fns = {name: call(m) for name, m in modules.items()}
        return time_interleaved(fns, baseline="nn.MultiheadAttention", repeats=repeats, sync=sync)


def _main_mha(args: argparse.Namespace) -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, device {args.device}")
    print("forward pass, eval mode, torch.inference_mode(); ratio < 1 means faster than nn.MHA\n")
    for batch, seq_len, d_model, heads in [(8, 256, 512, 8), (2, 32, 64, 4)]:
        timings = bench_mha(batch, seq_len, d_model, heads, repeats=args.repeats,
                            device=args.device)
        title = f"B={batch}, T={seq_len}, d_model={d_model}, h={heads}"
        print(format_table(title, timings, "nn.MHA"), end="\n\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m course_utils.bench", description=__doc__)
    sub = parser.add_subparsers(dest="which", required=True)
    p_mha = sub.add_parser("mha", help="course MHA vs loop vs nn.MultiheadAttention vs SDPA")
    p_mha.add_argument("--repeats", type=int, default=15)
    p_mha.add_argument("--device", default="cpu")
    p_mha.set_defaults(run=_main_mha)
    try:
        from .train import add_bench_parser  # lesson 5 onwards
    except ImportError:
        pass
    else:
        add_bench_parser(sub)
    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()

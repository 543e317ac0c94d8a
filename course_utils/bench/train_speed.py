"""How long the tiny models take to train: ``python -m course_utils.bench train``.

:func:`bench_training` trains each task for a few seeds and reports the seconds and steps to
target that :mod:`course_utils.model.train` measures inside its loop (making batches and
optimiser steps, not evaluations); :func:`format_training_table` prints them with medians.
"""

from __future__ import annotations

import argparse
import math
import numbers
import statistics

import torch

from ..attention.validation import check_distinct, check_int, check_int_list, is_real, items_of, shown
from ..model.train import INDUCTION_TASK, MAX_STEPS, train_agreement, train_induction

__all__ = ["bench_training", "format_training_table", "add_bench_parser"]


def bench_training(
    seeds: tuple[int, ...] = (0, 1, 2),
    *,
    induction_max_steps: int = 400,
    agreement_steps: int = 500,
    device: str = "cpu",
    progress: bool = False,
) -> list[dict[str, float | int | None]]:
    """One row per seed: seconds and steps until held-out induction accuracy >= 0.9
    (evaluated every 10 steps, training stops there, ``induction_heldout_acc`` is the
    accuracy at that point), and for agreement the steps and seconds to 0.99 (evaluated
    every 50 steps) and the accuracy after ``agreement_steps`` steps. Seconds count
    making batches and optimiser steps, not evaluations."""
    seeds = check_distinct(check_int_list(seeds, "seeds", minimum=0), "seeds")
    induction_max_steps = check_int(induction_max_steps, "induction_max_steps", minimum=1, maximum=MAX_STEPS)
    agreement_steps = check_int(agreement_steps, "agreement_steps", minimum=1, maximum=MAX_STEPS)
    rows = []
    for seed in seeds:
        _, ind = train_induction(steps=induction_max_steps, seed=seed, eval_every=10, stop_at_target=True,
                                 progress=progress, device=device)
        _, agr = train_agreement(steps=agreement_steps, seed=seed, eval_every=50, progress=progress,
                                 device=device)
        rows.append({
            "seed": seed,
            "induction_steps_to_0.9": ind.steps_to_target,
            "induction_seconds_to_0.9": ind.seconds_to_target,
            "induction_heldout_acc": ind.final_metrics["heldout"],
            "agreement_steps_to_0.99": agr.steps_to_target,
            "agreement_seconds_to_0.99": agr.seconds_to_target,
            "agreement_seconds": agr.train_seconds,
            "agreement_acc": agr.final_metrics["all"],
            "agreement_acc_attractor": agr.final_metrics["attractor"],
        })
    return rows


def _check_rows(rows: object) -> list[dict]:
    """``rows`` is a non-empty list of :func:`bench_training`'s dicts: a ``seed`` first, then
    numbers (or ``None``) under the same keys in every row. Every number is finite and >= 0
    (seeds, steps, seconds and accuracies all are; NaN and -1.0 seconds printed as times and
    medians: battery 19), and one in a column whose name holds ``acc`` (an accuracy) is at most
    1. A time of 0 is taken: the table divides by nothing, it prints. Returns the rows as a plain
    list, read once: a list whose ``len()`` raises is named (battery 30), and one whose ``len()``
    lies (1000 for an empty list) is judged by the rows it holds (battery 32). A number is any real
    number but a bool (:func:`is_real`: a NumPy float too, returned as a Python float; a str is
    a TypeError); the rows returned are copies holding Python ints and floats."""
    given = type(rows).__name__
    if isinstance(rows, list | tuple):
        rows = items_of(rows, "rows", "a non-empty list of bench_training's dicts")
    if not isinstance(rows, list | tuple) or not rows:
        raise ValueError(f"rows must be a non-empty list of bench_training's dicts, got "
                         f"{given} {shown(rows, 60)}")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise TypeError(f"rows[{i}] must be a dict from bench_training, got {type(row).__name__}")
        if list(row)[:1] != ["seed"] or len(row) < 2:
            raise ValueError(f"rows[{i}] must start with 'seed' and hold at least one measurement, as "
                             f"bench_training's rows do, got the keys {shown(list(row), 120)}")
        if list(row) != list(rows[0]):
            raise ValueError(f"rows[{i}] has the keys {shown(list(row), 120)}, rows[0] has "
                             f"{shown(list(rows[0]), 120)}; every row "
                             "must have the same")
        bad = [k for k, v in row.items() if v is not None and not is_real(v)]
        if bad:
            raise TypeError(f"rows[{i}][{shown(bad[0], 40)}] must be a number or None, got "
                            f"{type(row[bad[0]]).__name__}")
        row = rows[i] = {k: _plain_number(v) for k, v in row.items()}  # a copy: the caller's row is kept
        bad = [k for k, v in row.items()  # (an int is finite: isfinite(10**400) would overflow)
               if v is not None and ((isinstance(v, float) and not math.isfinite(v)) or v < 0)]
        if bad:
            raise ValueError(f"rows[{i}][{shown(bad[0], 40)}] must be a finite number >= 0 (a seed, steps, "
                             f"seconds or an accuracy) or None, got {shown(row[bad[0]], 60)}")
        bad = [k for k, v in row.items() if "acc" in k and v is not None and v > 1]
        if bad:
            raise ValueError(f"rows[{i}][{shown(bad[0], 40)}] is an accuracy (its column names 'acc'): "
                             f"expected "
                             f"a fraction in [0, 1] or None, got {shown(row[bad[0]], 60)}")
    return rows


def _plain_number(value: object) -> int | float | None:
    """A cell of a row, checked by :func:`is_real` (or None), as a Python int or float: a NumPy
    integer or float (``np.float32(0.5)``) prints and sorts as the number it is."""
    if value is None or type(value) in (int, float):
        return value
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def format_training_table(rows: list[dict]) -> str:
    """Rows of :func:`bench_training` plus their median, as an aligned text table.

    Columns whose name contains ``acc`` get 4 decimals, other floats 2; ``None`` (target
    never reached) prints as ``never``, and so does a median over it."""
    rows = _check_rows(rows)
    columns = list(rows[0])

    def cell(column: str, value) -> str:
        if value is None:
            return "never"
        if isinstance(value, float):
            return f"{value:.4f}" if "acc" in column else f"{value:.2f}"
        return str(value)

    table = [[cell(c, r[c]) for c in columns] for r in rows]
    medians = []
    for c in columns[1:]:
        values = [r[c] for r in rows]
        medians.append("never" if any(v is None for v in values) else cell(c, statistics.median(values)))
    table.append(["median", *medians])
    widths = [max(len(c), *(len(row[i]) for row in table)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) for row in table]
    return "\n".join(lines)


def _main_bench(args: argparse.Namespace) -> None:
    print(f"torch {torch.__version__}, training on {args.device} with 1 CPU thread; "
          f"seconds exclude evaluation")
    print("induction: 2-layer attention-only, d=64, 4 heads, batch 64, lr 1e-2; accuracy on periods "
          f"{INDUCTION_TASK.heldout_periods} (never trained on), evaluated every 10 steps")
    print(f"agreement: 2-layer with MLP, d=64, 4 heads, batch 64, lr 1e-2, {args.agreement_steps} steps\n")
    rows = bench_training(tuple(args.seeds), induction_max_steps=args.induction_max_steps,
                          agreement_steps=args.agreement_steps, device=args.device)
    print(format_training_table(rows))


def add_bench_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``train`` with ``python -m course_utils.bench``."""
    from .cli import Distinct, check_subparsers, device_name, seed_number, step_count

    check_subparsers(subparsers, "train")

    p = subparsers.add_parser("train", help="seconds and steps to train induction heads; agreement accuracy")
    p.add_argument("--seeds", type=seed_number, nargs="+", default=[0, 1, 2], action=Distinct)
    p.add_argument("--induction-max-steps", type=step_count, default=400)
    p.add_argument("--agreement-steps", type=step_count, default=500)
    p.add_argument("--device", default="cpu", type=device_name,
                   help="cpu, cuda or cuda:N (checked when parsed: it must be present here)")
    p.set_defaults(run=_main_bench)
